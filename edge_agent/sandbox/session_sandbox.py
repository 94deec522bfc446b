"""The manager's record of one session's sandbox, and the per-session locks that guard it.

Both are owned by :class:`~.manager.SandboxManager`; :class:`~.idle.IdlePauser` reads the records
and takes the same locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from ..egress import EgressSpec
from .channel import DaemonChannel

__all__ = ["ALIVE_STATES", "SessionLocks", "SessionSandbox"]

#: Container states a sandbox can be resumed from (any other is dead: replaced on the next call).
ALIVE_STATES = ("running", "paused")


class SessionSandbox:
    """Mutable state of one session's container, owned by the manager."""

    __slots__ = (
        "address",
        "broken",
        "channel",
        "container_id",
        "egress",
        "image",
        "inflight",
        "last_used",
        "network",
        "paused",
        "session_id",
    )

    def __init__(
        self,
        session_id: str,
        container_id: str,
        image: str,
        *,
        egress: EgressSpec,
        network: str = "",
        address: str = "",
        paused: bool = False,
    ) -> None:
        self.session_id = session_id
        self.container_id = container_id
        self.image = image
        self.egress = egress
        self.network = network  # "" = none
        self.address = address  # on the allowlist network: the proxy knows the sandbox by it
        self.channel: DaemonChannel | None = None
        self.paused = paused
        self.broken = False  # the container may be dead: check it before the next call
        self.inflight = 0
        self.last_used = time.monotonic()

    @property
    def short_id(self) -> str:
        return self.container_id[:12]


class SessionLocks:
    """One asyncio lock per session, forgotten when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[asyncio.Lock, list[int]]] = {}

    def busy(self, key: str) -> bool:
        return key in self._entries

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = (asyncio.Lock(), [0])
        lock, users = entry
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if users[0] == 0:
                del self._entries[key]
