"""SQL texts and row conversions of the SQLite store (private to ``control_plane.store``).

Statements have a fixed text. The few that ``sqlite.py`` builds at run time (``list_resources``,
the ``IN`` lists) interpolate only fixed fragments and ``?`` placeholders: every value is bound.
Rows come back as tuples in the column order of the statements here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from control_plane.store import _codec as codec
from control_plane.store.base import ApiKeyRecord, EdgeRecord, EnrollmentTokenRecord, Event, Resource

__all__ = [
    "EVENT_COLUMNS",
    "FIND_API_KEY",
    "GET_API_KEY",
    "GET_EDGE",
    "GET_ENROLLMENT",
    "GET_ENROLLMENT_BY_HASH",
    "GET_RESOURCE",
    "GET_RESOURCE_VERSION",
    "INSERT_API_KEY",
    "INSERT_EDGE",
    "INSERT_ENROLLMENT",
    "INSERT_EVENT",
    "LIST_API_KEYS",
    "LIST_EDGES",
    "LIST_EDGES_OF_ENVIRONMENT",
    "LIST_ENROLLMENTS",
    "LIST_ENROLLMENTS_OF_ENVIRONMENT",
    "MARK_ENROLLMENT_USED",
    "OLDER_VERSIONS",
    "RESOURCE_COLUMNS",
    "REVOKE_API_KEY",
    "REVOKE_ENROLLMENT",
    "TOUCH_API_KEY",
    "Row",
    "api_key_from_row",
    "api_key_values",
    "edge_from_row",
    "events_from_rows",
    "filter_sql",
    "resource_from_row",
    "token_from_row",
]

RESOURCE_COLUMNS = "id, version, body, created_at, updated_at, archived_at"
EVENT_COLUMNS = "id, seq, type, payload, processed_at"

GET_RESOURCE = (
    "SELECT id, version, body, created_at, updated_at, archived_at FROM resources WHERE kind = ? AND id = ?"
)
GET_RESOURCE_VERSION = (
    "SELECT id, version, body, created_at, updated_at, archived_at"
    " FROM resource_versions WHERE kind = ? AND id = ? AND version = ?"
)
OLDER_VERSIONS = (
    "SELECT id, version, body, created_at, updated_at, archived_at"
    " FROM resource_versions WHERE kind = ? AND id = ? AND version < ?"
    " ORDER BY version DESC LIMIT ?"
)
INSERT_EVENT = (
    "INSERT INTO events (session_id, seq, id, type, payload, processed_at) VALUES (?, ?, ?, ?, ?, ?)"
)
INSERT_ENROLLMENT = (
    "INSERT INTO enrollment_tokens"
    " (id, environment_id, token_hash, created_at, expires_at, used_at, used_by_edge_id, revoked_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_ENROLLMENT_SELECT = (
    "SELECT id, environment_id, token_hash, created_at, expires_at, used_at, used_by_edge_id, revoked_at"
    " FROM enrollment_tokens"
)
GET_ENROLLMENT_BY_HASH = _ENROLLMENT_SELECT + " WHERE token_hash = ?"
GET_ENROLLMENT = _ENROLLMENT_SELECT + " WHERE id = ?"
LIST_ENROLLMENTS = _ENROLLMENT_SELECT + " ORDER BY created_at, id"
LIST_ENROLLMENTS_OF_ENVIRONMENT = _ENROLLMENT_SELECT + " WHERE environment_id = ? ORDER BY created_at, id"
REVOKE_ENROLLMENT = "UPDATE enrollment_tokens SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?"
MARK_ENROLLMENT_USED = (
    "UPDATE enrollment_tokens SET used_at = ?, used_by_edge_id = ? WHERE id = ? AND used_at IS NULL"
)
INSERT_EDGE = (
    "INSERT INTO edges"
    " (id, environment_id, name, cert_serial, cert_fingerprint, created_at, cert_not_after, revoked_at,"
    " previous_cert_fingerprint, previous_cert_not_after, last_seen_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_EDGE_SELECT = (
    "SELECT id, environment_id, name, cert_serial, cert_fingerprint, created_at, cert_not_after, revoked_at,"
    " previous_cert_fingerprint, previous_cert_not_after, last_seen_at"
    " FROM edges"
)
GET_EDGE = _EDGE_SELECT + " WHERE id = ?"
# The ids as one JSON array parameter: no SQL built from the number of ids.
GET_EDGES = _EDGE_SELECT + " WHERE id IN (SELECT value FROM json_each(?))"  # noqa: S608
LIST_EDGES = _EDGE_SELECT + " ORDER BY created_at, id"
LIST_EDGES_OF_ENVIRONMENT = _EDGE_SELECT + " WHERE environment_id = ? ORDER BY created_at, id"
INSERT_API_KEY = (
    "INSERT INTO api_keys"
    " (id, name, key_hash, created_at, revoked_at, scope, environment_ids, expires_at, last_used_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_API_KEY_SELECT = (
    "SELECT id, name, key_hash, created_at, revoked_at, scope, environment_ids, expires_at, last_used_at"
    " FROM api_keys"
)
FIND_API_KEY = _API_KEY_SELECT + " WHERE key_hash = ?"
GET_API_KEY = _API_KEY_SELECT + " WHERE id = ?"
LIST_API_KEYS = _API_KEY_SELECT + " ORDER BY created_at, id"
REVOKE_API_KEY = "UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?"
TOUCH_API_KEY = (
    "UPDATE api_keys SET last_used_at = ? WHERE id = ? AND (last_used_at IS NULL OR last_used_at < ?)"
)

Row = tuple[Any, ...]


def resource_from_row(kind: str, row: Row) -> Resource:
    id, version, body, created_us, updated_us, archived_us = row
    return Resource(
        kind=kind,
        id=id,
        version=version,
        body=codec.loads(body),
        created_at=codec.from_us(created_us),
        updated_at=codec.from_us(updated_us),
        archived_at=codec.opt_from_us(archived_us),
    )


def events_from_rows(session_id: str, rows: Iterable[Row]) -> list[Event]:
    """Rows (id, seq, type, payload, processed_at) as events. A whole replay goes through here, so
    it caches the timestamps (a batch shares one) and binds what it calls locally."""
    times: dict[int, datetime] = {}
    loads, from_us = codec.loads, codec.from_us
    out: list[Event] = []
    for id, seq, type, payload, processed_us in rows:
        processed_at = times.get(processed_us)
        if processed_at is None:
            processed_at = times[processed_us] = from_us(processed_us)
        out.append(Event(id, session_id, seq, type, loads(payload), processed_at))
    return out


def token_from_row(row: Row) -> EnrollmentTokenRecord:
    id, environment_id, token_hash, created_us, expires_us, used_us, used_by, revoked_us = row
    return EnrollmentTokenRecord(
        id=id,
        environment_id=environment_id,
        token_hash=token_hash,
        created_at=codec.from_us(created_us),
        expires_at=codec.from_us(expires_us),
        used_at=codec.opt_from_us(used_us),
        used_by_edge_id=used_by,
        revoked_at=codec.opt_from_us(revoked_us),
    )


def api_key_values(record: ApiKeyRecord) -> Row:
    ids = None if record.environment_ids is None else json.dumps(list(record.environment_ids))
    return (
        record.id,
        record.name,
        record.key_hash,
        codec.to_us(record.created_at, "created_at"),
        codec.opt_to_us(record.revoked_at, "revoked_at"),
        record.scope,
        ids,
        codec.opt_to_us(record.expires_at, "expires_at"),
        codec.opt_to_us(record.last_used_at, "last_used_at"),
    )


def api_key_from_row(row: Row) -> ApiKeyRecord:
    id, name, key_hash, created_us, revoked_us, scope, ids, expires_us, used_us = row
    return ApiKeyRecord(
        id=id,
        name=name,
        key_hash=key_hash,
        created_at=codec.from_us(created_us),
        revoked_at=codec.opt_from_us(revoked_us),
        scope=scope,
        environment_ids=None if ids is None else tuple(json.loads(ids)),
        expires_at=codec.opt_from_us(expires_us),
        last_used_at=codec.opt_from_us(used_us),
    )


def edge_from_row(row: Row) -> EdgeRecord:
    (id, environment_id, name, serial, fingerprint, created_us, not_after_us, revoked_us,
     previous_fingerprint, previous_not_after_us, last_seen_us) = row  # fmt: skip
    return EdgeRecord(
        id=id,
        environment_id=environment_id,
        name=name,
        cert_serial=serial,
        cert_fingerprint=fingerprint,
        created_at=codec.from_us(created_us),
        cert_not_after=codec.from_us(not_after_us),
        revoked_at=codec.opt_from_us(revoked_us),
        previous_cert_fingerprint=previous_fingerprint,
        previous_cert_not_after=codec.opt_from_us(previous_not_after_us),
        last_seen_at=codec.opt_from_us(last_seen_us),
    )


def filter_sql(name: str, value: codec.FilterValue) -> tuple[str, list[Any]]:
    """SQL for one ``list_resources`` filter, with the semantics of ``codec.filter_matches``."""
    path = f'$."{name}"'
    if name == "status" and isinstance(value, str | tuple):
        # The generated, indexed column: the body's status when it is a JSON string, else NULL.
        if isinstance(value, tuple):
            return "status IN (SELECT value FROM json_each(?))", [json.dumps(list(value))]
        return "status = ?", [value]
    if isinstance(value, tuple):  # any of: the values as one JSON array parameter
        return (
            "json_type(body, ?) = 'text' AND json_extract(body, ?) IN (SELECT value FROM json_each(?))",
            [path, path, json.dumps(list(value))],
        )
    if value is None:
        return "json_extract(body, ?) IS NULL", [path]
    if isinstance(value, bool):
        return "json_type(body, ?) = ?", [path, "true" if value else "false"]
    if isinstance(value, int | float):
        return "json_type(body, ?) IN ('integer', 'real') AND json_extract(body, ?) = ?", [path, path, value]
    return "json_type(body, ?) = 'text' AND json_extract(body, ?) = ?", [path, path, value]
