"""Memory write-back: what a tool call changed under ``/mnt/memory/<slug>`` becomes memory versions.

The edge reports each change a tool made in a session's read-write memory mounts with the
result (:class:`~outpost_wire.results.MemoryChange`, with the sha256 the file had in the contents
the edge was last sent: its *baseline*). The driver hands them to :meth:`MemoryWriteBack.write_back`
**before** it appends the tool result, so a sandbox that dies afterwards loses nothing. Every
write names the session (``session_actor``) and carries the baseline as its precondition:

* **no conflict** (the memory still has the baseline content): an update, a create (new file)
  or a delete, one version each;
* **already applied** (the memory already has the new content: a retry after the control plane
  died between these writes and the result): nothing;
* **conflict** (another writer changed the memory since the baseline): *first writer wins*. The
  loser's content is recorded as a version (``modified``, by this session) and then the winner's
  content is written back on top (another ``modified`` version, by this session), so
  ``memory_versions`` shows both writers' versions and the current content is the first
  writer's, deterministically. The model gets a conflict note in its tool result naming its
  version, and the session's next call re-sends the stores' current contents to the sandbox.
  A retry does not record the loser's version twice (it looks for it among the memory's
  versions by this session first). A delete that lost keeps the other writer's memory (a note).
* **refused** (too large, not UTF-8, a link, a bad path ...): only a note.

:meth:`MemoryWriteBack.before_call` keeps the sandbox's copy fresh: when a mounted store's
manifest (paths and hashes) is not what this process last knew the edge to hold, the session's
next call carries the spec and the contents again.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from control_plane.errors import (
    InvalidRequest,
    MemoryPathConflict,
    MemoryPreconditionFailed,
    NotFound,
)
from control_plane.memory.limits import MAX_MEMORIES_PER_STORE, check_content, check_path
from control_plane.store.base import Memories, MemoryActor, MemoryRecord, MemoryVersionFilter, MemoryWrite
from outpost_wire.frames import MemoryFile, MemoryMount, MemorySnapshot
from outpost_wire.results import MemoryChange

__all__ = ["MemoryWriteBack", "contents_reader"]

_RECENT_VERSIONS = 20


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class MemoryWriteBack:
    """Shared by every session driver of a harness. ``resend_spec(session_id)``: make the
    session's next tool call carry its spec and its memory stores' contents."""

    def __init__(
        self,
        store: Memories,
        clock: Callable[[], datetime],
        resend_spec: Callable[[str], None] | None = None,
        *,
        max_memories: int = MAX_MEMORIES_PER_STORE,
    ) -> None:
        self._store = store
        self._clock = clock
        self._resend = resend_spec or (lambda _sid: None)
        self._max = max_memories
        self._known: dict[str, bytes] = {}  # session id -> manifest digest the edge holds

    async def before_call(self, session_id: str, mounts: Sequence[Mapping[str, Any]]) -> None:
        if not mounts:
            return
        digest = await self._manifest(mounts)
        if self._known.get(session_id) != digest:
            self._resend(session_id)
            self._known[session_id] = digest

    async def write_back(
        self, session_id: str, mounts: Sequence[Mapping[str, Any]], changes: Sequence[MemoryChange]
    ) -> list[str]:
        """Write ``changes``; returns the notes for the model (conflicts, refusals)."""
        by_store = {str(m["memory_store_id"]): m for m in mounts}
        actor = MemoryActor("session_actor", session_id)
        notes: list[str] = []
        conflicted = False
        for change in changes:
            mount = by_store.get(change.store_id)
            if mount is None or mount.get("access") == "read_only":
                continue
            where = f"{mount['mount_path']}{change.path}"
            if change.error:
                notes.append(f"Memory {where}: {change.error}.")
                continue
            try:
                note = await self._apply(change, actor, where)
            except (InvalidRequest, NotFound) as exc:
                note = f"Memory {where} was not saved: {exc}"
            if note is not None:
                notes.append(note)
                conflicted = True
        if conflicted:
            self._known.pop(session_id, None)
            self._resend(session_id)
        elif changes:
            self._known[session_id] = await self._manifest(mounts)
        return notes

    def forget(self, session_id: str) -> None:
        self._known.pop(session_id, None)

    # -- one change ---------------------------------------------------------------------------

    async def _apply(self, change: MemoryChange, actor: MemoryActor, where: str) -> str | None:
        """Write one change; a note when it conflicted (None: written, or nothing to do)."""
        current = await self._find(change.store_id, check_path(change.path))
        if change.content is None:
            if current is None:
                return None
            try:
                await self._store.delete_memory(
                    change.store_id,
                    current.id,
                    self._write(actor),
                    expected_sha256=change.base_sha256 or None,
                )
            except MemoryPreconditionFailed:
                return (
                    f"Memory conflict: {where} was not deleted: another writer changed it since this "
                    "session last saw it; their version was kept (the file is back in the sandbox)."
                )
            return None
        content = check_content(change.content)
        new_sha = _sha(content)
        if current is None:
            try:
                await self._store.create_memory(
                    change.store_id,
                    _id("mem_"),
                    change.path,
                    content,
                    self._write(actor),
                    max_memories=self._max,
                )
                return None
            except MemoryPathConflict:
                current = await self._find(change.store_id, change.path)
                if current is None:
                    raise
        if current.content_sha256 == new_sha:
            return None  # already there (a retry, or the same change made twice)
        if current.content_sha256 == change.base_sha256:
            try:
                await self._store.update_memory(
                    change.store_id,
                    current.id,
                    self._write(actor),
                    content=content,
                    expected_sha256=change.base_sha256,
                )
                return None
            except MemoryPreconditionFailed:
                current = await self._find(change.store_id, change.path) or current
        return await self._conflict(change, current, content, actor, where)

    async def _conflict(
        self, change: MemoryChange, winner: MemoryRecord, content: str, actor: MemoryActor, where: str
    ) -> str:
        """Record the loser's content as a version, then put the winner's back on top."""
        store_id = change.store_id
        new_sha = _sha(content)
        recorded = await self._recorded(store_id, winner.id, actor, new_sha)
        if recorded is None:
            full = await self._store.get_memory(store_id, winner.id, with_content=True)
            winner_content = full.content or ""
            try:
                ours = await self._store.update_memory(
                    store_id,
                    winner.id,
                    self._write(actor),
                    content=content,
                    expected_sha256=full.content_sha256,
                )
                recorded = ours.version_id
                await self._store.update_memory(
                    store_id, winner.id, self._write(actor), content=winner_content, expected_sha256=new_sha
                )
            except MemoryPreconditionFailed:
                pass  # a third writer: theirs stands; ours is recorded if the first write went in
        return (
            f"Memory conflict: {where} was changed by another writer while this tool call changed it. "
            f"Your content is recorded as memory version {recorded or '(not recorded)'}; the other "
            "writer's content stays current and is what the file holds now. Read it and apply your "
            "change again if it is still needed."
        )

    async def _recorded(self, store_id: str, memory_id: str, actor: MemoryActor, sha: str) -> str | None:
        versions = await self._store.list_memory_versions(
            store_id, MemoryVersionFilter(memory_id=memory_id, actor=actor), limit=_RECENT_VERSIONS
        )
        return next((v.id for v in versions if v.content_sha256 == sha), None)

    async def _find(self, store_id: str, path: str) -> MemoryRecord | None:
        found = await self._store.list_memories(store_id, path_from=path, limit=1)
        return found[0] if found and found[0].path == path else None

    async def _manifest(self, mounts: Sequence[Mapping[str, Any]]) -> bytes:
        digest = hashlib.sha256()
        for mount in mounts:
            store_id = str(mount["memory_store_id"])
            try:
                records = await self._store.list_memories(store_id, limit=self._max + 1)
            except NotFound:
                records = []
            digest.update(f"{store_id}\0".encode())
            for record in records:
                digest.update(f"{record.path}\0{record.content_sha256}\0".encode())
        return digest.digest()

    def _write(self, actor: MemoryActor) -> MemoryWrite:
        return MemoryWrite(_id("memver_"), actor, self._clock())


def _id(prefix: str) -> str:
    return prefix + secrets.token_hex(12)


def contents_reader(
    store: Memories, *, max_memories: int = MAX_MEMORIES_PER_STORE
) -> Callable[[str, tuple[MemoryMount, ...]], Awaitable[tuple[MemorySnapshot, ...]]]:
    """The gateway's ``memory_contents``: each mounted store's memories, content included."""

    async def read(session_id: str, mounts: tuple[MemoryMount, ...]) -> tuple[MemorySnapshot, ...]:
        snapshots: list[MemorySnapshot] = []
        for mount in mounts:
            try:
                records = await store.list_memories(mount.store_id, limit=max_memories + 1, with_content=True)
            except NotFound:
                records = []
            files = tuple(MemoryFile(r.path, r.content or "") for r in records)
            snapshots.append(MemorySnapshot(mount.store_id, files))
        return tuple(snapshots)

    return read
