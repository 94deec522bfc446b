"""SQL texts of the PostgreSQL store (private to ``control_plane.store.postgres``).

Statements have a fixed text; the few built at run time (``list_resources``, ``get_events``)
interpolate only fixed fragments and ``$n`` placeholders: every value is bound. Rows come back in
the column order of the SQLite store's statements, and the representation is the same (``bigint``
microseconds, JSON text), so the row conversions of ``_sqlite_sql`` serve both backends.
"""

# ruff: noqa: S608 (the statements here join fixed column lists; every value is a $n parameter)
from __future__ import annotations

import json
from typing import Any

from control_plane.store import _codec as codec

__all__ = [
    "APPEND",
    "ARCHIVE_RESOURCE",
    "EDGE_COLUMNS",
    "EVENT_COLUMNS",
    "FIND_API_KEY",
    "GET_API_KEY",
    "GET_EDGE",
    "GET_EDGES",
    "GET_ENROLLMENT",
    "GET_ENROLLMENT_BY_HASH",
    "GET_RESOURCE",
    "GET_RESOURCE_VERSION",
    "INSERT_API_KEY",
    "INSERT_EDGE",
    "INSERT_ENROLLMENT",
    "LIST_API_KEYS",
    "LIST_EDGES",
    "LIST_EDGES_OF_ENVIRONMENT",
    "LIST_ENROLLMENTS",
    "LIST_ENROLLMENTS_OF_ENVIRONMENT",
    "OLDER_VERSIONS",
    "RESOURCE_COLUMNS",
    "REVOKE_EDGE",
    "filter_sql",
]

RESOURCE_COLUMNS = "id, version, body, created_at, updated_at, archived_at"
EVENT_COLUMNS = "id, seq, type, payload, processed_at"

GET_RESOURCE = f"SELECT {RESOURCE_COLUMNS} FROM resources WHERE kind = $1 AND id = $2"
GET_RESOURCE_VERSION = (
    f"SELECT {RESOURCE_COLUMNS} FROM resource_versions WHERE kind = $1 AND id = $2 AND version = $3"
)
OLDER_VERSIONS = (
    f"SELECT {RESOURCE_COLUMNS} FROM resource_versions WHERE kind = $1 AND id = $2 AND version < $3"
    " ORDER BY version DESC LIMIT $4"
)
ARCHIVE_RESOURCE = (
    "UPDATE resources SET archived_at = $1, updated_at = $1"
    f" WHERE kind = $2 AND id = $3 AND archived_at IS NULL RETURNING {RESOURCE_COLUMNS}"
)
APPEND = (
    "SELECT id, seq, type, payload, processed_at, fresh FROM outpost_append($1, $2, $3, $4, $5, $6, $7, $8)"
)

_ENROLLMENT_COLUMNS = (
    "id, environment_id, token_hash, created_at, expires_at, used_at, used_by_edge_id, revoked_at"
)
INSERT_ENROLLMENT = (
    f"INSERT INTO enrollment_tokens ({_ENROLLMENT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
)
_ENROLLMENT_SELECT = f"SELECT {_ENROLLMENT_COLUMNS} FROM enrollment_tokens"
GET_ENROLLMENT_BY_HASH = _ENROLLMENT_SELECT + " WHERE token_hash = $1"
GET_ENROLLMENT = _ENROLLMENT_SELECT + " WHERE id = $1"
LIST_ENROLLMENTS = _ENROLLMENT_SELECT + " ORDER BY created_at, id"
LIST_ENROLLMENTS_OF_ENVIRONMENT = _ENROLLMENT_SELECT + " WHERE environment_id = $1 ORDER BY created_at, id"

EDGE_COLUMNS = (
    "id, environment_id, name, cert_serial, cert_fingerprint, created_at, cert_not_after, revoked_at,"
    " previous_cert_fingerprint, previous_cert_not_after, last_seen_at"
)
INSERT_EDGE = f"INSERT INTO edges ({EDGE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
_EDGE_SELECT = f"SELECT {EDGE_COLUMNS} FROM edges"
GET_EDGE = _EDGE_SELECT + " WHERE id = $1"
REVOKE_EDGE = (
    "UPDATE edges SET revoked_at = coalesce(revoked_at, $1),"
    " previous_cert_fingerprint = NULL, previous_cert_not_after = NULL"
    f" WHERE id = $2 RETURNING {EDGE_COLUMNS}"
)
GET_EDGES = _EDGE_SELECT + " WHERE id = ANY ($1::text[]) ORDER BY created_at, id"
LIST_EDGES = _EDGE_SELECT + " ORDER BY created_at, id"
LIST_EDGES_OF_ENVIRONMENT = _EDGE_SELECT + " WHERE environment_id = $1 ORDER BY created_at, id"

_API_KEY_COLUMNS = (
    "id, name, key_hash, created_at, revoked_at, scope, environment_ids, expires_at, last_used_at"
)
INSERT_API_KEY = f"INSERT INTO api_keys ({_API_KEY_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
_API_KEY_SELECT = f"SELECT {_API_KEY_COLUMNS} FROM api_keys"
FIND_API_KEY = _API_KEY_SELECT + " WHERE key_hash = $1"
GET_API_KEY = _API_KEY_SELECT + " WHERE id = $1"
LIST_API_KEYS = _API_KEY_SELECT + " ORDER BY created_at, id"


def filter_sql(name: str, value: codec.FilterValue, first: int) -> tuple[str, list[Any]]:
    """SQL for one ``list_resources`` filter with the semantics of ``codec.filter_matches``; its
    parameters are numbered from ``first``. The field name is bound too, never interpolated."""
    if name == "status" and isinstance(value, str | tuple):  # the generated, indexed column
        if isinstance(value, tuple):
            return f"status = ANY (${first}::text[])", [list(value)]
        return f"status = ${first}", [value]
    field = f"(outpost_doc(body) -> ${first})"
    if isinstance(value, tuple):  # any of: a text[] parameter
        return f"jsonb_typeof{field} = 'string' AND {field} #>> '{{}}' = ANY (${first + 1}::text[])", [
            name,
            list(value),
        ]
    if value is None:
        return f"coalesce(jsonb_typeof{field}, 'null') = 'null'", [name]
    if isinstance(value, bool):
        return f"{field} = ${first + 1}::jsonb", [name, "true" if value else "false"]
    if isinstance(value, int | float):
        return f"jsonb_typeof{field} = 'number' AND ({field})::numeric = ${first + 1}::numeric", [
            name,
            str(value),
        ]
    return f"{field} = ${first + 1}::jsonb", [name, json.dumps(value)]
