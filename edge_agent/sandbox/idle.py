"""Idle pausing: a session's sandbox without calls for ``idle_pause_s`` is frozen (``docker pause``).

The :class:`IdlePauser` is the manager's background loop. It reads the manager's records and takes
the session's lock before pausing, so it never races a call; the next call unpauses the sandbox
(:meth:`~.manager.SandboxManager.execute`). A sandbox that cannot be paused is marked broken: the
next call checks whether it is still alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping

from ..errors import SandboxUnavailable
from .container_runtime import ContainerRuntime
from .session_sandbox import SessionLocks, SessionSandbox

__all__ = ["IdlePauser"]

log = logging.getLogger(__name__)


class IdlePauser:
    """Pauses the sandboxes of ``sandboxes`` (the manager's, by session id) idle for ``idle_pause_s``."""

    def __init__(
        self,
        runtime: ContainerRuntime,
        sandboxes: Mapping[str, SessionSandbox],
        locks: SessionLocks,
        idle_pause_s: float,
    ) -> None:
        self._runtime = runtime
        self._sandboxes = sandboxes
        self._locks = locks
        self._idle_pause_s = idle_pause_s
        self._task: asyncio.Task[None] | None = None

    def start(self, name: str) -> None:
        """Start the loop (a task called ``name``)."""
        self._task = asyncio.create_task(self._loop(), name=name)

    async def close(self) -> None:
        """Stop the loop (idempotent)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        tick_s = max(0.02, min(self._idle_pause_s / 4, 1.0))
        while True:
            await asyncio.sleep(tick_s)
            now = time.monotonic()
            idle = [
                sb
                for sb in self._sandboxes.values()
                if not sb.paused
                and not sb.broken
                and sb.inflight == 0
                and now - sb.last_used >= self._idle_pause_s
                and not self._locks.busy(sb.session_id)
            ]
            if idle:
                results = await asyncio.gather(
                    *(self._pause_if_idle(sb) for sb in idle), return_exceptions=True
                )
                for result in results:
                    if isinstance(result, Exception):
                        log.error("idle pause failed", exc_info=result)

    async def _pause_if_idle(self, sb: SessionSandbox) -> None:
        async with self._locks.hold(sb.session_id):
            if (
                self._sandboxes.get(sb.session_id) is not sb
                or sb.paused
                or sb.broken
                or sb.inflight
                or time.monotonic() - sb.last_used < self._idle_pause_s
            ):
                return
            if sb.channel is not None and sb.channel.closed:
                sb.broken = True
                return
            try:
                await self._runtime.pause(sb.container_id)
            except SandboxUnavailable as exc:
                log.info("sandbox %s of session %s could not be paused: %s", sb.short_id, sb.session_id, exc)
                sb.broken = True
                return
            sb.paused = True
            log.debug(
                "session %s: sandbox %s paused after %.1fs idle",
                sb.session_id,
                sb.short_id,
                self._idle_pause_s,
            )
