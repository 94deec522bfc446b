"""The :class:`~control_plane.store.base.Memories` role of the in-memory store, a mixin of
:class:`~control_plane.store.memory.MemoryStore`.

Every method runs to completion without awaiting, so each write (checks, change, version) is
atomic with respect to other tasks on the event loop, as a transaction is in the durable stores.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime

from control_plane.errors import InvalidRequest, MemoryPathConflict, MemoryPreconditionFailed, NotFound
from control_plane.store import _codec as codec
from control_plane.store.base import (
    MemoryActor,
    MemoryRecord,
    MemoryVersionFilter,
    MemoryVersionRecord,
    MemoryWrite,
    Order,
)

__all__ = ["InMemoryMemories"]


@dataclass(slots=True)
class _Memory:
    id: str
    path: str
    content: str
    sha256: str
    size: int
    version_id: str
    created_at: datetime
    updated_at: datetime

    def record(self, store_id: str, with_content: bool) -> MemoryRecord:
        return MemoryRecord(
            id=self.id,
            store_id=store_id,
            path=self.path,
            content=self.content if with_content else None,
            content_sha256=self.sha256,
            content_size_bytes=self.size,
            version_id=self.version_id,
            created_at=self.created_at,
            updated_at=self.updated_at,
        )


def _shown(version: MemoryVersionRecord, with_content: bool) -> MemoryVersionRecord:
    return version if with_content else dataclasses.replace(version, content=None)


def _matches(
    v: MemoryVersionRecord, query: MemoryVersionFilter, after_us: int | None, before_us: int | None
) -> bool:
    created_us = codec.to_us(v.created_at)
    return (
        (query.memory_id is None or v.memory_id == query.memory_id)
        and (query.operation is None or v.operation == query.operation)
        and (query.actor is None or v.created_by == query.actor)
        and (after_us is None or created_us >= after_us)
        and (before_us is None or created_us <= before_us)
        and (query.after_seq is None or v.seq > query.after_seq)
        and (query.before_seq is None or v.seq < query.before_seq)
    )


class InMemoryMemories:
    """Memories and versions in dicts; the store provides ``_memory_store_archived``."""

    _memory_rows: dict[str, dict[str, _Memory]]  # store id -> memory id -> memory
    _memory_versions: dict[str, list[MemoryVersionRecord]]  # store id -> versions, seq order

    def _init_memories(self) -> None:
        self._memory_rows = {}
        self._memory_versions = {}

    def _memory_store_archived(self, store_id: str) -> bool:
        """Whether the memory store is archived; ``NotFound`` if there is none."""
        raise NotImplementedError  # MemoryStore's

    def _forget_memory_store(self, store_id: str) -> None:
        self._memory_rows.pop(store_id, None)
        self._memory_versions.pop(store_id, None)

    def _writable(self, store_id: str) -> dict[str, _Memory]:
        if self._memory_store_archived(store_id):
            raise InvalidRequest(f"memory store {store_id!r} is archived: its memories cannot change")
        return self._memory_rows.setdefault(store_id, {})

    def _append_version(
        self, store_id: str, memory: _Memory, operation: str, write: MemoryWrite, now: datetime
    ) -> None:
        versions = self._memory_versions.setdefault(store_id, [])
        deleted = operation == "deleted"
        versions.append(
            MemoryVersionRecord(
                id=write.version_id,
                store_id=store_id,
                memory_id=memory.id,
                seq=len(versions) + 1,
                operation=operation,
                path=memory.path,
                content=None if deleted else memory.content,
                content_sha256=None if deleted else memory.sha256,
                content_size_bytes=None if deleted else memory.size,
                created_by=write.actor,
                created_at=now,
            )
        )

    def _memory(self, store_id: str, memory_id: str) -> _Memory:
        self._memory_store_archived(store_id)  # NotFound for an unknown store
        memory = self._memory_rows.get(store_id, {}).get(memory_id)
        if memory is None:
            raise NotFound("memory", memory_id)
        return memory

    async def create_memory(
        self, store_id: str, memory_id: str, path: str, content: str, write: MemoryWrite, *, max_memories: int
    ) -> MemoryRecord:
        now = codec.from_us(codec.to_us(write.now))
        rows = self._writable(store_id)
        for other in rows.values():
            if other.path == path:
                raise MemoryPathConflict(path, other.id)
        if len(rows) >= max_memories:
            raise InvalidRequest(f"memory store {store_id!r} holds {max_memories} memories, the most it may")
        sha, size = codec.content_digest(content)
        memory = _Memory(memory_id, path, content, sha, size, write.version_id, now, now)
        rows[memory_id] = memory
        self._append_version(store_id, memory, "created", write, now)
        return memory.record(store_id, True)

    async def get_memory(self, store_id: str, memory_id: str, *, with_content: bool = True) -> MemoryRecord:
        return self._memory(store_id, memory_id).record(store_id, with_content)

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
        now = codec.from_us(codec.to_us(write.now))
        rows = self._writable(store_id)
        memory = self._memory(store_id, memory_id)
        if expected_sha256 is not None and expected_sha256 != memory.sha256:
            raise MemoryPreconditionFailed(memory_id, expected_sha256)
        if path is not None and path != memory.path:
            for other in rows.values():
                if other.path == path:
                    raise MemoryPathConflict(path, other.id)
        new_path = memory.path if path is None else path
        new_content = memory.content if content is None else content
        if new_path == memory.path and new_content == memory.content:
            return memory.record(store_id, True)
        memory.path, memory.content = new_path, new_content
        memory.sha256, memory.size = codec.content_digest(new_content)
        memory.version_id, memory.updated_at = write.version_id, now
        self._append_version(store_id, memory, "modified", write, now)
        return memory.record(store_id, True)

    async def delete_memory(
        self, store_id: str, memory_id: str, write: MemoryWrite, *, expected_sha256: str | None = None
    ) -> None:
        now = codec.from_us(codec.to_us(write.now))
        memory = self._memory(store_id, memory_id)
        if expected_sha256 is not None and expected_sha256 != memory.sha256:
            raise MemoryPreconditionFailed(memory_id, expected_sha256)
        del self._memory_rows[store_id][memory_id]
        self._append_version(store_id, memory, "deleted", write, now)

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
        self._memory_store_archived(store_id)
        found = sorted(
            (m for m in self._memory_rows.get(store_id, {}).values() if low <= m.path < high),
            key=lambda m: m.path,
        )
        return [m.record(store_id, with_content) for m in found[:limit]]

    async def get_memory_version(
        self, store_id: str, version_id: str, *, with_content: bool = True
    ) -> MemoryVersionRecord:
        self._memory_store_archived(store_id)
        for version in self._memory_versions.get(store_id, []):
            if version.id == version_id:
                return _shown(version, with_content)
        raise NotFound("memory_version", version_id)

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
        after_us = codec.opt_to_us(query.created_after, "created_after")
        before_us = codec.opt_to_us(query.created_before, "created_before")
        self._memory_store_archived(store_id)
        found = [
            v for v in self._memory_versions.get(store_id, []) if _matches(v, query, after_us, before_us)
        ]
        if order is Order.DESC:
            found.reverse()
        return [_shown(v, with_content) for v in found[:limit]]

    async def redact_memory_version(
        self, store_id: str, version_id: str, actor: MemoryActor | None, now: datetime
    ) -> MemoryVersionRecord:
        now = codec.from_us(codec.to_us(now))
        self._memory_store_archived(store_id)
        versions = self._memory_versions.get(store_id, [])
        for i, version in enumerate(versions):
            if version.id != version_id:
                continue
            if version.redacted_at is not None:
                return version
            live = self._memory_rows.get(store_id, {}).get(version.memory_id)
            if live is not None and live.version_id == version_id:
                raise InvalidRequest(
                    f"memory version {version_id!r} holds the current content of memory"
                    f" {version.memory_id!r}: change or delete the memory before redacting it"
                )
            versions[i] = dataclasses.replace(
                version,
                path=None,
                content=None,
                content_sha256=None,
                content_size_bytes=None,
                redacted_at=now,
                redacted_by=actor,
            )
            return versions[i]
        raise NotFound("memory_version", version_id)
