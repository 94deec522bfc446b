"""The PostgreSQL :class:`~control_plane.store.base.Store`, for several control-plane replicas.

A pool of connections (``asyncpg``) serves every call; the schema is migrated on first use, under
an advisory lock, before the pool opens (``_schema``). Opening is lazy: constructing the store does
no I/O, the first call connects (so ``open_store`` stays synchronous), and a database that cannot
be reached surfaces as ``ControlPlaneError`` from that call and every later one until it answers.

Concurrency is the database's: leases, tokens and certificate renewals are conditional updates or
row locks in one transaction; an append is one call of ``outpost_append`` (one round trip however
many events), which checks the writer's lease epoch under a share lock on the lease row, takes the
session's head row lock, skips events already stored (idempotent by id), numbers the rest and
notifies the feed, all or nothing.

Errors: constraint violations become ``Conflict``, the append's own errors ``Fenced`` and
``SequenceConflict``; anything else from the driver or the network (a restart, a lost connection,
a timeout) becomes ``ControlPlaneError`` naming the URL with its password masked. A call that
failed that way may or may not have committed: appends are idempotent by event id, so the caller
retries them. The identity role (enrollment tokens, edges, API keys) is the mixin in ``_identity``;
the memories of memory stores, the one in ``_memories``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from control_plane.errors import (
    Conflict,
    ControlPlaneError,
    Fenced,
    NotFound,
    SequenceConflict,
    VersionConflict,
)
from control_plane.store import _codec as codec
from control_plane.store._sqlite_sql import (
    events_from_rows,
    resource_from_row,
)
from control_plane.store.base import (
    MEMORY_STORE_KIND,
    AppendFeed,
    AppendListener,
    Event,
    Lease,
    NewEvent,
    Order,
    Page,
    Resource,
)
from control_plane.store.postgres import _sql as sql
from control_plane.store.postgres._config import PostgresConfig
from control_plane.store.postgres._feed import PostgresFeed
from control_plane.store.postgres._identity import PostgresIdentity
from control_plane.store.postgres._memories import PostgresMemories
from control_plane.store.postgres._schema import FENCED, SEQUENCE_CONFLICT, migrate_connection

__all__ = ["UNREACHABLE", "PostgresStore", "migrate", "unreachable"]

log = logging.getLogger(__name__)

_CLOSE_TIMEOUT_S = 10.0
_GC_PAUSE_ROWS = 2_000  # reads that may return this many events pause the garbage collector
_PRUNE_EVENT_ROWS = 20_000  # retention: events deleted per transaction at most

# Errors that mean "the database did not answer as a database": the connection, the network, a
# restart, a timeout, a failover. Server-side errors of a statement are PostgresError too, but
# those we expect are caught where they happen.
UNREACHABLE = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,  # a connection left mid-operation by a dropped link
    OSError,
    TimeoutError,
)


async def migrate(config: PostgresConfig) -> int:
    """Bring the database named by ``config`` to this build's schema; returns the version it was
    at. Safe to run from several processes at once (they take turns under an advisory lock)."""
    try:
        # No statement timeout: waiting for the lock while another replica migrates is expected.
        conn = await asyncpg.connect(**(config.connect_kwargs() | {"command_timeout": None}))
    except UNREACHABLE as exc:
        raise unreachable(config, exc) from None
    try:
        return await migrate_connection(conn, config.schema)
    except UNREACHABLE as exc:
        raise unreachable(config, exc) from None
    finally:
        await _close_quietly(conn)


class PostgresStore(PostgresIdentity, PostgresMemories):
    """A :class:`~control_plane.store.base.Store` on PostgreSQL (see the module docstring)."""

    def __init__(self, config: PostgresConfig) -> None:
        self._config = config
        self._pool: Any = None  # asyncpg.Pool, once open
        self._opening = asyncio.Lock()
        self._closed = False
        self._in_flight = 0  # calls between their start and their end: close() waits for them
        self._idle = asyncio.Event()
        self._feeds: set[PostgresFeed] = set()

    @property
    def config(self) -> PostgresConfig:
        return self._config

    async def __aenter__(self) -> PostgresStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Refuse new calls, let the calls in flight finish, stop the feeds and close the pool.
        Idempotent."""
        self._closed = True
        if self._in_flight:
            self._idle.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_CLOSE_TIMEOUT_S):
                    await self._idle.wait()
        for feed in list(self._feeds):
            await feed.close()
        self._feeds.clear()
        async with self._opening:  # an open in progress has finished (or failed)
            pool, self._pool = self._pool, None
        if pool is not None:
            try:
                async with asyncio.timeout(_CLOSE_TIMEOUT_S):
                    await pool.close()
            except (*UNREACHABLE, TimeoutError):
                pool.terminate()

    async def ping(self) -> None:
        async with self._conn() as conn:
            await conn.fetchval("SELECT 1")

    # -- connections ---------------------------------------------------------------------------

    async def _open(self) -> Any:
        if self._pool is not None:
            return self._pool
        async with self._opening:
            if self._pool is None:
                await migrate(self._config)
                try:
                    self._pool = await asyncpg.create_pool(
                        min_size=self._config.pool_min,
                        max_size=self._config.pool_max,
                        **self._config.connect_kwargs(),
                    )
                except UNREACHABLE as exc:
                    raise unreachable(self._config, exc) from None
        return self._pool

    @contextlib.asynccontextmanager
    async def _conn(self) -> AsyncIterator[Any]:
        """A pooled connection; driver and network errors become ``ControlPlaneError``."""
        if self._closed:
            raise ControlPlaneError("the store is closed")
        self._in_flight += 1
        try:
            pool = await self._open()
            async with pool.acquire() as conn:
                yield conn
        except UNREACHABLE as exc:
            raise unreachable(self._config, exc) from None
        finally:
            self._in_flight -= 1
            if not self._in_flight:
                self._idle.set()

    # -- resources --------------------------------------------------------------------------

    async def create_resource(self, kind: str, id: str, body: Mapping[str, Any], now: datetime) -> Resource:
        text = codec.dumps(body, "body")
        now_us = codec.to_us(now)
        async with self._conn() as conn:
            try:
                await conn.execute(
                    "INSERT INTO resources (kind, id, version, body, created_at, updated_at)"
                    " VALUES ($1, $2, 1, $3, $4, $4)",
                    kind,
                    id,
                    text,
                    now_us,
                )
            except asyncpg.UniqueViolationError:
                raise Conflict(f"{kind} {id!r} exists already") from None
        return resource_from_row(kind, (id, 1, text, now_us, now_us, None))

    async def get_resource(self, kind: str, id: str, version: int | None = None) -> Resource:
        async with self._conn() as conn:
            row = await conn.fetchrow(sql.GET_RESOURCE, kind, id)
            if row is None:
                raise NotFound(kind, id)
            if version is None or version == row[1]:
                return resource_from_row(kind, tuple(row))
            old = await conn.fetchrow(sql.GET_RESOURCE_VERSION, kind, id, version)
        if old is None:
            raise NotFound(f"{kind} version {version}", id)
        return resource_from_row(kind, tuple(old))

    async def update_resource(
        self,
        kind: str,
        id: str,
        body: Mapping[str, Any],
        now: datetime,
        *,
        expected_version: int | None = None,
        keep_history: bool = False,
    ) -> Resource:
        text = codec.dumps(body, "body")
        now_us = codec.to_us(now)
        async with self._conn() as conn, conn.transaction():
            row = await conn.fetchrow(sql.GET_RESOURCE + " FOR UPDATE", kind, id)
            if row is None:
                raise NotFound(kind, id)
            current = row[1]
            if expected_version is not None and expected_version != current:
                raise VersionConflict(kind, id, expected_version, current)
            if keep_history:
                await conn.execute(
                    "INSERT INTO resource_versions"
                    " (kind, id, version, body, created_at, updated_at, archived_at)"
                    " SELECT kind, id, version, body, created_at, updated_at, archived_at"
                    " FROM resources WHERE kind = $1 AND id = $2"
                    " ON CONFLICT (kind, id, version) DO UPDATE SET body = excluded.body,"
                    " created_at = excluded.created_at, updated_at = excluded.updated_at,"
                    " archived_at = excluded.archived_at",
                    kind,
                    id,
                )
            await conn.execute(
                "UPDATE resources SET version = $1, body = $2, updated_at = $3 WHERE kind = $4 AND id = $5",
                current + 1,
                text,
                now_us,
                kind,
                id,
            )
        return resource_from_row(kind, (id, current + 1, text, row[3], now_us, row[5]))

    async def list_resources(
        self,
        kind: str,
        *,
        filters: Mapping[str, Any] | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        include_archived: bool = False,
        limit: int = 20,
        cursor: str | None = None,
        order: Order = Order.DESC,
    ) -> Page:
        wanted = codec.check_filters(filters)
        codec.check_limit(limit)
        position = None if cursor is None else codec.decode_resource_cursor(cursor)
        where: list[str] = ["kind = $1"]
        params: list[Any] = [kind]
        if not include_archived:
            where.append("archived_at IS NULL")
        if created_after is not None:
            params.append(codec.to_us(created_after, "created_after"))
            where.append(f"created_at >= ${len(params)}")
        if created_before is not None:
            params.append(codec.to_us(created_before, "created_before"))
            where.append(f"created_at <= ${len(params)}")
        for name, value in wanted.items():
            clause, args = sql.filter_sql(name, value, len(params) + 1)
            where.append(clause)
            params.extend(args)
        base = " AND ".join(where)
        n = len(params)
        asc = order is Order.ASC
        later, earlier = (">", "<") if asc else ("<", ">")

        async def fetch(conn: Any, op: str, key: tuple[int, str] | None, forward: bool) -> list[Any]:
            condition = f"{base} AND (created_at, id) {op} (${n + 1}, ${n + 2})" if key else base
            direction = "ASC" if forward == asc else "DESC"
            text = (
                f"SELECT {sql.RESOURCE_COLUMNS} FROM resources WHERE {condition}"  # noqa: S608 (fixed fragments)
                f" ORDER BY created_at {direction}, id {direction} LIMIT ${n + 1 + (2 if key else 0)}"
            )
            rows: list[Any] = await conn.fetch(text, *params, *(key or ()), limit + 1)
            return rows

        async def exists(conn: Any, op: str, key: tuple[int, str]) -> bool:
            text = (
                f"SELECT 1 FROM resources WHERE {base}"  # noqa: S608 (fixed fragments)
                f" AND (created_at, id) {op} (${n + 1}, ${n + 2}) LIMIT 1"
            )
            return await conn.fetchval(text, *params, *key) is not None

        async with self._conn() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
            if position is None:
                rows = await fetch(conn, later, None, True)
                page, has_prev, has_next = rows[:limit], False, len(rows) > limit
            elif position.direction == "next":
                rows = await fetch(conn, later, (position.created_us, position.id), True)
                page, has_next = rows[:limit], len(rows) > limit
                has_prev = bool(page) and await exists(conn, earlier, (page[0][3], page[0][0]))
            else:
                rows = await fetch(conn, earlier, (position.created_us, position.id), False)
                page, has_prev = rows[:limit][::-1], len(rows) > limit
                has_next = bool(page) and await exists(conn, later, (page[-1][3], page[-1][0]))
        if not page:
            return Page(items=[], next_cursor=None, prev_cursor=None)
        first, last = page[0], page[-1]
        return Page(
            items=[resource_from_row(kind, tuple(row)) for row in page],
            next_cursor=codec.encode_resource_cursor("next", last[3], last[0]) if has_next else None,
            prev_cursor=codec.encode_resource_cursor("prev", first[3], first[0]) if has_prev else None,
        )

    async def list_resource_versions(
        self, kind: str, id: str, *, limit: int = 20, cursor: str | None = None
    ) -> Page:
        codec.check_limit(limit)
        below = None if cursor is None else codec.decode_version_cursor(cursor)
        async with self._conn() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
            current = await conn.fetchrow(sql.GET_RESOURCE, kind, id)
            if current is None:
                raise NotFound(kind, id)
            rows: list[Any] = []
            if below is None or current[1] < below:
                rows.append(current)
            top = current[1] if below is None else min(below, current[1])
            rows += await conn.fetch(sql.OLDER_VERSIONS, kind, id, top, limit + 1)
        page = rows[:limit]
        next_cursor = codec.encode_version_cursor(page[-1][1]) if len(rows) > limit else None
        return Page(items=[resource_from_row(kind, tuple(row)) for row in page], next_cursor=next_cursor)

    async def archive_resource(self, kind: str, id: str, now: datetime) -> Resource:
        now_us = codec.to_us(now)
        async with self._conn() as conn:
            row = await conn.fetchrow(
                sql.ARCHIVE_RESOURCE,
                now_us,
                kind,
                id,
            )
            if row is None:
                row = await conn.fetchrow(sql.GET_RESOURCE, kind, id)
        if row is None:
            raise NotFound(kind, id)
        return resource_from_row(kind, tuple(row))

    async def delete_resource(self, kind: str, id: str) -> None:
        async with self._conn() as conn, conn.transaction():
            # resource_versions rows go with the resource (ON DELETE CASCADE).
            if (
                await conn.execute("DELETE FROM resources WHERE kind = $1 AND id = $2", kind, id)
                == "DELETE 0"
            ):
                raise NotFound(kind, id)
            if kind == "session":
                for table in ("events", "log_heads", "leases", "sandbox_placements", "session_wakes"):
                    await conn.execute(f"DELETE FROM {table} WHERE session_id = $1", id)  # noqa: S608
            if kind == MEMORY_STORE_KIND:
                await _forget_memory_store(conn, id)

    async def prune_archived(self, kind: str, archived_before: datetime, limit: int = 100) -> list[str]:
        codec.check_limit(limit)
        before_us = codec.to_us(archived_before, "archived_before")
        deleted: list[str] = []
        while len(deleted) < limit:
            done, more = await self._prune_some(kind, before_us, limit - len(deleted))
            deleted += done
            if not more:
                break
        return deleted

    async def _prune_some(self, kind: str, before_us: int, limit: int) -> tuple[list[str], bool]:
        """One bounded transaction: the due resources in archive order (SKIP LOCKED: another
        process pruning takes others), deleting at most ``_PRUNE_EVENT_ROWS`` events; a session
        whose log is left half-deleted goes next time. Returns the ids deleted and whether to go on."""
        done: list[str] = []
        async with self._conn() as conn, conn.transaction():
            due = await conn.fetch(
                "SELECT id FROM resources WHERE kind = $1 AND archived_at IS NOT NULL AND archived_at < $2"
                " ORDER BY archived_at, id LIMIT $3 FOR UPDATE SKIP LOCKED",
                kind,
                before_us,
                limit,
            )
            budget = _PRUNE_EVENT_ROWS
            for (id,) in due:
                if kind == "session":
                    status = await conn.execute(
                        "DELETE FROM events WHERE session_id = $1 AND seq IN"
                        " (SELECT seq FROM events WHERE session_id = $1 ORDER BY seq LIMIT $2)",
                        id,
                        budget + 1,
                    )
                    budget -= int(status.rpartition(" ")[2])
                    if budget < 0:  # more events than the budget: the rest in the next transaction
                        return done, True
                    for table in ("log_heads", "leases", "sandbox_placements", "session_wakes"):
                        await conn.execute(f"DELETE FROM {table} WHERE session_id = $1", id)  # noqa: S608
                if kind == MEMORY_STORE_KIND:
                    await _forget_memory_store(conn, id)
                # resource_versions rows go with the resource (ON DELETE CASCADE).
                await conn.execute("DELETE FROM resources WHERE kind = $1 AND id = $2", kind, id)
                done.append(str(id))
        return done, False

    # -- the session event log --------------------------------------------------------------

    async def append(
        self,
        session_id: str,
        events: Sequence[NewEvent],
        now: datetime,
        *,
        expected_seq: int | None = None,
        epoch: int | None = None,
    ) -> list[Event]:
        codec.check_new_events(events)
        now_us = codec.to_us(now)
        events = list(events)
        if not events:
            return []
        payloads = {e.id: codec.dumps(e.payload, "events.payload") for e in events}
        async with self._conn() as conn:
            try:
                rows = await conn.fetch(
                    sql.APPEND,
                    session_id,
                    epoch,
                    expected_seq,
                    [e.id for e in events],
                    [e.type for e in events],
                    list(payloads.values()),
                    now_us,
                    self._config.channel,
                )
            except asyncpg.PostgresError as exc:
                detail = getattr(exc, "detail", None) or ""
                if exc.sqlstate == FENCED:
                    assert epoch is not None
                    raise Fenced(session_id, epoch, int(detail) if detail else None) from None
                if exc.sqlstate == SEQUENCE_CONFLICT:
                    assert expected_seq is not None
                    raise SequenceConflict(session_id, expected_seq, int(detail)) from None
                raise
        stored_rows = [
            (id, seq, type, payloads[id] if fresh else payload, processed_us)
            for id, seq, type, payload, processed_us, fresh in rows
        ]
        stored = {event.id: event for event in events_from_rows(session_id, stored_rows)}
        return [stored[e.id] for e in events]

    async def get_events(
        self,
        session_id: str,
        *,
        after_seq: int = 0,
        before_seq: int | None = None,
        types: Sequence[str] | None = None,
        limit: int | None = None,
        order: Order = Order.ASC,
    ) -> list[Event]:
        if (types is not None and not types) or (limit is not None and limit <= 0):
            return []
        text = f"SELECT {sql.EVENT_COLUMNS} FROM events WHERE session_id = $1 AND seq > $2"  # noqa: S608
        params: list[Any] = [session_id, after_seq]
        if before_seq is not None:
            params.append(before_seq)
            text += f" AND seq < ${len(params)}"
        if types is not None:
            params.append(list(types))
            text += f" AND type = ANY (${len(params)}::text[])"
        text += " ORDER BY seq ASC" if order is Order.ASC else " ORDER BY seq DESC"
        if limit is not None:
            params.append(limit)
            text += f" LIMIT ${len(params)}"
        async with self._conn() as conn:
            rows = await conn.fetch(text, *params)
        with codec.paused_gc() if len(rows) >= _GC_PAUSE_ROWS else contextlib.nullcontext():
            return events_from_rows(session_id, rows)

    async def last_seq(self, session_id: str) -> int:
        async with self._conn() as conn:
            last = await conn.fetchval("SELECT last_seq FROM log_heads WHERE session_id = $1", session_id)
        return int(last or 0)

    async def last_seqs(self, session_ids: Sequence[str]) -> dict[str, int]:
        wanted = list(dict.fromkeys(session_ids))
        if not wanted:
            return {}
        async with self._conn() as conn:
            rows = await conn.fetch(
                "SELECT session_id, last_seq FROM log_heads WHERE session_id = ANY ($1::text[])", wanted
            )
        found = dict.fromkeys(wanted, 0)
        found.update((row[0], row[1]) for row in rows)
        return found

    async def follow_appends(self, notify: AppendListener) -> AppendFeed:
        async with self._conn():  # the store is open and its schema exists before anyone listens
            pass
        config = self._config

        async def connect() -> Any:
            try:
                return await asyncpg.connect(**config.connect_kwargs())
            except UNREACHABLE as exc:
                raise unreachable(config, exc) from None

        feed = await PostgresFeed.start(connect, config.channel, notify, config.masked_url)
        self._feeds.add(feed)
        return _Following(feed, self._feeds)

    # -- leases -----------------------------------------------------------------------------

    async def acquire_lease(self, session_id: str, holder: str, ttl_s: float, now: datetime) -> Lease | None:
        now_us = codec.to_us(now)
        expires_us = codec.to_us(now + timedelta(seconds=ttl_s))
        async with self._conn() as conn:
            # One statement: a new row at epoch 1; a live lease of ``holder`` renewed; a released
            # or expired one taken over (epoch + 1); a live lease of another holder left alone.
            row = await conn.fetchrow(
                "INSERT INTO leases AS l (session_id, holder, epoch, expires_at) VALUES ($1, $2, 1, $3)"
                " ON CONFLICT (session_id) DO UPDATE SET"
                "  epoch = CASE WHEN l.holder = excluded.holder AND l.expires_at > $4"
                "          THEN l.epoch ELSE l.epoch + 1 END,"
                "  holder = excluded.holder, expires_at = excluded.expires_at"
                " WHERE l.holder IS NULL OR l.expires_at <= $4 OR l.holder = excluded.holder"
                " RETURNING epoch",
                session_id,
                holder,
                expires_us,
                now_us,
            )
        if row is None:
            return None
        return Lease(session_id, holder, row[0], codec.from_us(expires_us))

    async def renew_lease(
        self, session_id: str, holder: str, epoch: int, ttl_s: float, now: datetime
    ) -> Lease | None:
        expires_us = codec.to_us(now + timedelta(seconds=ttl_s))
        async with self._conn() as conn:
            renewed: str = await conn.execute(
                "UPDATE leases SET expires_at = $1 WHERE session_id = $2 AND holder = $3 AND epoch = $4",
                expires_us,
                session_id,
                holder,
                epoch,
            )
        return Lease(session_id, holder, epoch, codec.from_us(expires_us)) if renewed != "UPDATE 0" else None

    async def release_lease(self, session_id: str, holder: str, epoch: int) -> None:
        async with self._conn() as conn:
            await conn.execute(
                "UPDATE leases SET holder = NULL WHERE session_id = $1 AND holder = $2 AND epoch = $3",
                session_id,
                holder,
                epoch,
            )

    async def get_lease(self, session_id: str) -> Lease | None:
        async with self._conn() as conn:
            row = await conn.fetchrow(
                "SELECT holder, epoch, expires_at FROM leases WHERE session_id = $1 AND holder IS NOT NULL",
                session_id,
            )
        return None if row is None else Lease(session_id, row[0], row[1], codec.from_us(row[2]))

    async def expired_leases(self, now: datetime, limit: int = 100) -> list[Lease]:
        now_us = codec.to_us(now)
        codec.check_limit(limit)
        async with self._conn() as conn:
            rows = await conn.fetch(
                "SELECT session_id, holder, epoch, expires_at FROM leases"
                " WHERE holder IS NOT NULL AND expires_at <= $1 ORDER BY expires_at, session_id LIMIT $2",
                now_us,
                limit,
            )
        return [Lease(s, h, e, codec.from_us(x)) for s, h, e, x in rows]

    async def forget_lease(self, session_id: str) -> bool:
        async with self._conn() as conn:
            status = await conn.execute(
                "DELETE FROM leases WHERE session_id = $1 AND holder IS NULL", session_id
            )
        return bool(status != "DELETE 0")

    # -- edge presence ----------------------------------------------------------------------

    async def hold_edges(self, holder: str, edge_ids: Sequence[str], ttl_s: float, now: datetime) -> None:
        if not edge_ids:
            return
        expires_us = codec.to_us(now + timedelta(seconds=ttl_s))
        now_us = codec.to_us(now)
        ids = list(dict.fromkeys(edge_ids))
        async with self._conn() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO edge_presence (edge_id, holder, expires_at)"
                " SELECT unnest($1::text[]), $2, $3"
                " ON CONFLICT (edge_id) DO UPDATE SET holder = excluded.holder,"
                " expires_at = excluded.expires_at",
                ids,
                holder,
                expires_us,
            )
            await conn.execute("UPDATE edges SET last_seen_at = $1 WHERE id = ANY ($2::text[])", now_us, ids)

    async def release_edges(self, holder: str, edge_ids: Sequence[str]) -> None:
        if not edge_ids:
            return
        async with self._conn() as conn:
            await conn.execute(
                "DELETE FROM edge_presence WHERE edge_id = ANY ($1::text[]) AND holder = $2",
                list(edge_ids),
                holder,
            )

    async def edge_holder(self, edge_id: str, now: datetime) -> str | None:
        now_us = codec.to_us(now)
        async with self._conn() as conn:
            holder = await conn.fetchval(
                "SELECT holder FROM edge_presence WHERE edge_id = $1 AND expires_at > $2", edge_id, now_us
            )
        return None if holder is None else str(holder)

    async def edge_holders(self, now: datetime) -> dict[str, str]:
        now_us = codec.to_us(now)
        async with self._conn() as conn:
            rows = await conn.fetch("SELECT edge_id, holder FROM edge_presence WHERE expires_at > $1", now_us)
        return {str(edge_id): str(holder) for edge_id, holder in rows}

    # -- wake requests ----------------------------------------------------------------------

    async def request_wake(self, session_id: str, now: datetime) -> None:
        now_us = codec.to_us(now)
        async with self._conn() as conn:
            await conn.execute(
                "INSERT INTO session_wakes (session_id, requested_at) VALUES ($1, $2)"
                " ON CONFLICT (session_id) DO NOTHING",
                session_id,
                now_us,
            )

    async def wake_requests(self, limit: int = 100) -> list[str]:
        codec.check_limit(limit)
        async with self._conn() as conn:
            rows = await conn.fetch(
                "SELECT session_id FROM session_wakes ORDER BY requested_at, session_id LIMIT $1", limit
            )
        return [str(r[0]) for r in rows]

    async def clear_wake(self, session_id: str) -> None:
        async with self._conn() as conn:
            await conn.execute("DELETE FROM session_wakes WHERE session_id = $1", session_id)

    # -- one-time nonces --------------------------------------------------------------------

    async def use_nonce(self, key: str, expires_at: datetime, now: datetime) -> bool:
        now_us, expires_us = codec.to_us(now), codec.to_us(expires_at)
        async with self._conn() as conn, conn.transaction():
            await conn.execute(
                "DELETE FROM pop_nonces WHERE key IN (SELECT key FROM pop_nonces WHERE expires_at <= $1"
                " ORDER BY expires_at LIMIT 256 FOR UPDATE SKIP LOCKED)",
                now_us,
            )
            inserted: str = await conn.execute(
                "INSERT INTO pop_nonces (key, expires_at) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
                key,
                expires_us,
            )
        return inserted != "INSERT 0 0"

    # -- sandbox placement ------------------------------------------------------------------

    async def get_sandbox_edge(self, session_id: str) -> str | None:
        async with self._conn() as conn:
            edge_id = await conn.fetchval(
                "SELECT edge_id FROM sandbox_placements WHERE session_id = $1", session_id
            )
        return None if edge_id is None else str(edge_id)

    async def set_sandbox_edge(self, session_id: str, edge_id: str | None) -> None:
        async with self._conn() as conn:
            if edge_id is None:
                await conn.execute("DELETE FROM sandbox_placements WHERE session_id = $1", session_id)
            else:
                await conn.execute(
                    "INSERT INTO sandbox_placements (session_id, edge_id) VALUES ($1, $2)"
                    " ON CONFLICT (session_id) DO UPDATE SET edge_id = excluded.edge_id",
                    session_id,
                    edge_id,
                )


class _Following:
    """The feed handed to a follower: closing it also forgets it in the store."""

    def __init__(self, feed: PostgresFeed, feeds: set[PostgresFeed]) -> None:
        self._feed = feed
        self._feeds = feeds

    async def close(self) -> None:
        self._feeds.discard(self._feed)
        await self._feed.close()


def unreachable(config: PostgresConfig, exc: BaseException) -> ControlPlaneError:
    reason = str(exc).replace(config.url, config.masked_url) or type(exc).__name__
    return ControlPlaneError(f"the PostgreSQL store at {config.masked_url} failed: {reason}")


async def _close_quietly(conn: Any) -> None:
    try:
        async with asyncio.timeout(_CLOSE_TIMEOUT_S):
            await conn.close()
    except (*UNREACHABLE, TimeoutError):
        conn.terminate()


async def _forget_memory_store(conn: Any, store_id: str) -> None:
    """A deleted memory store's memories and versions go with it."""
    await conn.execute("DELETE FROM memories WHERE store_id = $1", store_id)
    await conn.execute("DELETE FROM memory_versions WHERE store_id = $1", store_id)
