"""Dreams: the rules of the API's side (create, read, list, cancel, archive).

A dream is a resource of kind ``dream``: its request (``inputs``, ``model``, ``instructions``,
``output_behavior``), its state (``status``, ``outputs``, ``session_id``, ``usage``, ``error``,
``ended_at``), the environments of its sessions (``environment_ids``; a key limited to
environments sees a dream only if it sees all of them) and the claim of the process running it
(``claim``: holder and expiry; :mod:`control_plane.dreams.background`). Every change is a
compare-and-set on the resource's version, so a cancel and the runner's own writes never
overwrite each other: ``completed``, ``failed`` and ``canceled`` are final.

An ``update_existing`` dream holds its memory store's *dream lock* (a resource of kind
``dream_store_lock`` whose id is the store's): a second one while the first has not stopped is a
409; a lock whose dream has stopped is taken over by compare-and-set.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Protocol

from control_plane.dreams.commands import CreateDream, DreamPage, DreamQuery
from control_plane.environments.commands import Viewer
from control_plane.errors import Conflict, InvalidRequest, NotFound, PermissionDenied, VersionConflict
from control_plane.store.base import MEMORY_STORE_KIND, Resource, Resources

__all__ = [
    "DREAM_KIND",
    "FINAL_STATUSES",
    "LOCK_KIND",
    "MAX_INSTRUCTIONS",
    "MAX_SESSIONS",
    "STATUSES",
    "DreamService",
    "DreamWaker",
    "NullDreamWaker",
    "dream_usage",
    "zero_usage",
]

DREAM_KIND = "dream"
LOCK_KIND = "dream_store_lock"
MAX_SESSIONS = 100
MAX_INSTRUCTIONS = 4096
MAX_MODEL_ID = 256
MAX_PAGE = 100
STATUSES = ("pending", "running", "completed", "failed", "canceled")
FINAL_STATUSES = frozenset({"completed", "failed", "canceled"})
_ATTEMPTS = 5


class DreamWaker(Protocol):
    """Who runs dreams (the scheduler): told when one was created or canceled, to act at once."""

    def wake(self, dream_id: str) -> None: ...


class NullDreamWaker:
    """An API without a scheduler: dreams wait (``pending``) for a process that runs them."""

    def wake(self, dream_id: str) -> None:
        return None


def zero_usage() -> dict[str, int]:
    return {
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def _check_request(command: CreateDream) -> list[str]:
    ids = list(command.session_ids)
    if not 1 <= len(ids) <= MAX_SESSIONS:
        raise InvalidRequest(f"inputs: give 1 to {MAX_SESSIONS} session ids", param="inputs")
    if len(set(ids)) != len(ids):
        raise InvalidRequest("inputs: session_ids must not repeat", param="inputs")
    if not 1 <= len(command.model_id) <= MAX_MODEL_ID:
        raise InvalidRequest(f"model: the id must be 1-{MAX_MODEL_ID} characters", param="model")
    if command.instructions is not None and not 1 <= len(command.instructions) <= MAX_INSTRUCTIONS:
        raise InvalidRequest(f"instructions must be 1-{MAX_INSTRUCTIONS} characters", param="instructions")
    return sorted(ids)


class DreamService:
    def __init__(
        self,
        store: Resources,
        clock: Callable[[], datetime],
        waker: DreamWaker | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._waker = waker or NullDreamWaker()

    async def create(self, command: CreateDream, viewer: Viewer, *, can_write_stores: bool) -> Resource:
        """``can_write_stores``: the caller may change memory stores (``update_existing`` needs it)."""
        session_ids = _check_request(command)
        environments: list[str] = []
        for session_id in session_ids:
            session = await self._store.get_resource("session", session_id)  # NotFound: a 404
            env = session.body.get("environment_id")
            if not viewer.sees(env):
                raise NotFound("session", session_id)  # as if unknown
            environments.append(str(env))
        memory_store = await self._store.get_resource(MEMORY_STORE_KIND, command.memory_store_id)
        if memory_store.archived_at is not None:
            raise InvalidRequest(f"inputs: memory store {memory_store.id!r} is archived", param="inputs")
        dream_id = "drm_" + secrets.token_hex(12)
        if command.update_existing:
            if not can_write_stores:
                raise PermissionDenied(
                    "output_behavior update_existing writes a memory store: it needs an unscoped "
                    "read_write or admin API key"
                )
            await self._lock_store(memory_store.id, dream_id)
            behavior: dict[str, Any] = {"type": "update_existing", "memory_store_id": memory_store.id}
        else:
            behavior = {"type": "create_new"}
        body = {
            "inputs": [
                {"type": "memory_store", "memory_store_id": memory_store.id},
                {"type": "sessions", "session_ids": session_ids},
            ],
            "model": {"id": command.model_id, "speed": "standard"},
            "instructions": command.instructions,
            "output_behavior": behavior,
            "status": "pending",
            "outputs": [],
            "session_id": None,
            "error": None,
            "usage": zero_usage(),
            "ended_at": None,
            "environment_ids": sorted(set(environments)),
            "environment_id": environments[0],  # the dream's own session runs in the first one's
            "claim": None,
        }
        created = await self._store.create_resource(DREAM_KIND, dream_id, body, self._clock())
        self._waker.wake(dream_id)
        return created

    async def _lock_store(self, store_id: str, dream_id: str) -> None:
        body = {"dream_id": dream_id}
        try:
            await self._store.create_resource(LOCK_KIND, store_id, body, self._clock())
            return
        except Conflict:
            pass
        lock = await self._store.get_resource(LOCK_KIND, store_id)
        holder = lock.body.get("dream_id")
        try:
            other = await self._store.get_resource(DREAM_KIND, str(holder))
            busy = other.body.get("status") not in FINAL_STATUSES
        except NotFound:
            busy = False
        if busy:
            raise Conflict(
                f"dream {holder!r} is writing memory store {store_id!r} (update_existing) and has not "
                "stopped yet; wait for it or cancel it"
            )
        try:
            await self._store.update_resource(
                LOCK_KIND, store_id, body, self._clock(), expected_version=lock.version
            )
        except VersionConflict:
            raise Conflict(f"another update_existing dream took memory store {store_id!r} just now") from None

    async def get(self, dream_id: str, viewer: Viewer) -> Resource:
        """The dream (archived ones too), or ``NotFound`` if the viewer does not see every
        environment of its sessions (the same answer as an unknown id)."""
        dream = await self._store.get_resource(DREAM_KIND, dream_id)
        if not all(viewer.sees(env) for env in dream.body.get("environment_ids") or [None]):
            raise NotFound(DREAM_KIND, dream_id)
        return dream

    async def list_dreams(self, query: DreamQuery, viewer: Viewer) -> DreamPage:
        """Newest first; with a status filter or a scoped viewer, store pages are read until the
        page is full."""
        if not 1 <= query.limit <= MAX_PAGE:
            raise InvalidRequest(f"limit must be between 1 and {MAX_PAGE}", param="limit")
        for status in query.statuses:
            if status not in STATUSES:
                raise InvalidRequest(f"statuses[]: unknown value {status!r}", param="statuses")
        wanted = set(query.statuses)
        found: list[Resource] = []
        cursor = query.cursor
        while True:
            page = await self._store.list_resources(
                DREAM_KIND,
                filters={"status": query.statuses[0]} if len(wanted) == 1 else None,
                created_after=query.created_after,
                created_before=query.created_before,
                include_archived=query.include_archived,
                limit=query.limit - len(found),
                cursor=cursor,
            )
            for dream in page.items:
                visible = all(viewer.sees(env) for env in dream.body.get("environment_ids") or [None])
                if visible and (not wanted or dream.body.get("status") in wanted):
                    found.append(dream)
            cursor = page.next_cursor
            if cursor is None or len(found) >= query.limit:
                return DreamPage(found, cursor)

    async def cancel(self, dream_id: str, viewer: Viewer) -> Resource:
        """``canceled`` now (the runner stops before its next write); again: as it is; a
        ``completed`` or ``failed`` dream: 400."""
        for _ in range(_ATTEMPTS):
            dream = await self.get(dream_id, viewer)
            status = dream.body.get("status")
            if status == "canceled":
                return dream
            if status in FINAL_STATUSES:
                raise InvalidRequest(f"dream {dream_id!r} is {status} and cannot be canceled")
            body = {**dream.body, "status": "canceled", "ended_at": self._clock().isoformat()}
            try:
                updated = await self._store.update_resource(
                    DREAM_KIND, dream_id, body, self._clock(), expected_version=dream.version
                )
            except VersionConflict:
                continue  # the runner wrote meanwhile: look again
            self._waker.wake(dream_id)
            return updated
        raise Conflict(f"dream {dream_id!r} kept changing during the cancel; retry")

    async def archive(self, dream_id: str, viewer: Viewer) -> Resource:
        dream = await self.get(dream_id, viewer)
        if dream.body.get("status") not in FINAL_STATUSES:
            raise InvalidRequest(
                f"dream {dream_id!r} is {dream.body.get('status')}: cancel it or wait for it to end "
                "before archiving it"
            )
        if dream.archived_at is not None:
            return dream
        return await self._store.archive_resource(DREAM_KIND, dream_id, self._clock())


def dream_usage(body: Mapping[str, Any]) -> dict[str, int]:
    usage = body.get("usage")
    base = zero_usage()
    if isinstance(usage, Mapping):
        base.update({k: int(usage.get(k) or 0) for k in base})
    return base
