"""Memory stores, their memories and the memories' versions: the rules, whoever asks (the HTTP
API today; a session's sandbox later, with a ``session_actor``).

A memory store is a resource of kind ``memory_store`` (name, description, metadata; archived
for good). Its memories and their versions are the store's :class:`Memories` role, which makes
every write atomic with its checks: a ``content_sha256`` precondition that no longer holds is
:class:`~control_plane.errors.MemoryPreconditionFailed`, a path another memory holds is
:class:`~control_plane.errors.MemoryPathConflict`. Every write appends a version naming its
author (:class:`MemoryActor`); redaction clears a version's content and path, never the record.
An archived store refuses new memories and changes to them and to itself, and still serves
reads, deletes of memories, redactions and its own deletion, which takes every memory and
version with it. The limits are :mod:`control_plane.memory.limits`.

Lists: memory stores newest first (the store's cursors); memories in path order (code points,
so byte order of UTF-8), a ``depth`` rolling deeper ones up into prefixes; versions newest first.
The memory and version cursors are the service's: URL-safe base64 of a small JSON object.
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from control_plane.errors import Conflict, InvalidRequest, VersionConflict
from control_plane.memory.commands import (
    CreateMemory,
    CreateMemoryStore,
    MemoryPage,
    MemoryPrefix,
    MemoryQuery,
    MemoryStoreQuery,
    MemoryVersionPage,
    MemoryVersionQuery,
    UpdateMemory,
    UpdateMemoryStore,
)
from control_plane.memory.limits import (
    MAX_MEMORIES_PER_STORE,
    MAX_STORE_DESCRIPTION,
    MAX_STORE_NAME,
    check_content,
    check_path,
    check_path_prefix,
    check_sha256,
)
from control_plane.metadata import apply_metadata_patch, check_metadata
from control_plane.patch import Keep
from control_plane.store.base import (
    MEMORY_STORE_KIND,
    Memories,
    MemoryActor,
    MemoryRecord,
    MemoryVersionFilter,
    MemoryVersionRecord,
    MemoryWrite,
    Page,
    Resource,
    Resources,
)

__all__ = ["MAX_FULL_PAGE", "MAX_PAGE", "MemoryService", "MemoryStoreRoles"]

MAX_PAGE = 100
MAX_FULL_PAGE = 20  # view=full caps a page at 20 items
_UPDATE_ATTEMPTS = 5
_OPERATIONS = frozenset({"created", "modified", "deleted"})


class MemoryStoreRoles(Resources, Memories, Protocol):
    """The store roles the service uses."""


def _new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(12)


def _check_name(name: str) -> str:
    if not 1 <= len(name) <= MAX_STORE_NAME:
        raise InvalidRequest(f"name must be 1-{MAX_STORE_NAME} characters", param="name")
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in name):
        raise InvalidRequest("name: control characters are not allowed", param="name")
    return name


def _check_description(description: str) -> str:
    if len(description) > MAX_STORE_DESCRIPTION:
        raise InvalidRequest(
            f"description must be at most {MAX_STORE_DESCRIPTION} characters", param="description"
        )
    return description


def _page_limit(limit: int, full: bool) -> int:
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidRequest(f"limit must be between 1 and {MAX_PAGE}", param="limit")
    return min(limit, MAX_FULL_PAGE) if full else limit


def _encode(obj: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj, separators=(",", ":")).encode()).decode().rstrip("=")


def _decode(cursor: str, key: str, kind: type) -> Any:
    try:
        obj = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        obj = None
    value = obj.get(key) if isinstance(obj, dict) else None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise InvalidRequest("page: invalid page cursor", param="page")
    return value


def _rollup(path: str, prefix: str, depth: int) -> str | None:
    """The prefix a ``depth`` listing shows for ``path`` (``None``: the memory itself)."""
    if depth == 0:
        return None
    segments = path[len(prefix) :].split("/")
    if len(segments) <= depth:
        return None
    return prefix + "/".join(segments[:depth]) + "/"


class MemoryService:
    """``max_memories``: the most memories one store holds (the hosted product's 2,000)."""

    def __init__(
        self,
        store: MemoryStoreRoles,
        clock: Callable[[], datetime],
        *,
        max_memories: int = MAX_MEMORIES_PER_STORE,
    ) -> None:
        self._store = store
        self._clock = clock
        self._max_memories = max_memories

    # -- memory stores -------------------------------------------------------------------------

    async def create_store(self, command: CreateMemoryStore, *, store_id: str | None = None) -> Resource:
        """``store_id``: a caller-chosen id (a dream's output store, derived from the dream's id,
        so that two attempts make one store: the second gets ``Conflict``); default: a new one."""
        body = {
            "name": _check_name(command.name),
            "description": _check_description(command.description),
            "metadata": check_metadata(dict(command.metadata)),
        }
        new_id = store_id or _new_id("memstore_")
        return await self._store.create_resource(MEMORY_STORE_KIND, new_id, body, self._clock())

    async def get_store(self, store_id: str) -> Resource:
        return await self._store.get_resource(MEMORY_STORE_KIND, store_id)

    async def list_stores(self, query: MemoryStoreQuery) -> Page:
        return await self._store.list_resources(
            MEMORY_STORE_KIND,
            created_after=query.created_after,
            created_before=query.created_before,
            include_archived=query.include_archived,
            limit=query.limit,
            cursor=query.cursor,
        )

    async def update_store(self, store_id: str, command: UpdateMemoryStore) -> Resource:
        for _ in range(_UPDATE_ATTEMPTS):
            current = await self.get_store(store_id)
            if current.archived_at is not None:
                raise InvalidRequest(f"memory store {store_id!r} is archived and cannot be updated")
            new = _updated_body(current.body, command)
            if new == current.body:
                return current
            try:
                return await self._store.update_resource(
                    MEMORY_STORE_KIND, store_id, new, self._clock(), expected_version=current.version
                )
            except VersionConflict:
                continue  # someone else updated it meanwhile: apply ours on top of theirs
        raise Conflict(f"memory store {store_id!r} kept changing during the update; retry")

    async def archive_store(self, store_id: str) -> Resource:
        return await self._store.archive_resource(MEMORY_STORE_KIND, store_id, self._clock())

    async def delete_store(self, store_id: str) -> None:
        """The store, its memories and every version."""
        await self._store.delete_resource(MEMORY_STORE_KIND, store_id)

    # -- memories ------------------------------------------------------------------------------

    def _write(self, actor: MemoryActor | None) -> MemoryWrite:
        return MemoryWrite(_new_id("memver_"), actor, self._clock())

    async def create_memory(
        self, store_id: str, command: CreateMemory, actor: MemoryActor | None
    ) -> MemoryRecord:
        path, content = check_path(command.path), check_content(command.content)
        return await self._store.create_memory(
            store_id, _new_id("mem_"), path, content, self._write(actor), max_memories=self._max_memories
        )

    async def get_memory(self, store_id: str, memory_id: str, *, full: bool = True) -> MemoryRecord:
        return await self._store.get_memory(store_id, memory_id, with_content=full)

    async def memory_at(self, store_id: str, path: str, *, full: bool = True) -> MemoryRecord | None:
        """The memory at exactly ``path`` (after :func:`check_path`), ``None`` if none is there."""
        path = check_path(path)
        found = await self._store.list_memories(store_id, path_from=path, limit=1, with_content=full)
        return found[0] if found and found[0].path == path else None

    async def update_memory(
        self, store_id: str, memory_id: str, command: UpdateMemory, actor: MemoryActor | None
    ) -> MemoryRecord:
        return await self._store.update_memory(
            store_id,
            memory_id,
            self._write(actor),
            content=None if command.content is None else check_content(command.content),
            path=None if command.path is None else check_path(command.path),
            expected_sha256=_expected(command.expected_sha256, "precondition.content_sha256"),
        )

    async def delete_memory(
        self, store_id: str, memory_id: str, expected_sha256: str | None, actor: MemoryActor | None
    ) -> None:
        expected = _expected(expected_sha256, "expected_content_sha256")
        await self._store.delete_memory(store_id, memory_id, self._write(actor), expected_sha256=expected)

    async def list_memories(self, store_id: str, query: MemoryQuery) -> MemoryPage:
        """A page of memories and prefixes. Each item starts at a path (a memory at its own, a
        prefix at itself, before every path under it); the cursor is the next item's start."""
        prefix = check_path_prefix(query.path_prefix)
        if query.depth < 0:
            raise InvalidRequest("depth must be 0 or more", param="depth")
        limit = _page_limit(query.limit, query.full)
        start = None if query.cursor is None else _decode(query.cursor, "p", str)
        items: list[tuple[str, MemoryRecord | MemoryPrefix]] = []
        while len(items) <= limit:
            batch = await self._store.list_memories(
                store_id, path_prefix=prefix, path_from=start, limit=limit + 1, with_content=query.full
            )
            for memory in batch:
                rolled = _rollup(memory.path, prefix, query.depth)
                if rolled is None:
                    items.append((memory.path, memory))
                    start = memory.path + "\x01"  # the next path: no path holds a control character
                else:
                    items.append((rolled, MemoryPrefix(rolled)))
                    start = rolled[:-1] + "0"  # past every path under the prefix
                    break  # the rest of the batch may be under it: read on from there
                if len(items) > limit:
                    break
            else:
                if len(batch) <= limit:
                    break  # the end of the listing
        next_cursor = _encode({"p": items[limit][0]}) if len(items) > limit else None
        return MemoryPage([item for _, item in items[:limit]], next_cursor)

    # -- versions ------------------------------------------------------------------------------

    async def get_version(self, store_id: str, version_id: str, *, full: bool = True) -> MemoryVersionRecord:
        return await self._store.get_memory_version(store_id, version_id, with_content=full)

    async def list_versions(self, store_id: str, query: MemoryVersionQuery) -> MemoryVersionPage:
        limit = _page_limit(query.limit, query.full)
        if query.operation is not None and query.operation not in _OPERATIONS:
            raise InvalidRequest(f"operation: unknown value {query.operation!r}", param="operation")
        before = None if query.cursor is None else _decode(query.cursor, "s", int)
        actors = [
            *([MemoryActor("api_actor", query.api_key_id)] if query.api_key_id is not None else []),
            *([MemoryActor("session_actor", query.session_id)] if query.session_id is not None else []),
        ]
        if query.service_account_id is not None or len(actors) > 1:
            await self._store.get_resource(MEMORY_STORE_KIND, store_id)  # NotFound still applies
            return MemoryVersionPage([], None)  # no version has two authors, nor a service account
        found = await self._store.list_memory_versions(
            store_id,
            MemoryVersionFilter(
                memory_id=query.memory_id,
                operation=query.operation,
                actor=actors[0] if actors else None,
                created_after=query.created_after,
                created_before=query.created_before,
                before_seq=before,
            ),
            limit=limit + 1,
            with_content=query.full,
        )
        next_cursor = _encode({"s": found[limit - 1].seq}) if len(found) > limit else None
        return MemoryVersionPage(found[:limit], next_cursor)

    async def redact_version(
        self, store_id: str, version_id: str, actor: MemoryActor | None
    ) -> MemoryVersionRecord:
        return await self._store.redact_memory_version(store_id, version_id, actor, self._clock())


def _expected(value: str | None, param: str) -> str | None:
    return None if value is None else check_sha256(value, param)


def _updated_body(current: dict[str, Any], command: UpdateMemoryStore) -> dict[str, Any]:
    new = dict(current)
    if not isinstance(command.name, Keep):
        if command.name is None:
            raise InvalidRequest("name cannot be cleared", param="name")
        new["name"] = _check_name(command.name)
    if not isinstance(command.description, Keep):
        new["description"] = _check_description(command.description or "")
    if not isinstance(command.metadata, Keep) and command.metadata is not None:
        new["metadata"] = apply_metadata_patch(current.get("metadata", {}), dict(command.metadata))
    return new
