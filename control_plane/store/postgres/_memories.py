"""The :class:`~control_plane.store.base.Memories` role of the PostgreSQL store: memories and their
versions, a mixin of :class:`~control_plane.store.postgres.PostgresStore`.

Every write locks its memory store's resource row (``FOR UPDATE``) for its transaction, so the
writes of one store take turns on every replica: the checks (the store exists and is not
archived, the precondition, the path free, the cap), the change and the version are atomic, and
versions are numbered (``seq``) in commit order. Deleting the store takes the same lock. Paths are
``COLLATE "C"``: compared and ordered byte for byte, as in the other backends.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from control_plane.errors import InvalidRequest, MemoryPathConflict, MemoryPreconditionFailed, NotFound
from control_plane.store import _codec as codec
from control_plane.store._sqlite_memories import (
    MEMORY_COLUMNS,
    VERSION_COLUMNS,
    actor_values,
    columns,
    memory_from_row,
    redact_refusal,
    version_filter_sql,
    version_from_row,
    version_values,
)
from control_plane.store.base import (
    MEMORY_STORE_KIND,
    MemoryActor,
    MemoryRecord,
    MemoryVersionFilter,
    MemoryVersionRecord,
    MemoryWrite,
    Order,
)

__all__ = ["PostgresMemories"]

_GET_MEMORY = (
    "SELECT id, path, content, content_sha256, content_size, version_id, created_at, updated_at"
    " FROM memories WHERE store_id = $1 AND id = $2"
)
_PATH_HOLDER = "SELECT id FROM memories WHERE store_id = $1 AND path = $2"
_STORE_STATE = "SELECT archived_at FROM resources WHERE kind = $1 AND id = $2"
_STORE_STATE_FOR_UPDATE = _STORE_STATE + " FOR UPDATE"
_INSERT_VERSION = (
    "INSERT INTO memory_versions (store_id, seq, id, memory_id, operation, path, content,"
    " content_sha256, content_size, actor_type, actor_id, created_at)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
)


async def _check_store(conn: Any, store_id: str, *, lock: bool, writable: bool = False) -> None:
    sql = _STORE_STATE_FOR_UPDATE if lock else _STORE_STATE
    row = await conn.fetchrow(sql, MEMORY_STORE_KIND, store_id)
    if row is None:
        raise NotFound(MEMORY_STORE_KIND, store_id)
    if writable and row[0] is not None:
        raise InvalidRequest(f"memory store {store_id!r} is archived: its memories cannot change")


async def _append_version(
    conn: Any, store_id: str, memory: Sequence[Any], operation: str, write: MemoryWrite, now_us: int
) -> None:
    seq = await conn.fetchval(
        "SELECT coalesce(max(seq), 0) + 1 FROM memory_versions WHERE store_id = $1", store_id
    )
    await conn.execute(_INSERT_VERSION, *version_values(store_id, seq, memory, operation, write, now_us))


class PostgresMemories:
    """Memories and versions on the connections of the store (``_conn``)."""

    def _conn(self) -> contextlib.AbstractAsyncContextManager[Any]:
        raise NotImplementedError  # PostgresStore's pooled connection

    async def create_memory(
        self, store_id: str, memory_id: str, path: str, content: str, write: MemoryWrite, *, max_memories: int
    ) -> MemoryRecord:
        now_us = codec.to_us(write.now)
        sha, size = codec.content_digest(content)
        row = (memory_id, path, content, sha, size, write.version_id, now_us, now_us)
        async with self._conn() as conn, conn.transaction():
            await _check_store(conn, store_id, lock=True, writable=True)
            holder = await conn.fetchval(_PATH_HOLDER, store_id, path)
            if holder is not None:
                raise MemoryPathConflict(path, holder)
            count = await conn.fetchval("SELECT count(*) FROM memories WHERE store_id = $1", store_id)
            if count >= max_memories:
                raise InvalidRequest(
                    f"memory store {store_id!r} holds {max_memories} memories, the most it may"
                )
            await conn.execute(
                "INSERT INTO memories (id, path, content, content_sha256, content_size, version_id,"
                " created_at, updated_at, store_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                *row,
                store_id,
            )
            await _append_version(conn, store_id, row, "created", write, now_us)
        return memory_from_row(store_id, row)

    async def get_memory(self, store_id: str, memory_id: str, *, with_content: bool = True) -> MemoryRecord:
        sql = f"SELECT {columns(MEMORY_COLUMNS, with_content)} FROM memories WHERE store_id = $1 AND id = $2"  # noqa: S608
        async with self._conn() as conn:
            await _check_store(conn, store_id, lock=False)
            row = await conn.fetchrow(sql, store_id, memory_id)
        if row is None:
            raise NotFound("memory", memory_id)
        return memory_from_row(store_id, tuple(row))

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
        async with self._conn() as conn, conn.transaction():
            await _check_store(conn, store_id, lock=True, writable=True)
            found = await conn.fetchrow(_GET_MEMORY, store_id, memory_id)
            if found is None:
                raise NotFound("memory", memory_id)
            current = tuple(found)
            if expected_sha256 is not None and expected_sha256 != current[3]:
                raise MemoryPreconditionFailed(memory_id, expected_sha256)
            new_path = current[1] if path is None else path
            new_content, sha, size = (
                (current[2], current[3], current[4]) if digest is None else (content, *digest)
            )
            if new_path == current[1] and new_content == current[2]:
                return memory_from_row(store_id, current)
            if new_path != current[1]:
                holder = await conn.fetchval(_PATH_HOLDER, store_id, new_path)
                if holder is not None:
                    raise MemoryPathConflict(new_path, holder)
            row = (memory_id, new_path, new_content, sha, size, write.version_id, current[6], now_us)
            await conn.execute(
                "UPDATE memories SET path = $1, content = $2, content_sha256 = $3, content_size = $4,"
                " version_id = $5, updated_at = $6 WHERE store_id = $7 AND id = $8",
                new_path,
                new_content,
                sha,
                size,
                write.version_id,
                now_us,
                store_id,
                memory_id,
            )
            await _append_version(conn, store_id, row, "modified", write, now_us)
        return memory_from_row(store_id, row)

    async def delete_memory(
        self, store_id: str, memory_id: str, write: MemoryWrite, *, expected_sha256: str | None = None
    ) -> None:
        now_us = codec.to_us(write.now)
        async with self._conn() as conn, conn.transaction():
            await _check_store(conn, store_id, lock=True)
            current = await conn.fetchrow(_GET_MEMORY, store_id, memory_id)
            if current is None:
                raise NotFound("memory", memory_id)
            if expected_sha256 is not None and expected_sha256 != current[3]:
                raise MemoryPreconditionFailed(memory_id, expected_sha256)
            await conn.execute("DELETE FROM memories WHERE store_id = $1 AND id = $2", store_id, memory_id)
            await _append_version(conn, store_id, tuple(current), "deleted", write, now_us)

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
            " WHERE store_id = $1 AND path >= $2 AND path < $3 ORDER BY path LIMIT $4"
        )
        async with self._conn() as conn:
            await _check_store(conn, store_id, lock=False)
            rows = await conn.fetch(sql, store_id, low, high, limit)
        return [memory_from_row(store_id, tuple(row)) for row in rows]

    async def get_memory_version(
        self, store_id: str, version_id: str, *, with_content: bool = True
    ) -> MemoryVersionRecord:
        sql = (
            f"SELECT {columns(VERSION_COLUMNS, with_content)} FROM memory_versions"  # noqa: S608
            " WHERE store_id = $1 AND id = $2"
        )
        async with self._conn() as conn:
            await _check_store(conn, store_id, lock=False)
            row = await conn.fetchrow(sql, store_id, version_id)
        if row is None:
            raise NotFound("memory_version", version_id)
        return version_from_row(store_id, tuple(row))

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
        clauses, values = version_filter_sql(query, lambda n: f"${n + 1}")
        where = "".join(f" AND {c}" for c in clauses)
        direction = "DESC" if order is Order.DESC else "ASC"
        sql = (
            f"SELECT {columns(VERSION_COLUMNS, with_content)} FROM memory_versions"  # noqa: S608
            f" WHERE store_id = $1{where} ORDER BY seq {direction} LIMIT ${len(values) + 2}"
        )
        async with self._conn() as conn:
            await _check_store(conn, store_id, lock=False)
            rows = await conn.fetch(sql, store_id, *values, limit)
        return [version_from_row(store_id, tuple(row)) for row in rows]

    async def redact_memory_version(
        self, store_id: str, version_id: str, actor: MemoryActor | None, now: datetime
    ) -> MemoryVersionRecord:
        now_us = codec.to_us(now)
        sql = f"SELECT {columns(VERSION_COLUMNS, True)} FROM memory_versions WHERE store_id = $1 AND id = $2"  # noqa: S608
        async with self._conn() as conn, conn.transaction():
            await _check_store(conn, store_id, lock=True)
            row = await conn.fetchrow(sql, store_id, version_id)
            if row is None:
                raise NotFound("memory_version", version_id)
            version = version_from_row(store_id, tuple(row))
            if version.redacted_at is not None:
                return version
            live = await conn.fetchval(
                "SELECT 1 FROM memories WHERE store_id = $1 AND id = $2 AND version_id = $3",
                store_id,
                version.memory_id,
                version_id,
            )
            if live is not None:
                raise InvalidRequest(redact_refusal(version))
            await conn.execute(
                "UPDATE memory_versions SET path = NULL, content = NULL, content_sha256 = NULL,"
                " content_size = NULL, redacted_at = $1, redactor_type = $2, redactor_id = $3"
                " WHERE store_id = $4 AND id = $5",
                now_us,
                *actor_values(actor),
                store_id,
                version_id,
            )
            row = await conn.fetchrow(sql, store_id, version_id)
        return version_from_row(store_id, tuple(row))
