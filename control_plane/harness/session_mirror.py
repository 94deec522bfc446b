"""The session resource's copy of what the log says: its ``status`` and running ``usage``.

The log is the truth (the API reads status and usage from it); the session resource keeps a copy for
operators and for scans by status. :class:`SessionMirror` writes that copy for one driver: a status
change is written when it happens (a move to ``running`` / ``rescheduling`` in the background,
before the append that makes it; a move to ``idle`` / ``terminated`` after), and the usage of a model
request rides on the next status write. Writes are tried against the version this driver last read
or wrote (a conflict re-reads: the API updates the same resource), and stay in order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from control_plane.errors import NotFound, VersionConflict
from control_plane.store.base import Resource, Store

__all__ = ["SessionMirror", "StopWork"]

log = logging.getLogger(__name__)

_RESOURCE_RETRIES = 8


class StopWork(Exception):
    """This harness must stop working on the session (fenced, lease lost, session gone)."""


class SessionMirror:
    """Writes one session resource's ``status`` / ``usage`` (one instance per driver)."""

    def __init__(
        self,
        store: Store,
        session_id: str,
        clock: Callable[[], datetime],
        background: set[asyncio.Task[None]],
    ) -> None:
        self._store, self._sid, self._clock, self._background = store, session_id, clock, background
        self._pending: asyncio.Task[None] | None = None
        #: The session resource as last read or written: an update is tried against its version
        #: first (a conflict re-reads), saving a read per update.
        self.known: Resource | None = None
        #: Usage not yet written to the session resource (written with the next status).
        self.usage_due: Mapping[str, Any] | None = None

    def shows(self, status: str | None) -> bool:
        """Whether the resource as last seen says ``status`` and no usage is due."""
        known = self.known
        return self.usage_due is None and known is not None and known.body.get("status") == status

    def update_soon(self, *, status: str) -> None:
        """Start a resource update without waiting for it; updates stay in order."""
        previous = self._pending

        async def update() -> None:
            if previous is not None:
                await asyncio.gather(previous, return_exceptions=True)
            try:
                await self._write(status=status, usage=None)
            except StopWork as stop:
                log.debug("session %s: status update skipped: %s", self._sid, stop)

        self._pending = task = asyncio.create_task(update(), name=f"status-{self._sid}")
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def update(self, *, status: str | None = None, usage: Mapping[str, Any] | None = None) -> None:
        """Bring the session resource's ``status`` / ``usage`` in line with the log, after any
        update still in flight."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            await asyncio.gather(pending, return_exceptions=True)
        await self._write(status=status, usage=usage)

    async def _write(self, *, status: str | None, usage: Mapping[str, Any] | None) -> None:
        """(The API may update the same resource concurrently: retry on ``VersionConflict``.)
        Usage still due from the last model request is written along."""
        if usage is None:
            usage, self.usage_due = self.usage_due, None
        if status is None and usage is None:
            return
        store = self._store
        known, self.known = self.known, None
        for _ in range(_RESOURCE_RETRIES):
            if known is not None:  # what this driver last saw: its version is checked by the write
                resource, known = known, None
                fresh = False
            else:
                try:
                    resource = await store.get_resource("session", self._sid)
                except NotFound:
                    raise StopWork("the session was deleted") from None
                fresh = True
            body = dict(resource.body)
            if status is not None and body.get("status") != "terminated":
                body["status"] = status
            if usage is not None:
                body["usage"] = dict(usage)  # a cumulative snapshot: replaces the last one
            if body == resource.body:
                if fresh:
                    self.known = resource
                    return
                continue  # nothing to change as last seen: read it to be sure
            try:
                self.known = await store.update_resource(
                    "session", self._sid, body, self._clock(), expected_version=resource.version
                )
                return
            except VersionConflict:
                continue
            except NotFound:
                raise StopWork("the session was deleted") from None
        log.warning("session %s: could not update the session resource (kept conflicting)", self._sid)
