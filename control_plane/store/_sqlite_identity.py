"""The :class:`~control_plane.store.base.Identity` role of the SQLite store: enrollment tokens,
edges and API keys, a mixin of :class:`~control_plane.store.sqlite.SqliteStore`.

It runs on the store's engine (``_sqlite_engine``): reads on the read-only pool, writes through the
group-committing writer thread, each in its own savepoint. Tokens and keys are stored by hash only.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import datetime

from control_plane.errors import Conflict, NotFound, TokenRejected
from control_plane.store import _codec as codec
from control_plane.store._sqlite_engine import SqliteEngine
from control_plane.store._sqlite_sql import (
    FIND_API_KEY,
    GET_API_KEY,
    GET_EDGE,
    GET_EDGES,
    GET_ENROLLMENT,
    GET_ENROLLMENT_BY_HASH,
    INSERT_API_KEY,
    INSERT_EDGE,
    INSERT_ENROLLMENT,
    LIST_API_KEYS,
    LIST_EDGES,
    LIST_EDGES_OF_ENVIRONMENT,
    LIST_ENROLLMENTS,
    LIST_ENROLLMENTS_OF_ENVIRONMENT,
    MARK_ENROLLMENT_USED,
    REVOKE_API_KEY,
    REVOKE_ENROLLMENT,
    TOUCH_API_KEY,
    api_key_from_row,
    api_key_values,
    edge_from_row,
    token_from_row,
)
from control_plane.store.base import ApiKeyRecord, EdgeRecord, EnrollmentTokenRecord

__all__ = ["SqliteIdentity"]


class SqliteIdentity:
    """Enrollment tokens, edges and API keys on the engine the store sets up (``_engine``)."""

    _engine: SqliteEngine

    # -- enrollment and edges -----------------------------------------------------------------

    async def create_enrollment_token(self, record: EnrollmentTokenRecord) -> None:
        values = (
            record.id,
            record.environment_id,
            record.token_hash,
            codec.to_us(record.created_at, "created_at"),
            codec.to_us(record.expires_at, "expires_at"),
            codec.opt_to_us(record.used_at, "used_at"),
            record.used_by_edge_id,
            codec.opt_to_us(record.revoked_at, "revoked_at"),
        )

        def run(conn: sqlite3.Connection) -> None:
            try:
                conn.execute(INSERT_ENROLLMENT, values)
            except sqlite3.IntegrityError as exc:
                raise Conflict(f"enrollment token {record.id!r} or its hash exists already") from exc

        await self._engine.write(run)

    async def consume_enrollment_token(
        self, token_hash: str, edge_id: str, now: datetime
    ) -> EnrollmentTokenRecord:
        now_us = codec.to_us(now)

        def run(conn: sqlite3.Connection) -> EnrollmentTokenRecord:
            row = conn.execute(GET_ENROLLMENT_BY_HASH, (token_hash,)).fetchone()
            if row is None:
                raise TokenRejected("unknown")
            record = token_from_row(row)
            if record.revoked_at is not None:
                raise TokenRejected("revoked")
            if record.used_at is not None:
                raise TokenRejected("used")
            if row[4] <= now_us:
                raise TokenRejected("expired")
            marked = conn.execute(MARK_ENROLLMENT_USED, (now_us, edge_id, record.id)).rowcount
            if not marked:  # pragma: no cover - the writer thread serializes consumers
                raise TokenRejected("used")
            return token_from_row((*row[:5], now_us, edge_id, None))

        return await self._engine.write(run)

    async def list_enrollment_tokens(self, environment_id: str | None = None) -> list[EnrollmentTokenRecord]:
        def run(conn: sqlite3.Connection) -> list[EnrollmentTokenRecord]:
            if environment_id is None:
                rows = conn.execute(LIST_ENROLLMENTS).fetchall()
            else:
                rows = conn.execute(LIST_ENROLLMENTS_OF_ENVIRONMENT, (environment_id,)).fetchall()
            return [token_from_row(row) for row in rows]

        return await self._engine.read(run)

    async def revoke_enrollment_token(self, token_id: str, now: datetime) -> EnrollmentTokenRecord:
        now_us = codec.to_us(now)

        def run(conn: sqlite3.Connection) -> EnrollmentTokenRecord:
            row = conn.execute(GET_ENROLLMENT, (token_id,)).fetchone()
            if row is None:
                raise NotFound("enrollment token", token_id)
            record = token_from_row(row)
            if record.used_at is not None:
                raise Conflict(
                    f"enrollment token {token_id!r} was used already (by edge {record.used_by_edge_id})"
                )
            conn.execute(REVOKE_ENROLLMENT, (now_us, token_id))
            return token_from_row(conn.execute(GET_ENROLLMENT, (token_id,)).fetchone())

        return await self._engine.write(run)

    async def create_edge(self, record: EdgeRecord) -> None:
        values = (
            record.id,
            record.environment_id,
            record.name,
            record.cert_serial,
            record.cert_fingerprint,
            codec.to_us(record.created_at, "created_at"),
            codec.to_us(record.cert_not_after, "cert_not_after"),
            codec.opt_to_us(record.revoked_at, "revoked_at"),
            record.previous_cert_fingerprint,
            codec.opt_to_us(record.previous_cert_not_after, "previous_cert_not_after"),
            codec.opt_to_us(record.last_seen_at, "last_seen_at"),
        )

        def run(conn: sqlite3.Connection) -> None:
            try:
                conn.execute(INSERT_EDGE, values)
            except sqlite3.IntegrityError as exc:
                raise Conflict(f"edge {record.id!r} exists already") from exc

        await self._engine.write(run)

    async def get_edge(self, edge_id: str) -> EdgeRecord:
        def run(conn: sqlite3.Connection) -> EdgeRecord:
            row = conn.execute(GET_EDGE, (edge_id,)).fetchone()
            if row is None:
                raise NotFound("edge", edge_id)
            return edge_from_row(row)

        return await self._engine.read(run)

    async def get_edges(self, edge_ids: Sequence[str]) -> list[EdgeRecord]:
        ids = json.dumps(sorted(set(edge_ids)))

        def run(conn: sqlite3.Connection) -> list[EdgeRecord]:
            edges = [edge_from_row(row) for row in conn.execute(GET_EDGES, (ids,)).fetchall()]
            return sorted(edges, key=lambda r: (r.created_at, r.id))

        return await self._engine.read(run)

    async def list_edges(self, environment_id: str | None = None) -> list[EdgeRecord]:
        def run(conn: sqlite3.Connection) -> list[EdgeRecord]:
            if environment_id is None:
                rows = conn.execute(LIST_EDGES).fetchall()
            else:
                rows = conn.execute(LIST_EDGES_OF_ENVIRONMENT, (environment_id,)).fetchall()
            return [edge_from_row(row) for row in rows]

        return await self._engine.read(run)

    async def revoke_edge(self, edge_id: str, now: datetime) -> EdgeRecord:
        now_us = codec.to_us(now)

        def run(conn: sqlite3.Connection) -> EdgeRecord:
            conn.execute(
                "UPDATE edges SET revoked_at = coalesce(revoked_at, ?),"
                " previous_cert_fingerprint = NULL, previous_cert_not_after = NULL WHERE id = ?",
                (now_us, edge_id),
            )
            row = conn.execute(GET_EDGE, (edge_id,)).fetchone()
            if row is None:
                raise NotFound("edge", edge_id)
            return edge_from_row(row)

        return await self._engine.write(run)

    async def renew_edge_certificate(
        self,
        edge_id: str,
        serial: str,
        fingerprint: str,
        not_after: datetime,
        now: datetime,
        *,
        renewed_from: str,
    ) -> EdgeRecord:
        not_after_us = codec.to_us(not_after, "not_after")
        now_us = codec.to_us(now)

        def run(conn: sqlite3.Connection) -> EdgeRecord:
            row = conn.execute(GET_EDGE, (edge_id,)).fetchone()
            if row is None:
                raise NotFound("edge", edge_id)
            edge = edge_from_row(row)
            if edge.revoked_at is not None:
                raise Conflict(f"edge {edge_id!r} is revoked")
            if renewed_from == edge.cert_fingerprint:
                from_not_after_us = row[6]
            elif renewed_from == edge.previous_cert_fingerprint and (row[9] or 0) > now_us:
                from_not_after_us = row[9]
            else:
                raise Conflict(f"the certificate edge {edge_id!r} renewed from is no longer accepted")
            conn.execute(
                "UPDATE edges SET cert_serial = ?, cert_fingerprint = ?, cert_not_after = ?,"
                " previous_cert_fingerprint = ?, previous_cert_not_after = ? WHERE id = ?",
                (serial, fingerprint, not_after_us, renewed_from, from_not_after_us, edge_id),
            )
            return edge_from_row(conn.execute(GET_EDGE, (edge_id,)).fetchone())

        return await self._engine.write(run)

    async def forget_previous_edge_certificate(self, edge_id: str, current_fingerprint: str) -> EdgeRecord:
        def run(conn: sqlite3.Connection) -> EdgeRecord:
            conn.execute(
                "UPDATE edges SET previous_cert_fingerprint = NULL, previous_cert_not_after = NULL"
                " WHERE id = ? AND cert_fingerprint = ?",
                (edge_id, current_fingerprint),
            )
            row = conn.execute(GET_EDGE, (edge_id,)).fetchone()
            if row is None:
                raise NotFound("edge", edge_id)
            return edge_from_row(row)

        return await self._engine.write(run)

    # -- API keys ------------------------------------------------------------------------------

    async def create_api_key(self, record: ApiKeyRecord) -> None:
        values = api_key_values(record)

        def run(conn: sqlite3.Connection) -> None:
            try:
                conn.execute(INSERT_API_KEY, values)
            except sqlite3.IntegrityError as exc:
                raise Conflict(f"API key {record.id!r} or its hash exists already") from exc

        await self._engine.write(run)

    async def find_api_key(self, key_hash: str) -> ApiKeyRecord | None:
        def run(conn: sqlite3.Connection) -> ApiKeyRecord | None:
            row = conn.execute(FIND_API_KEY, (key_hash,)).fetchone()
            return None if row is None else api_key_from_row(row)

        return await self._engine.read(run)

    async def get_api_key(self, key_id: str) -> ApiKeyRecord:
        def run(conn: sqlite3.Connection) -> ApiKeyRecord:
            row = conn.execute(GET_API_KEY, (key_id,)).fetchone()
            if row is None:
                raise NotFound("api_key", key_id)
            return api_key_from_row(row)

        return await self._engine.read(run)

    async def list_api_keys(self) -> list[ApiKeyRecord]:
        def run(conn: sqlite3.Connection) -> list[ApiKeyRecord]:
            return [api_key_from_row(row) for row in conn.execute(LIST_API_KEYS).fetchall()]

        return await self._engine.read(run)

    async def revoke_api_key(self, key_id: str, now: datetime) -> ApiKeyRecord:
        now_us = codec.to_us(now)

        def run(conn: sqlite3.Connection) -> ApiKeyRecord:
            conn.execute(REVOKE_API_KEY, (now_us, key_id))
            row = conn.execute(GET_API_KEY, (key_id,)).fetchone()
            if row is None:
                raise NotFound("api_key", key_id)
            return api_key_from_row(row)

        return await self._engine.write(run)

    async def touch_api_key(self, key_id: str, now: datetime) -> None:
        now_us = codec.to_us(now)

        def run(conn: sqlite3.Connection) -> None:
            conn.execute(TOUCH_API_KEY, (now_us, key_id, now_us))

        await self._engine.write(run)

    # -- retention ------------------------------------------------------------------------------

    async def prune_enrollment_tokens(self, before: datetime, limit: int = 500) -> int:
        codec.check_limit(limit)
        before_us = codec.to_us(before, "before")

        def run(conn: sqlite3.Connection) -> int:
            deleted: int = conn.execute(
                "DELETE FROM enrollment_tokens WHERE id IN (SELECT id FROM enrollment_tokens"
                " WHERE used_at < ? OR revoked_at < ? OR expires_at < ? LIMIT ?)",
                (before_us, before_us, before_us, limit),
            ).rowcount
            return deleted

        return await self._engine.write(run)
