"""``EdgePresence``: tells the other control-plane processes on the store which edges' tunnels this
process holds, so that a session's brain can follow its hands.

The record of each edge connected here (``Store.hold_edges``) carries an expiry and is refreshed
every ``refresh_s`` and at once when an edge connects or disconnects (``EdgeRegistry.generation``);
an edge that left is released. A process that dies leaves records that expire after ``ttl_s``, so a
reader never trusts a dead process for long. Writes are batched: one per change or refresh, not one
per edge. A store failure is logged and retried at the next tick; the tunnels are not affected.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Protocol

from control_plane.tunnel.registry import EdgeRegistry

__all__ = ["EdgePresence", "PresenceStore"]

log = logging.getLogger(__name__)


class PresenceStore(Protocol):
    """The part of the store presence writes (``control_plane.store.Store`` fits)."""

    async def hold_edges(self, holder: str, edge_ids: Sequence[str], ttl_s: float, now: datetime) -> None: ...

    async def release_edges(self, holder: str, edge_ids: Sequence[str]) -> None: ...


def _utcnow() -> datetime:
    return datetime.now(UTC)


class EdgePresence:
    def __init__(
        self,
        store: PresenceStore,
        registry: EdgeRegistry,
        holder: str,
        *,
        ttl_s: float = 15.0,
        refresh_s: float = 5.0,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        if not 0 < refresh_s < ttl_s:
            raise ValueError("refresh_s must be positive and below ttl_s")
        self._store = store
        self._registry = registry
        self.holder = holder
        self._ttl_s = ttl_s
        self._refresh_s = refresh_s
        self._clock = clock
        self._held: set[str] = set()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        seen = self._registry.generation
        await self._sync()
        self._task = asyncio.create_task(self._run(seen), name=f"presence-{self.holder}")

    async def close(self) -> None:
        """Stop refreshing and release every edge still recorded here (best effort)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._held:
            try:
                await self._store.release_edges(self.holder, sorted(self._held))
            except Exception as exc:
                log.warning("could not release the presence of %d edges: %s", len(self._held), exc)
            self._held = set()

    async def _run(self, seen: int) -> None:
        while True:  # ``seen`` is read before each sync, so no change slips between them
            await self._registry.wait_changed(seen, self._refresh_s)
            seen = self._registry.generation
            await self._sync()

    async def _sync(self) -> None:
        live = {c.edge_id for c in self._registry.all_connections() if c.is_open}
        gone = self._held - live
        try:
            if live:
                await self._store.hold_edges(self.holder, sorted(live), self._ttl_s, self._clock())
            if gone:
                await self._store.release_edges(self.holder, sorted(gone))
        except Exception as exc:
            log.warning("could not record which edges this process holds (retrying): %s", exc)
            return
        self._held = live
