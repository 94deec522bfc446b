"""``LeaseKeeper``: hold one session's lease while a harness works on it.

``acquire`` takes the lease (free or expired; the store bumps the epoch) and starts renewing it in
the background every ``ttl / 3``. When a renewal says the lease is gone (another harness took it
over after it expired), or renewals keep failing until the lease's own expiry passes, :attr:`lost`
is set: the driver then stops the session's work. Every append carries :attr:`epoch`, so even a
harness that has not noticed yet cannot write (the store raises ``Fenced``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import datetime

from control_plane.store.base import Coordination, Lease

__all__ = ["LeaseKeeper"]

log = logging.getLogger(__name__)


class LeaseKeeper:
    """Acquire, renew in the background, and release the lease of one session."""

    def __init__(
        self,
        store: Coordination,
        session_id: str,
        holder: str,
        ttl_s: float,
        clock: Callable[[], datetime],
    ) -> None:
        self._store = store
        self._session_id = session_id
        self._holder = holder
        self._ttl_s = ttl_s
        self._clock = clock
        self._lease: Lease | None = None
        self._renewer: asyncio.Task[None] | None = None
        self.lost = asyncio.Event()

    @property
    def lease(self) -> Lease | None:
        return self._lease

    @property
    def epoch(self) -> int:
        """The fencing epoch of the held lease."""
        if self._lease is None:
            raise RuntimeError(f"session {self._session_id}: no lease held")
        return self._lease.epoch

    @property
    def held(self) -> bool:
        return self._lease is not None and not self.lost.is_set()

    async def acquire(self) -> bool:
        """Take the lease; ``False`` when another holder has a live one."""
        lease = await self._store.acquire_lease(self._session_id, self._holder, self._ttl_s, self._clock())
        if lease is None:
            return False
        self._lease = lease
        self.lost.clear()
        self._stop_renewing()
        self._renewer = asyncio.create_task(self._renew_loop(), name=f"lease-{self._session_id}")
        log.debug("session %s: lease acquired, epoch %d", self._session_id, lease.epoch)
        return True

    async def release(self) -> None:
        """Stop renewing and give the lease back (if still ours). Idempotent."""
        self._stop_renewing()
        lease, self._lease = self._lease, None
        if lease is not None and not self.lost.is_set():
            try:
                await self._store.release_lease(self._session_id, self._holder, lease.epoch)
            except Exception:
                log.warning("session %s: could not release the lease", self._session_id, exc_info=True)

    def abandon(self) -> None:
        """Stop renewing without releasing: the lease expires on its own (a simulated crash)."""
        self._stop_renewing()
        self._lease = None

    def _stop_renewing(self) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
            self._renewer = None

    async def _renew_loop(self) -> None:
        interval = self._ttl_s / 3
        while True:
            await asyncio.sleep(interval)
            lease = self._lease
            if lease is None:
                return
            try:
                renewed = await self._store.renew_lease(
                    self._session_id, self._holder, lease.epoch, self._ttl_s, self._clock()
                )
            except Exception:
                log.warning("session %s: lease renewal failed", self._session_id, exc_info=True)
                if self._clock() >= lease.expires_at:
                    self._mark_lost("renewals failed until it expired")
                    return
                continue
            if renewed is None:
                self._mark_lost("taken over by another harness")
                return
            self._lease = renewed

    def _mark_lost(self, why: str) -> None:
        log.warning("session %s: lease lost (%s)", self._session_id, why)
        self.lost.set()

    async def aclose(self) -> None:
        """Stop the renewer task and wait for it (for orderly shutdown)."""
        task, self._renewer = self._renewer, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
