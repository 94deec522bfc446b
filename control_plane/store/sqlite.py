"""The default durable :class:`~control_plane.store.base.Store`: one SQLite file in WAL mode.

Writes go through one writer thread that group-commits (``_sqlite_engine``): appends that arrive
while a commit is in progress share the next transaction and its fsync, and each caller's work runs
in its own savepoint so it succeeds or fails alone. Reads run on a small pool of read-only
connections. Commits are durable (``synchronous=FULL``) before a write call returns.

The schema (``_sqlite_schema``) is created or migrated when the store opens. Times are stored as
integer microseconds, documents as JSON text; the event log is clustered by ``(session_id, seq)``
so any slice of a session is one range scan. The identity role (enrollment tokens, edges, API keys)
is the mixin in ``_sqlite_identity``; the memories of memory stores, the one in ``_sqlite_memories``.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from control_plane.errors import (
    Conflict,
    Fenced,
    NotFound,
    SequenceConflict,
    VersionConflict,
)
from control_plane.store import _codec as codec
from control_plane.store._sqlite_engine import SqliteConfig, SqliteEngine
from control_plane.store._sqlite_feed import SqliteFeed
from control_plane.store._sqlite_identity import SqliteIdentity
from control_plane.store._sqlite_memories import SqliteMemories
from control_plane.store._sqlite_schema import migrate
from control_plane.store._sqlite_sql import (
    EVENT_COLUMNS,
    GET_RESOURCE,
    GET_RESOURCE_VERSION,
    INSERT_EVENT,
    OLDER_VERSIONS,
    RESOURCE_COLUMNS,
    Row,
    events_from_rows,
    filter_sql,
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

__all__ = ["SqliteConfig", "SqliteStore"]

_ID_CHUNK = 500  # event ids looked up per statement (well below SQLite's bound-parameter limit)
_GC_PAUSE_ROWS = 2_000  # reads that may return this many events pause the garbage collector
# Retention: one transaction deletes at most this many events and this many resources, so that
# pruning never holds the writer for long (other writes queue behind it).
_PRUNE_EVENT_ROWS = 5_000
_PRUNE_RESOURCES = 50


class SqliteStore(SqliteIdentity, SqliteMemories):
    """A :class:`~control_plane.store.base.Store` in one SQLite file.

    Opening creates the parent directory (mode 0700) and the file (mode 0600) if missing, switches
    the file to WAL mode and migrates the schema; it is quick blocking I/O, meant for startup.
    """

    def __init__(self, path: str | Path, config: SqliteConfig | None = None) -> None:
        self._engine = SqliteEngine(Path(path), config or SqliteConfig(), migrate)

    @property
    def path(self) -> Path:
        return self._engine.path

    async def __aenter__(self) -> SqliteStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._engine.close()

    async def ping(self) -> None:
        await self._engine.ping()

    # -- resources --------------------------------------------------------------------------

    async def create_resource(self, kind: str, id: str, body: Mapping[str, Any], now: datetime) -> Resource:
        text = codec.dumps(body, "body")
        now_us = codec.to_us(now)

        def run(conn: sqlite3.Connection) -> Resource:
            try:
                conn.execute(
                    "INSERT INTO resources (kind, id, version, body, created_at, updated_at)"
                    " VALUES (?, ?, 1, ?, ?, ?)",
                    (kind, id, text, now_us, now_us),
                )
            except sqlite3.IntegrityError as exc:
                raise Conflict(f"{kind} {id!r} exists already") from exc
            return resource_from_row(kind, (id, 1, text, now_us, now_us, None))

        return await self._engine.write(run)

    async def get_resource(self, kind: str, id: str, version: int | None = None) -> Resource:
        def run(conn: sqlite3.Connection) -> Resource:
            row = conn.execute(GET_RESOURCE, (kind, id)).fetchone()
            if row is None:
                raise NotFound(kind, id)
            if version is None or version == row[1]:
                return resource_from_row(kind, row)
            old = conn.execute(GET_RESOURCE_VERSION, (kind, id, version)).fetchone()
            if old is None:
                raise NotFound(f"{kind} version {version}", id)
            return resource_from_row(kind, old)

        return await self._engine.read(run)

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

        def run(conn: sqlite3.Connection) -> Resource:
            key = (kind, id)
            row = conn.execute(GET_RESOURCE, key).fetchone()
            if row is None:
                raise NotFound(kind, id)
            current = row[1]
            if expected_version is not None and expected_version != current:
                raise VersionConflict(kind, id, expected_version, current)
            if keep_history:
                conn.execute(
                    "INSERT OR REPLACE INTO resource_versions"
                    " (kind, id, version, body, created_at, updated_at, archived_at)"
                    " SELECT kind, id, version, body, created_at, updated_at, archived_at"
                    " FROM resources WHERE kind = ? AND id = ?",
                    key,
                )
            conn.execute(
                "UPDATE resources SET version = ?, body = ?, updated_at = ? WHERE kind = ? AND id = ?",
                (current + 1, text, now_us, *key),
            )
            return resource_from_row(kind, (id, current + 1, text, row[3], now_us, row[5]))

        return await self._engine.write(run)

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
        where: list[str] = ["kind = ?"]
        params: list[Any] = [kind]
        if not include_archived:
            where.append("archived_at IS NULL")
        if created_after is not None:
            where.append("created_at >= ?")
            params.append(codec.to_us(created_after, "created_after"))
        if created_before is not None:
            where.append("created_at <= ?")
            params.append(codec.to_us(created_before, "created_before"))
        for name, value in wanted.items():
            clause, args = filter_sql(name, value)
            where.append(clause)
            params.extend(args)
        base = " AND ".join(where)
        asc = order is Order.ASC
        # In the listing order, "later" rows have a greater key when ascending, a smaller one when not.
        later, earlier = (">", "<") if asc else ("<", ">")

        def fetch(conn: sqlite3.Connection, op: str, key: tuple[int, str] | None, forward: bool) -> list[Row]:
            """Up to ``limit + 1`` rows past ``key``, walking forward or backward in listing order."""
            condition = f"{base} AND (created_at, id) {op} (?, ?)" if key else base
            direction = "ASC" if forward == asc else "DESC"
            sql = (
                f"SELECT {RESOURCE_COLUMNS} FROM resources WHERE {condition}"  # noqa: S608 (fixed fragments)
                f" ORDER BY created_at {direction}, id {direction} LIMIT ?"
            )
            return conn.execute(sql, (*params, *(key or ()), limit + 1)).fetchall()

        def exists(conn: sqlite3.Connection, op: str, key: tuple[int, str]) -> bool:
            sql = f"SELECT 1 FROM resources WHERE {base} AND (created_at, id) {op} (?, ?) LIMIT 1"  # noqa: S608
            return conn.execute(sql, (*params, *key)).fetchone() is not None

        def run(conn: sqlite3.Connection) -> Page:
            if position is None:
                rows = fetch(conn, later, None, True)
                page, has_prev, has_next = rows[:limit], False, len(rows) > limit
            elif position.direction == "next":
                rows = fetch(conn, later, (position.created_us, position.id), True)
                page, has_next = rows[:limit], len(rows) > limit
                has_prev = bool(page) and exists(conn, earlier, (page[0][3], page[0][0]))
            else:
                rows = fetch(conn, earlier, (position.created_us, position.id), False)
                page, has_prev = rows[:limit][::-1], len(rows) > limit
                has_next = bool(page) and exists(conn, later, (page[-1][3], page[-1][0]))
            if not page:
                return Page(items=[], next_cursor=None, prev_cursor=None)
            first, last = page[0], page[-1]
            return Page(
                items=[resource_from_row(kind, row) for row in page],
                next_cursor=codec.encode_resource_cursor("next", last[3], last[0]) if has_next else None,
                prev_cursor=codec.encode_resource_cursor("prev", first[3], first[0]) if has_prev else None,
            )

        return await self._engine.read(run)

    async def list_resource_versions(
        self, kind: str, id: str, *, limit: int = 20, cursor: str | None = None
    ) -> Page:
        codec.check_limit(limit)
        below = None if cursor is None else codec.decode_version_cursor(cursor)

        def run(conn: sqlite3.Connection) -> Page:
            current = conn.execute(GET_RESOURCE, (kind, id)).fetchone()
            if current is None:
                raise NotFound(kind, id)
            rows: list[Row] = []
            if below is None or current[1] < below:
                rows.append(current)
            rows += conn.execute(
                OLDER_VERSIONS, (kind, id, current[1] if below is None else min(below, current[1]), limit + 1)
            ).fetchall()
            page = rows[:limit]
            next_cursor = codec.encode_version_cursor(page[-1][1]) if len(rows) > limit else None
            return Page(items=[resource_from_row(kind, row) for row in page], next_cursor=next_cursor)

        return await self._engine.read(run)

    async def archive_resource(self, kind: str, id: str, now: datetime) -> Resource:
        now_us = codec.to_us(now)

        def run(conn: sqlite3.Connection) -> Resource:
            conn.execute(
                "UPDATE resources SET archived_at = ?, updated_at = ?"
                " WHERE kind = ? AND id = ? AND archived_at IS NULL",
                (now_us, now_us, kind, id),
            )
            row = conn.execute(GET_RESOURCE, (kind, id)).fetchone()
            if row is None:
                raise NotFound(kind, id)
            return resource_from_row(kind, row)

        return await self._engine.write(run)

    async def delete_resource(self, kind: str, id: str) -> None:
        def run(conn: sqlite3.Connection) -> None:
            # resource_versions rows go with the resource (ON DELETE CASCADE).
            if conn.execute("DELETE FROM resources WHERE kind = ? AND id = ?", (kind, id)).rowcount == 0:
                raise NotFound(kind, id)
            if kind == "session":
                conn.execute("DELETE FROM events WHERE session_id = ?", (id,))
                conn.execute("DELETE FROM leases WHERE session_id = ?", (id,))
                conn.execute("DELETE FROM sandbox_placements WHERE session_id = ?", (id,))
                conn.execute("DELETE FROM session_wakes WHERE session_id = ?", (id,))
            if kind == MEMORY_STORE_KIND:
                _forget_memory_store(conn, id)

        await self._engine.write(run)

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

        def run(conn: sqlite3.Connection) -> list[Event]:
            if epoch is not None:
                row = conn.execute(
                    "SELECT holder, epoch FROM leases WHERE session_id = ?", (session_id,)
                ).fetchone()
                current = None if row is None or row[0] is None else row[1]
                if current != epoch:
                    raise Fenced(session_id, epoch, current)
            stored: dict[str, Event] = {}
            for start in range(0, len(events), _ID_CHUNK):
                ids = [e.id for e in events[start : start + _ID_CHUNK]]
                marks = ", ".join("?" * len(ids))
                # Without INDEXED BY the planner may walk the whole session by seq to test the ids.
                sql = (
                    f"SELECT {EVENT_COLUMNS} FROM events INDEXED BY events_by_id"  # noqa: S608 (placeholders)
                    f" WHERE session_id = ? AND id IN ({marks})"
                )
                rows = conn.execute(sql, (session_id, *ids)).fetchall()
                stored.update((event.id, event) for event in events_from_rows(session_id, rows))
            fresh = [e for e in events if e.id not in stored]
            if fresh:
                last = conn.execute(
                    "SELECT coalesce(max(seq), 0) FROM events WHERE session_id = ?", (session_id,)
                ).fetchone()[0]
                if expected_seq is not None and expected_seq != last:
                    raise SequenceConflict(session_id, expected_seq, last)
                written: list[Row] = []

                def rows_to_insert() -> Iterator[Row]:
                    # Serialized one by one as SQLite inserts them: a payload that fails half-way
                    # through aborts the statement, and the savepoint takes back the rows before it.
                    for seq, event in enumerate(fresh, start=last + 1):
                        payload = codec.dumps(event.payload, "events.payload")
                        written.append((event.id, seq, event.type, payload, now_us))
                        yield (session_id, seq, event.id, event.type, payload, now_us)

                conn.executemany(INSERT_EVENT, rows_to_insert())
                conn.execute(
                    "INSERT INTO log_feed (session_id, last_seq, at) VALUES (?, ?, ?)",
                    (session_id, last + len(fresh), time.time_ns() // 1000),  # wall clock: pruning
                )
                stored.update((event.id, event) for event in events_from_rows(session_id, written))
            return [stored[e.id] for e in events]

        return await self._engine.write(run)

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
        sql = "SELECT id, seq, type, payload, processed_at FROM events WHERE session_id = ? AND seq > ?"
        params: list[Any] = [session_id, after_seq]
        if before_seq is not None:
            sql += " AND seq < ?"
            params.append(before_seq)
        if types is not None:
            sql += f" AND type IN ({', '.join('?' * len(types))})"
            params.extend(types)
        sql += " ORDER BY seq ASC" if order is Order.ASC else " ORDER BY seq DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)

        # A long read decodes row by row straight from the cursor, with the garbage collector paused.
        long_read = limit is None or limit >= _GC_PAUSE_ROWS

        def run(conn: sqlite3.Connection) -> list[Event]:
            with codec.paused_gc() if long_read else contextlib.nullcontext():
                return events_from_rows(session_id, conn.execute(sql, params))

        return await self._engine.read(run)

    async def last_seq(self, session_id: str) -> int:
        def run(conn: sqlite3.Connection) -> int:
            sql = "SELECT coalesce(max(seq), 0) FROM events WHERE session_id = ?"
            last: int = conn.execute(sql, (session_id,)).fetchone()[0]
            return last

        return await self._engine.read(run)

    async def last_seqs(self, session_ids: Sequence[str]) -> dict[str, int]:
        wanted = list(dict.fromkeys(session_ids))

        def run(conn: sqlite3.Connection) -> dict[str, int]:
            found = dict.fromkeys(wanted, 0)
            for start in range(0, len(wanted), _ID_CHUNK):
                chunk = wanted[start : start + _ID_CHUNK]
                sql = (
                    "SELECT session_id, max(seq) FROM events"  # noqa: S608 (placeholders)
                    f" WHERE session_id IN ({', '.join('?' * len(chunk))}) GROUP BY session_id"
                )
                found.update(conn.execute(sql, chunk).fetchall())
            return found

        return await self._engine.read(run) if wanted else {}

    async def follow_appends(self, notify: AppendListener) -> AppendFeed:
        return await SqliteFeed.start(self._engine, notify)

    # -- leases -----------------------------------------------------------------------------

    async def acquire_lease(self, session_id: str, holder: str, ttl_s: float, now: datetime) -> Lease | None:
        now_us = codec.to_us(now)
        expires_us = codec.to_us(now + timedelta(seconds=ttl_s))

        def run(conn: sqlite3.Connection) -> Lease | None:
            row = conn.execute(
                "SELECT holder, epoch, expires_at FROM leases WHERE session_id = ?", (session_id,)
            ).fetchone()
            if row is None:
                epoch = 1
                conn.execute(
                    "INSERT INTO leases (session_id, holder, epoch, expires_at) VALUES (?, ?, 1, ?)",
                    (session_id, holder, expires_us),
                )
            elif row[0] is not None and row[2] > now_us:  # a live lease
                if row[0] != holder:
                    return None
                epoch = row[1]
                conn.execute(
                    "UPDATE leases SET expires_at = ? WHERE session_id = ?", (expires_us, session_id)
                )
            else:  # released or expired: it changes hands
                epoch = row[1] + 1
                conn.execute(
                    "UPDATE leases SET holder = ?, epoch = ?, expires_at = ? WHERE session_id = ?",
                    (holder, epoch, expires_us, session_id),
                )
            return Lease(session_id, holder, epoch, codec.from_us(expires_us))

        return await self._engine.write(run)

    async def renew_lease(
        self, session_id: str, holder: str, epoch: int, ttl_s: float, now: datetime
    ) -> Lease | None:
        expires_us = codec.to_us(now + timedelta(seconds=ttl_s))

        def run(conn: sqlite3.Connection) -> Lease | None:
            renewed = conn.execute(
                "UPDATE leases SET expires_at = ? WHERE session_id = ? AND holder = ? AND epoch = ?",
                (expires_us, session_id, holder, epoch),
            ).rowcount
            return Lease(session_id, holder, epoch, codec.from_us(expires_us)) if renewed else None

        return await self._engine.write(run)

    async def release_lease(self, session_id: str, holder: str, epoch: int) -> None:
        def run(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE leases SET holder = NULL WHERE session_id = ? AND holder = ? AND epoch = ?",
                (session_id, holder, epoch),
            )

        await self._engine.write(run)

    async def get_lease(self, session_id: str) -> Lease | None:
        def run(conn: sqlite3.Connection) -> Lease | None:
            row = conn.execute(
                "SELECT holder, epoch, expires_at FROM leases WHERE session_id = ? AND holder IS NOT NULL",
                (session_id,),
            ).fetchone()
            return None if row is None else Lease(session_id, row[0], row[1], codec.from_us(row[2]))

        return await self._engine.read(run)

    async def expired_leases(self, now: datetime, limit: int = 100) -> list[Lease]:
        now_us = codec.to_us(now)
        codec.check_limit(limit)

        def run(conn: sqlite3.Connection) -> list[Lease]:
            rows = conn.execute(
                "SELECT session_id, holder, epoch, expires_at FROM leases"
                " WHERE holder IS NOT NULL AND expires_at <= ? ORDER BY expires_at, session_id LIMIT ?",
                (now_us, limit),
            ).fetchall()
            return [Lease(s, h, e, codec.from_us(x)) for s, h, e, x in rows]

        return await self._engine.read(run)

    # -- edge presence ----------------------------------------------------------------------

    async def hold_edges(self, holder: str, edge_ids: Sequence[str], ttl_s: float, now: datetime) -> None:
        expires_us = codec.to_us(now + timedelta(seconds=ttl_s))
        rows = [(edge_id, holder, expires_us) for edge_id in edge_ids]
        if not rows:
            return
        seen = [(codec.to_us(now), edge_id) for edge_id in edge_ids]

        def run(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "INSERT INTO edge_presence (edge_id, holder, expires_at) VALUES (?, ?, ?)"
                " ON CONFLICT (edge_id) DO UPDATE SET holder = excluded.holder,"
                " expires_at = excluded.expires_at",
                rows,
            )
            conn.executemany("UPDATE edges SET last_seen_at = ? WHERE id = ?", seen)

        await self._engine.write(run)

    async def release_edges(self, holder: str, edge_ids: Sequence[str]) -> None:
        rows = [(edge_id, holder) for edge_id in edge_ids]
        if not rows:
            return

        def run(conn: sqlite3.Connection) -> None:
            conn.executemany("DELETE FROM edge_presence WHERE edge_id = ? AND holder = ?", rows)

        await self._engine.write(run)

    async def edge_holder(self, edge_id: str, now: datetime) -> str | None:
        now_us = codec.to_us(now)

        def run(conn: sqlite3.Connection) -> str | None:
            row = conn.execute(
                "SELECT holder FROM edge_presence WHERE edge_id = ? AND expires_at > ?", (edge_id, now_us)
            ).fetchone()
            return None if row is None else str(row[0])

        return await self._engine.read(run)

    async def edge_holders(self, now: datetime) -> dict[str, str]:
        now_us = codec.to_us(now)

        def run(conn: sqlite3.Connection) -> dict[str, str]:
            rows = conn.execute(
                "SELECT edge_id, holder FROM edge_presence WHERE expires_at > ?", (now_us,)
            ).fetchall()
            return {str(edge_id): str(holder) for edge_id, holder in rows}

        return await self._engine.read(run)

    # -- wake requests ----------------------------------------------------------------------

    async def request_wake(self, session_id: str, now: datetime) -> None:
        now_us = codec.to_us(now)

        def run(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO session_wakes (session_id, requested_at) VALUES (?, ?)"
                " ON CONFLICT (session_id) DO NOTHING",
                (session_id, now_us),
            )

        await self._engine.write(run)

    async def wake_requests(self, limit: int = 100) -> list[str]:
        codec.check_limit(limit)

        def run(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute(
                "SELECT session_id FROM session_wakes ORDER BY requested_at, session_id LIMIT ?", (limit,)
            ).fetchall()
            return [str(r[0]) for r in rows]

        return await self._engine.read(run)

    async def clear_wake(self, session_id: str) -> None:
        def run(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM session_wakes WHERE session_id = ?", (session_id,))

        await self._engine.write(run)

    # -- one-time nonces --------------------------------------------------------------------

    async def use_nonce(self, key: str, expires_at: datetime, now: datetime) -> bool:
        now_us, expires_us = codec.to_us(now), codec.to_us(expires_at)

        def run(conn: sqlite3.Connection) -> bool:
            conn.execute(
                "DELETE FROM pop_nonces WHERE key IN"
                " (SELECT key FROM pop_nonces WHERE expires_at <= ? ORDER BY expires_at LIMIT 256)",
                (now_us,),
            )
            inserted = conn.execute(
                "INSERT INTO pop_nonces (key, expires_at) VALUES (?, ?) ON CONFLICT (key) DO NOTHING",
                (key, expires_us),
            ).rowcount
            return bool(inserted)

        return await self._engine.write(run)

    # -- sandbox placement ------------------------------------------------------------------

    async def get_sandbox_edge(self, session_id: str) -> str | None:
        def run(conn: sqlite3.Connection) -> str | None:
            row = conn.execute(
                "SELECT edge_id FROM sandbox_placements WHERE session_id = ?", (session_id,)
            ).fetchone()
            return None if row is None else str(row[0])

        return await self._engine.read(run)

    async def set_sandbox_edge(self, session_id: str, edge_id: str | None) -> None:
        def run(conn: sqlite3.Connection) -> None:
            if edge_id is None:
                conn.execute("DELETE FROM sandbox_placements WHERE session_id = ?", (session_id,))
            else:
                conn.execute(
                    "INSERT INTO sandbox_placements (session_id, edge_id) VALUES (?, ?)"
                    " ON CONFLICT (session_id) DO UPDATE SET edge_id = excluded.edge_id",
                    (session_id, edge_id),
                )

        await self._engine.write(run)

    # -- retention ------------------------------------------------------------------------------

    async def prune_archived(self, kind: str, archived_before: datetime, limit: int = 100) -> list[str]:
        codec.check_limit(limit)
        before_us = codec.to_us(archived_before, "archived_before")
        deleted: list[str] = []

        def run(conn: sqlite3.Connection) -> tuple[list[str], bool]:
            """One bounded transaction: the due resources in archive order, deleting at most
            ``_PRUNE_EVENT_ROWS`` events; a session whose log is left half-deleted goes next time."""
            due = conn.execute(
                "SELECT id FROM resources INDEXED BY resources_by_archive"
                " WHERE kind = ? AND archived_at IS NOT NULL AND archived_at < ?"
                " ORDER BY archived_at, id LIMIT ?",
                (kind, before_us, min(limit - len(deleted), _PRUNE_RESOURCES)),
            ).fetchall()
            done: list[str] = []
            budget = _PRUNE_EVENT_ROWS
            for (id,) in due:
                if kind == "session":
                    budget -= conn.execute(
                        "DELETE FROM events WHERE session_id = ? AND seq IN"
                        " (SELECT seq FROM events WHERE session_id = ? ORDER BY seq LIMIT ?)",
                        (id, id, budget + 1),
                    ).rowcount
                    if budget < 0:  # more events than the budget: the rest in the next transaction
                        return done, True
                    conn.execute("DELETE FROM leases WHERE session_id = ?", (id,))
                    conn.execute("DELETE FROM sandbox_placements WHERE session_id = ?", (id,))
                    conn.execute("DELETE FROM session_wakes WHERE session_id = ?", (id,))
                if kind == MEMORY_STORE_KIND:
                    _forget_memory_store(conn, id)
                # resource_versions rows go with the resource (ON DELETE CASCADE).
                conn.execute("DELETE FROM resources WHERE kind = ? AND id = ?", (kind, id))
                done.append(str(id))
            return done, len(done) == _PRUNE_RESOURCES

        while len(deleted) < limit:
            done, more = await self._engine.write(run)
            deleted += done
            if not more:
                break
        return deleted

    async def forget_lease(self, session_id: str) -> bool:
        def run(conn: sqlite3.Connection) -> bool:
            sql = "DELETE FROM leases WHERE session_id = ? AND holder IS NULL"
            return bool(conn.execute(sql, (session_id,)).rowcount)

        return await self._engine.write(run)


def _forget_memory_store(conn: sqlite3.Connection, store_id: str) -> None:
    """A deleted memory store's memories and versions go with it."""
    conn.execute("DELETE FROM memories WHERE store_id = ?", (store_id,))
    conn.execute("DELETE FROM memory_versions WHERE store_id = ?", (store_id,))
