"""The :class:`~control_plane.store.base.Memories` role of the SQLite store: memories and their
versions, a mixin of :class:`~control_plane.store.sqlite.SqliteStore`.

Writes go through the engine's single writer, each in its own savepoint: the checks (the store
exists and is not archived, the precondition, the path free, the cap), the change and the version
are one transaction, and no other write runs in between. Versions are numbered per store
(``seq``) in commit order. The row conversions are shared with the PostgreSQL store.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from control_plane.errors import InvalidRequest, MemoryPathConflict, MemoryPreconditionFailed, NotFound
from control_plane.store import _codec as codec
from control_plane.store._sqlite_engine import SqliteEngine
from control_plane.store.base import (
    MEMORY_STORE_KIND,
    MemoryActor,
    MemoryRecord,
    MemoryVersionFilter,
    MemoryVersionRecord,
    MemoryWrite,
    Order,
)

__all__ = [
    "MEMORY_COLUMNS",
    "VERSION_COLUMNS",
    "SqliteMemories",
    "memory_from_row",
    "version_from_row",
]

MEMORY_COLUMNS = "id, path, {content}, content_sha256, content_size, version_id, created_at, updated_at"
VERSION_COLUMNS = (
    "id, memory_id, seq, operation, path, {content}, content_sha256, content_size,"
    " actor_type, actor_id, created_at, redacted_at, redactor_type, redactor_id"
)


def columns(template: str, with_content: bool) -> str:
    """The column list, with ``content`` or a NULL in its place."""
    return template.format(content="content" if with_content else "NULL")


def memory_from_row(store_id: str, row: Sequence[Any]) -> MemoryRecord:
    return MemoryRecord(
        id=row[0],
        store_id=store_id,
        path=row[1],
        content=row[2],
        content_sha256=row[3],
        content_size_bytes=row[4],
        version_id=row[5],
        created_at=codec.from_us(row[6]),
        updated_at=codec.from_us(row[7]),
    )


def _actor(kind: str | None, id: str | None) -> MemoryActor | None:
    return None if kind is None or id is None else MemoryActor(kind, id)


def version_from_row(store_id: str, row: Sequence[Any]) -> MemoryVersionRecord:
    return MemoryVersionRecord(
        id=row[0],
        store_id=store_id,
        memory_id=row[1],
        seq=row[2],
        operation=row[3],
        path=row[4],
        content=row[5],
        content_sha256=row[6],
        content_size_bytes=row[7],
        created_by=_actor(row[8], row[9]),
        created_at=codec.from_us(row[10]),
        redacted_at=codec.opt_from_us(row[11]),
        redacted_by=_actor(row[12], row[13]),
    )


def version_filter_sql(query: MemoryVersionFilter, mark: Any) -> tuple[list[str], list[Any]]:
    """WHERE clauses (fixed texts, ``mark(n)`` placeholders) and their values."""
    clauses: list[str] = []
    values: list[Any] = []

    def add(sql: str, value: Any) -> None:
        values.append(value)
        clauses.append(sql.format(mark(len(values))))

    if query.memory_id is not None:
        add("memory_id = {}", query.memory_id)
    if query.operation is not None:
        add("operation = {}", query.operation)
    if query.actor is not None:
        add("actor_type = {}", query.actor.type)
        add("actor_id = {}", query.actor.id)
    if query.created_after is not None:
        add("created_at >= {}", codec.to_us(query.created_after, "created_after"))
    if query.created_before is not None:
        add("created_at <= {}", codec.to_us(query.created_before, "created_before"))
    if query.after_seq is not None:
        add("seq > {}", query.after_seq)
    if query.before_seq is not None:
        add("seq < {}", query.before_seq)
    return clauses, values


def version_values(
    store_id: str, seq: int, memory: Sequence[Any], operation: str, write: MemoryWrite, now_us: int
) -> tuple[Any, ...]:
    """The row of a new version; ``memory`` is ``(id, path, content, sha256, size)``."""
    deleted = operation == "deleted"
    actor = write.actor
    return (
        store_id,
        seq,
        write.version_id,
        memory[0],
        operation,
        memory[1],
        None if deleted else memory[2],
        None if deleted else memory[3],
        None if deleted else memory[4],
        None if actor is None else actor.type,
        None if actor is None else actor.id,
        now_us,
    )


_STORE_STATE = "SELECT archived_at FROM resources WHERE kind = ? AND id = ?"
_INSERT_VERSION = (
    "INSERT INTO memory_versions (store_id, seq, id, memory_id, operation, path, content,"
    " content_sha256, content_size, actor_type, actor_id, created_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_NEXT_SEQ = "SELECT coalesce(max(seq), 0) + 1 FROM memory_versions WHERE store_id = ?"
_GET_MEMORY = (
    "SELECT id, path, content, content_sha256, content_size, version_id, created_at, updated_at"
    " FROM memories WHERE store_id = ? AND id = ?"
)
_PATH_HOLDER = "SELECT id FROM memories WHERE store_id = ? AND path = ?"


def _check_store(conn: sqlite3.Connection, store_id: str, *, writable: bool) -> None:
    row = conn.execute(_STORE_STATE, (MEMORY_STORE_KIND, store_id)).fetchone()
    if row is None:
        raise NotFound(MEMORY_STORE_KIND, store_id)
    if writable and row[0] is not None:
        raise InvalidRequest(f"memory store {store_id!r} is archived: its memories cannot change")


def _append_version(
    conn: sqlite3.Connection,
    store_id: str,
    memory: Sequence[Any],
    operation: str,
    write: MemoryWrite,
    now_us: int,
) -> None:
    seq = conn.execute(_NEXT_SEQ, (store_id,)).fetchone()[0]
    conn.execute(_INSERT_VERSION, version_values(store_id, seq, memory, operation, write, now_us))


class SqliteMemories:
    """Memories and versions on the engine the store sets up (``_engine``)."""

    _engine: SqliteEngine

    async def create_memory(
        self, store_id: str, memory_id: str, path: str, content: str, write: MemoryWrite, *, max_memories: int
    ) -> MemoryRecord:
        now_us = codec.to_us(write.now)
        sha, size = codec.content_digest(content)

        def run(conn: sqlite3.Connection) -> MemoryRecord:
            _check_store(conn, store_id, writable=True)
            holder = conn.execute(_PATH_HOLDER, (store_id, path)).fetchone()
            if holder is not None:
                raise MemoryPathConflict(path, holder[0])
            count = conn.execute("SELECT count(*) FROM memories WHERE store_id = ?", (store_id,)).fetchone()[
                0
            ]
            if count >= max_memories:
                raise InvalidRequest(
                    f"memory store {store_id!r} holds {max_memories} memories, the most it may"
                )
            row = (memory_id, path, content, sha, size, write.version_id, now_us, now_us)
            conn.execute(
                "INSERT INTO memories (id, path, content, content_sha256, content_size, version_id,"
                " created_at, updated_at, store_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*row, store_id),
            )
            _append_version(conn, store_id, row, "created", write, now_us)
            return memory_from_row(store_id, row)

        return await self._engine.write(run)

    async def get_memory(self, store_id: str, memory_id: str, *, with_content: bool = True) -> MemoryRecord:
        sql = f"SELECT {columns(MEMORY_COLUMNS, with_content)} FROM memories WHERE store_id = ? AND id = ?"  # noqa: S608

        def run(conn: sqlite3.Connection) -> MemoryRecord:
            _check_store(conn, store_id, writable=False)
            row = conn.execute(sql, (store_id, memory_id)).fetchone()
            if row is None:
                raise NotFound("memory", memory_id)
            return memory_from_row(store_id, row)

        return await self._engine.read(run)

    async def update_memory(
        self,
        store_id: str,
        memory_id: str,
        write: MemoryWrite,
        *,
        content: str | None = None,
        path: str | None = None,
        expected_sha256: str | None = None,
    ) -> MemoryRecord:
        now_us = codec.to_us(write.now)
        digest = None if content is None else codec.content_digest(content)

        def run(conn: sqlite3.Connection) -> MemoryRecord:
            _check_store(conn, store_id, writable=True)
            current = conn.execute(_GET_MEMORY, (store_id, memory_id)).fetchone()
            if current is None:
                raise NotFound("memory", memory_id)
            if expected_sha256 is not None and expected_sha256 != current[3]:
                raise MemoryPreconditionFailed(memory_id, expected_sha256)
            new_path = current[1] if path is None else path
            new_content, sha, size = (
                (current[2], current[3], current[4]) if digest is None else (content, *digest)
            )
            if new_path == current[1] and new_content == current[2]:
                return memory_from_row(store_id, current)
            if new_path != current[1]:
                holder = conn.execute(_PATH_HOLDER, (store_id, new_path)).fetchone()
                if holder is not None:
                    raise MemoryPathConflict(new_path, holder[0])
            row = (memory_id, new_path, new_content, sha, size, write.version_id, current[6], now_us)
            conn.execute(
                "UPDATE memories SET path = ?, content = ?, content_sha256 = ?, content_size = ?,"
                " version_id = ?, updated_at = ? WHERE store_id = ? AND id = ?",
                (new_path, new_content, sha, size, write.version_id, now_us, store_id, memory_id),
            )
            _append_version(conn, store_id, row, "modified", write, now_us)
            return memory_from_row(store_id, row)

        return await self._engine.write(run)

    async def delete_memory(
        self, store_id: str, memory_id: str, write: MemoryWrite, *, expected_sha256: str | None = None
    ) -> None:
        now_us = codec.to_us(write.now)

        def run(conn: sqlite3.Connection) -> None:
            _check_store(conn, store_id, writable=False)
            current = conn.execute(_GET_MEMORY, (store_id, memory_id)).fetchone()
            if current is None:
                raise NotFound("memory", memory_id)
            if expected_sha256 is not None and expected_sha256 != current[3]:
                raise MemoryPreconditionFailed(memory_id, expected_sha256)
            conn.execute("DELETE FROM memories WHERE store_id = ? AND id = ?", (store_id, memory_id))
            _append_version(conn, store_id, current, "deleted", write, now_us)

        await self._engine.write(run)

    async def list_memories(
        self,
        store_id: str,
        *,
        path_prefix: str = "/",
        path_from: str | None = None,
        limit: int = 20,
        with_content: bool = False,
    ) -> list[MemoryRecord]:
        codec.check_limit(limit)
        low, high = codec.path_range(path_prefix, path_from)
        sql = (
            f"SELECT {columns(MEMORY_COLUMNS, with_content)} FROM memories"  # noqa: S608
            " WHERE store_id = ? AND path >= ? AND path < ? ORDER BY path LIMIT ?"
        )

        def run(conn: sqlite3.Connection) -> list[MemoryRecord]:
            _check_store(conn, store_id, writable=False)
            rows = conn.execute(sql, (store_id, low, high, limit)).fetchall()
            return [memory_from_row(store_id, row) for row in rows]

        return await self._engine.read(run)

    async def get_memory_version(
        self, store_id: str, version_id: str, *, with_content: bool = True
    ) -> MemoryVersionRecord:
        sql = (
            f"SELECT {columns(VERSION_COLUMNS, with_content)} FROM memory_versions"  # noqa: S608
            " WHERE store_id = ? AND id = ?"
        )

        def run(conn: sqlite3.Connection) -> MemoryVersionRecord:
            _check_store(conn, store_id, writable=False)
            row = conn.execute(sql, (store_id, version_id)).fetchone()
            if row is None:
                raise NotFound("memory_version", version_id)
            return version_from_row(store_id, row)

        return await self._engine.read(run)

    async def list_memory_versions(
        self,
        store_id: str,
        query: MemoryVersionFilter,
        *,
        limit: int = 20,
        order: Order = Order.DESC,
        with_content: bool = False,
    ) -> list[MemoryVersionRecord]:
        codec.check_limit(limit)
        clauses, values = version_filter_sql(query, lambda _: "?")
        where = "".join(f" AND {c}" for c in clauses)
        direction = "DESC" if order is Order.DESC else "ASC"
        sql = (
            f"SELECT {columns(VERSION_COLUMNS, with_content)} FROM memory_versions"  # noqa: S608
            f" WHERE store_id = ?{where} ORDER BY seq {direction} LIMIT ?"
        )

        def run(conn: sqlite3.Connection) -> list[MemoryVersionRecord]:
            _check_store(conn, store_id, writable=False)
            rows = conn.execute(sql, (store_id, *values, limit)).fetchall()
            return [version_from_row(store_id, row) for row in rows]

        return await self._engine.read(run)

    async def redact_memory_version(
        self, store_id: str, version_id: str, actor: MemoryActor | None, now: datetime
    ) -> MemoryVersionRecord:
        now_us = codec.to_us(now)
        sql = f"SELECT {columns(VERSION_COLUMNS, True)} FROM memory_versions WHERE store_id = ? AND id = ?"  # noqa: S608

        def run(conn: sqlite3.Connection) -> MemoryVersionRecord:
            _check_store(conn, store_id, writable=False)
            row = conn.execute(sql, (store_id, version_id)).fetchone()
            if row is None:
                raise NotFound("memory_version", version_id)
            version = version_from_row(store_id, row)
            if version.redacted_at is not None:
                return version
            live = conn.execute(
                "SELECT 1 FROM memories WHERE store_id = ? AND id = ? AND version_id = ?",
                (store_id, version.memory_id, version_id),
            ).fetchone()
            if live is not None:
                raise InvalidRequest(redact_refusal(version))
            conn.execute(
                "UPDATE memory_versions SET path = NULL, content = NULL, content_sha256 = NULL,"
                " content_size = NULL, redacted_at = ?, redactor_type = ?, redactor_id = ?"
                " WHERE store_id = ? AND id = ?",
                (now_us, *actor_values(actor), store_id, version_id),
            )
            return version_from_row(store_id, conn.execute(sql, (store_id, version_id)).fetchone())

        return await self._engine.write(run)


def actor_values(actor: MemoryActor | None) -> tuple[str | None, str | None]:
    return (None, None) if actor is None else (actor.type, actor.id)


def redact_refusal(version: MemoryVersionRecord) -> str:
    return (
        f"memory version {version.id!r} holds the current content of memory {version.memory_id!r}:"
        " change or delete the memory before redacting it"
    )
