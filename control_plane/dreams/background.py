"""``DreamScheduler``: runs dreams in the background, on any number of control-plane processes.

Every ``scan_interval_s`` (and at once when the API says a dream was created or canceled:
:meth:`wake`), each process lists ``pending`` dreams and ``running`` ones, and tries to claim
those it does not run already (up to ``max_concurrent``): a ``pending`` one, or a ``running`` one
whose claim expired (its process died) or was given back (its process stopped). Claims are
compare-and-set on the dream (:class:`~control_plane.dreams.claim.DreamClaim`): one process wins.

A claimed dream runs as a :class:`~control_plane.dreams.job.DreamJob` task beside a watcher
that renews the claim every third of ``claim_ttl_s``; when the dream was canceled, or claimed
by another process after this one stalled, the watcher cancels the task (a model request in
flight is abandoned; the job also checks before every memory write). A job that raises
:class:`~control_plane.errors.DreamFailed` fails the dream with that error; anything unexpected
fails it as ``internal_error``.

Stopping (:meth:`close`) cancels the jobs and gives their claims back, so another process resumes
them at its next scan; a killed process's claims expire after ``claim_ttl_s``. Every step of a
job is safe to run again (:mod:`control_plane.dreams.job`): a resumed dream does not write twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from types import TracebackType

from control_plane.dreams.claim import DreamClaim, DreamStopped, claim_expired
from control_plane.dreams.config import DreamsConfig
from control_plane.dreams.job import DreamJob, DreamStores
from control_plane.dreams.service import DREAM_KIND
from control_plane.errors import DreamFailed
from control_plane.harness.model import ModelClient
from control_plane.memory.service import MemoryService

__all__ = ["DreamScheduler"]

log = logging.getLogger(__name__)

_SCAN_PAGE = 100


def _utcnow() -> datetime:
    return datetime.now(UTC)


class DreamScheduler:
    """Claims and runs dreams; ``wake`` is the API's :class:`~control_plane.dreams.service.DreamWaker`."""

    def __init__(
        self,
        store: DreamStores,
        model: ModelClient,
        config: DreamsConfig,
        *,
        budget_tokens: Callable[[str], int],
        holder_id: str | None = None,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self._store = store
        self._model = model
        self._config = config
        self._budget = budget_tokens
        self.holder_id = holder_id or "dreamer_" + secrets.token_hex(8)
        self._clock = clock
        self._memory = MemoryService(store, clock)
        self._running: dict[str, asyncio.Task[None]] = {}
        self._nudges: dict[str, asyncio.Event] = {}
        self._kick = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._closing = False

    async def __aenter__(self) -> DreamScheduler:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def active(self) -> set[str]:
        """Dreams this process runs now."""
        return {d for d, t in self._running.items() if not t.done()}

    def wake(self, dream_id: str) -> None:
        """A dream was created or canceled: scan now; a running one here checks its status now."""
        nudge = self._nudges.get(dream_id)
        if nudge is not None:
            nudge.set()
        self._kick.set()

    async def start(self) -> None:
        if self._loop_task is None:
            self._loop_task = asyncio.create_task(self._scan_loop(), name=f"{self.holder_id}-scan")

    async def close(self) -> None:
        """Stop scanning, cancel the jobs (their claims given back). Idempotent."""
        self._closing = True
        tasks = [t for t in (self._loop_task, *self._running.values()) if t is not None]
        self._loop_task = None
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    # -- finding work --------------------------------------------------------------------------
    async def _scan_loop(self) -> None:
        while not self._closing:
            try:
                await self.scan()
            except Exception as exc:
                log.warning("dreams: scan failed: %s", exc)
            self._kick.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), self._config.scan_interval_s)

    async def scan(self) -> None:
        """Claim what is free, up to ``max_concurrent`` dreams here."""
        for status in ("pending", "running"):
            cursor: str | None = None
            while True:
                page = await self._store.list_resources(
                    DREAM_KIND, filters={"status": status}, limit=_SCAN_PAGE, cursor=cursor
                )
                for dream in page.items:
                    if len(self.active()) >= self._config.max_concurrent or self._closing:
                        return
                    if dream.id in self.active():
                        continue
                    if status == "running" and not claim_expired(dream.body, self._clock()):
                        continue
                    await self._try(dream.id)
                if page.next_cursor is None:
                    break
                cursor = page.next_cursor

    async def _try(self, dream_id: str) -> None:
        claim = DreamClaim(self._store, dream_id, self.holder_id, self._config.claim_ttl_s, self._clock)
        if not await claim.take():
            return
        log.info("dream %s: claimed by %s", dream_id, self.holder_id)
        self._nudges[dream_id] = asyncio.Event()
        self._running[dream_id] = asyncio.create_task(self._run(claim), name=f"dream-{dream_id}")

    # -- running one ---------------------------------------------------------------------------
    async def _run(self, claim: DreamClaim) -> None:
        dream_id = claim.dream_id
        job = DreamJob(
            self._store,
            self._memory,
            self._model,
            self._config,
            claim,
            budget_tokens=self._budget,
            clock=self._clock,
        )
        work = asyncio.create_task(job.run(), name=f"dream-{dream_id}-job")
        watcher = asyncio.create_task(self._watch(claim, work), name=f"dream-{dream_id}-watch")
        try:
            await asyncio.wait({work})
            await self._settle(claim, job, work)
        except asyncio.CancelledError:
            work.cancel()
            await asyncio.wait({work})
            if self._closing:
                await claim.release()  # another process resumes it now, not after the TTL
            raise
        finally:
            watcher.cancel()
            self._running.pop(dream_id, None)
            self._nudges.pop(dream_id, None)

    async def _settle(self, claim: DreamClaim, job: DreamJob, work: asyncio.Task[None]) -> None:
        dream_id = claim.dream_id
        if work.cancelled():
            log.info("dream %s: stopped (canceled or claimed elsewhere)", dream_id)
            await self._record_stop(claim, job)
            return
        exc = work.exception()
        if exc is None:
            log.info("dream %s: completed", dream_id)
            return
        if isinstance(exc, DreamStopped):
            log.info("dream %s: stopped: %s", dream_id, exc)
            await self._record_stop(claim, job)
            return
        if isinstance(exc, DreamFailed):
            error_type, message = exc.error_type, exc.message
            log.warning("dream %s: failed (%s): %s", dream_id, error_type, message)
        else:
            log.error("dream %s: internal error", dream_id, exc_info=exc)
            error_type, message = (
                "internal_error",
                f"the dream stopped on an internal error: {type(exc).__name__}",
            )
        try:
            await claim.finish("failed", {"type": error_type, "message": message})
        except DreamStopped:
            return  # canceled meanwhile: canceled stays
        if claim.current is not None and claim.current.body.get("session_id"):
            await job.record_failure(error_type, message)

    async def _record_stop(self, claim: DreamClaim, job: DreamJob) -> None:
        dream = await self._store.get_resource(DREAM_KIND, claim.dream_id)
        if dream.body.get("status") == "canceled" and dream.body.get("session_id"):
            await job.record_stop()

    async def _watch(self, claim: DreamClaim, work: asyncio.Task[None]) -> None:
        """Renew the claim; cancel ``work`` when the dream is no longer ours."""
        interval = self._config.claim_ttl_s / 3
        nudge = self._nudges[claim.dream_id]
        expires = self._clock().timestamp() + self._config.claim_ttl_s
        while not work.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(nudge.wait(), interval)
            nudge.clear()
            try:
                await claim.renew()
                expires = self._clock().timestamp() + self._config.claim_ttl_s
            except DreamStopped:
                work.cancel()
                return
            except Exception as exc:  # the store is unreachable: the claim may expire meanwhile
                log.warning("dream %s: could not renew its claim: %s", claim.dream_id, exc)
                if self._clock().timestamp() >= expires:
                    work.cancel()  # another process may take it now
                    return
