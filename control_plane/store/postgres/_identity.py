"""The :class:`~control_plane.store.base.Identity` role of the PostgreSQL store: enrollment tokens,
edges and API keys, a mixin of :class:`~control_plane.store.postgres.PostgresStore`.

Every call takes a pooled connection from the store (``_conn``, which turns driver and network
errors into ``ControlPlaneError``); consuming a token and renewing a certificate lock their row
for the transaction, so concurrent replicas take turns. Tokens and keys are stored by hash only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg

from control_plane.errors import Conflict, NotFound, TokenRejected
from control_plane.store import _codec as codec
from control_plane.store._sqlite_sql import api_key_from_row, api_key_values, edge_from_row, token_from_row
from control_plane.store.base import ApiKeyRecord, EdgeRecord, EnrollmentTokenRecord
from control_plane.store.postgres import _sql as sql

__all__ = ["PostgresIdentity"]


class PostgresIdentity:
    """Enrollment tokens, edges and API keys on the connections of the store (``_conn``)."""

    def _conn(self) -> contextlib.AbstractAsyncContextManager[Any]:
        raise NotImplementedError  # PostgresStore's pooled connection

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
        async with self._conn() as conn:
            try:
                await conn.execute(sql.INSERT_ENROLLMENT, *values)
            except asyncpg.UniqueViolationError:
                raise Conflict(f"enrollment token {record.id!r} or its hash exists already") from None

    async def consume_enrollment_token(
        self, token_hash: str, edge_id: str, now: datetime
    ) -> EnrollmentTokenRecord:
        now_us = codec.to_us(now)
        async with self._conn() as conn, conn.transaction():
            row = await conn.fetchrow(sql.GET_ENROLLMENT_BY_HASH + " FOR UPDATE", token_hash)
            if row is None:
                raise TokenRejected("unknown")
            record = token_from_row(tuple(row))
            if record.revoked_at is not None:
                raise TokenRejected("revoked")
            if record.used_at is not None:
                raise TokenRejected("used")
            if row[4] <= now_us:
                raise TokenRejected("expired")
            await conn.execute(
                "UPDATE enrollment_tokens SET used_at = $1, used_by_edge_id = $2 WHERE id = $3",
                now_us,
                edge_id,
                record.id,
            )
        return token_from_row((*tuple(row)[:5], now_us, edge_id, None))

    async def list_enrollment_tokens(self, environment_id: str | None = None) -> list[EnrollmentTokenRecord]:
        async with self._conn() as conn:
            if environment_id is None:
                rows = await conn.fetch(sql.LIST_ENROLLMENTS)
            else:
                rows = await conn.fetch(sql.LIST_ENROLLMENTS_OF_ENVIRONMENT, environment_id)
        return [token_from_row(tuple(row)) for row in rows]

    async def revoke_enrollment_token(self, token_id: str, now: datetime) -> EnrollmentTokenRecord:
        now_us = codec.to_us(now)
        async with self._conn() as conn, conn.transaction():
            row = await conn.fetchrow(sql.GET_ENROLLMENT + " FOR UPDATE", token_id)
            if row is None:
                raise NotFound("enrollment token", token_id)
            record = token_from_row(tuple(row))
            if record.used_at is not None:
                raise Conflict(
                    f"enrollment token {token_id!r} was used already (by edge {record.used_by_edge_id})"
                )
            await conn.execute(
                "UPDATE enrollment_tokens SET revoked_at = coalesce(revoked_at, $1) WHERE id = $2",
                now_us,
                token_id,
            )
            row = await conn.fetchrow(sql.GET_ENROLLMENT, token_id)
        return token_from_row(tuple(row))

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
        async with self._conn() as conn:
            try:
                await conn.execute(sql.INSERT_EDGE, *values)
            except asyncpg.UniqueViolationError:
                raise Conflict(f"edge {record.id!r} exists already") from None

    async def get_edge(self, edge_id: str) -> EdgeRecord:
        async with self._conn() as conn:
            row = await conn.fetchrow(sql.GET_EDGE, edge_id)
        if row is None:
            raise NotFound("edge", edge_id)
        return edge_from_row(tuple(row))

    async def get_edges(self, edge_ids: Sequence[str]) -> list[EdgeRecord]:
        if not edge_ids:
            return []
        async with self._conn() as conn:
            rows = await conn.fetch(sql.GET_EDGES, sorted(set(edge_ids)))
        return [edge_from_row(tuple(row)) for row in rows]

    async def list_edges(self, environment_id: str | None = None) -> list[EdgeRecord]:
        async with self._conn() as conn:
            if environment_id is None:
                rows = await conn.fetch(sql.LIST_EDGES)
            else:
                rows = await conn.fetch(sql.LIST_EDGES_OF_ENVIRONMENT, environment_id)
        return [edge_from_row(tuple(row)) for row in rows]

    async def revoke_edge(self, edge_id: str, now: datetime) -> EdgeRecord:
        now_us = codec.to_us(now)
        async with self._conn() as conn:
            row = await conn.fetchrow(
                sql.REVOKE_EDGE,
                now_us,
                edge_id,
            )
        if row is None:
            raise NotFound("edge", edge_id)
        return edge_from_row(tuple(row))

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
        async with self._conn() as conn, conn.transaction():
            row = await conn.fetchrow(sql.GET_EDGE + " FOR UPDATE", edge_id)
            if row is None:
                raise NotFound("edge", edge_id)
            edge = edge_from_row(tuple(row))
            if edge.revoked_at is not None:
                raise Conflict(f"edge {edge_id!r} is revoked")
            if renewed_from == edge.cert_fingerprint:
                from_not_after_us = row[6]
            elif renewed_from == edge.previous_cert_fingerprint and (row[9] or 0) > now_us:
                from_not_after_us = row[9]
            else:
                raise Conflict(f"the certificate edge {edge_id!r} renewed from is no longer accepted")
            await conn.execute(
                "UPDATE edges SET cert_serial = $1, cert_fingerprint = $2, cert_not_after = $3,"
                " previous_cert_fingerprint = $4, previous_cert_not_after = $5 WHERE id = $6",
                serial,
                fingerprint,
                not_after_us,
                renewed_from,
                from_not_after_us,
                edge_id,
            )
            row = await conn.fetchrow(sql.GET_EDGE, edge_id)
        return edge_from_row(tuple(row))

    async def forget_previous_edge_certificate(self, edge_id: str, current_fingerprint: str) -> EdgeRecord:
        async with self._conn() as conn, conn.transaction():
            await conn.execute(
                "UPDATE edges SET previous_cert_fingerprint = NULL, previous_cert_not_after = NULL"
                " WHERE id = $1 AND cert_fingerprint = $2",
                edge_id,
                current_fingerprint,
            )
            row = await conn.fetchrow(sql.GET_EDGE, edge_id)
        if row is None:
            raise NotFound("edge", edge_id)
        return edge_from_row(tuple(row))

    # -- API keys ------------------------------------------------------------------------------

    async def create_api_key(self, record: ApiKeyRecord) -> None:
        values = api_key_values(record)
        async with self._conn() as conn:
            try:
                await conn.execute(sql.INSERT_API_KEY, *values)
            except asyncpg.UniqueViolationError:
                raise Conflict(f"API key {record.id!r} or its hash exists already") from None

    async def find_api_key(self, key_hash: str) -> ApiKeyRecord | None:
        async with self._conn() as conn:
            row = await conn.fetchrow(sql.FIND_API_KEY, key_hash)
        return None if row is None else api_key_from_row(tuple(row))

    async def get_api_key(self, key_id: str) -> ApiKeyRecord:
        async with self._conn() as conn:
            row = await conn.fetchrow(sql.GET_API_KEY, key_id)
        if row is None:
            raise NotFound("api_key", key_id)
        return api_key_from_row(tuple(row))

    async def list_api_keys(self) -> list[ApiKeyRecord]:
        async with self._conn() as conn:
            rows = await conn.fetch(sql.LIST_API_KEYS)
        return [api_key_from_row(tuple(row)) for row in rows]

    async def revoke_api_key(self, key_id: str, now: datetime) -> ApiKeyRecord:
        now_us = codec.to_us(now)
        async with self._conn() as conn, conn.transaction():
            await conn.execute(
                "UPDATE api_keys SET revoked_at = coalesce(revoked_at, $1) WHERE id = $2", now_us, key_id
            )
            row = await conn.fetchrow(sql.GET_API_KEY, key_id)
        if row is None:
            raise NotFound("api_key", key_id)
        return api_key_from_row(tuple(row))

    async def touch_api_key(self, key_id: str, now: datetime) -> None:
        now_us = codec.to_us(now)
        async with self._conn() as conn:
            await conn.execute(
                "UPDATE api_keys SET last_used_at = $1 WHERE id = $2"
                " AND (last_used_at IS NULL OR last_used_at < $1)",
                now_us,
                key_id,
            )

    async def prune_enrollment_tokens(self, before: datetime, limit: int = 500) -> int:
        codec.check_limit(limit)
        before_us = codec.to_us(before, "before")
        async with self._conn() as conn:
            status = await conn.execute(
                "DELETE FROM enrollment_tokens WHERE id IN (SELECT id FROM enrollment_tokens"
                " WHERE used_at < $1 OR revoked_at < $1 OR expires_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)",
                before_us,
                limit,
            )
        return int(status.rpartition(" ")[2])
