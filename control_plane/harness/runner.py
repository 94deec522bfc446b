"""``Harness``: the control plane's :class:`~control_plane.session_runner.SessionRunner`.

Many sessions per process, one asyncio task per *active* session. ``wake(session_id)`` means: a
fresh brain takes the session lease, replays the log, and resumes exactly where it stopped. A wake
for a session whose task is running only flags it (coalescing): the task reads the log again before
it goes idle. A task whose lease is held by another harness retries until that lease is released
or expires, so input is never left unread.

When a session has nothing to do its task releases the lease and ends. On :meth:`Harness.start`
the harness wakes every session whose status is ``running`` / ``rescheduling`` and every expired
lease (sessions of a harness that died), and keeps sweeping every ``lease_scan_interval_s`` for
expired leases and for resumable sessions whose lease is free (released by a harness that stopped).

Placement (``placement``, used when ``config.follow_tunnels``): a harness takes a session's lease
only if ``placement(session_id, environment_id)`` says this process may run it (it holds the tunnel
of the edge with the session's sandbox, or of an edge of the environment); others are left for the
process that does. A held session whose placement has been refused for ``tunnel_lost_release_s`` is
stopped and its lease released, so that the process the edge moved to takes it over on its next
sweep. A process woken for a session it may not run (input sent to whichever process the client
reached) records a wake request in the store; every process's sweep reads them, and the one that
may run the session takes it and clears the request.

Bounded state: the sweep lists sessions by status (an indexed read on SQLite: its cost does not
grow with idle or archived sessions). Nothing this process keeps per session outlives the session's
task, except the "has a sandbox" hint (capped); a session found ended (archived, terminated,
deleted) is forgotten entirely, and its released lease row deleted (``forget_lease``).

Lifecycle: ``async with Harness(...)`` (or ``start`` / ``close``). ``close`` cancels the session
tasks and releases their leases, so another harness can resume them at once; the log makes that
safe at any point. The model client and the MCP backend are the caller's to close.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType

from control_plane.bus import EventBus
from control_plane.errors import NotFound
from control_plane.harness.config import HarnessConfig
from control_plane.harness.driver import DriverContext, SessionDriver, ToolGateway
from control_plane.harness.lease import LeaseKeeper
from control_plane.harness.mcp_calls import McpBackend
from control_plane.harness.memory_writeback import MemoryWriteBack
from control_plane.harness.model import ModelClient
from control_plane.sessions.thread_views import thread_sandbox_key
from control_plane.store.base import Order, Resource, Store

__all__ = ["Harness"]

log = logging.getLogger(__name__)

_AT_REST = frozenset({"session.status_idle", "session.status_terminated"})
_RESUMABLE_STATUSES = ("running", "rescheduling")
_SCAN_PAGE = 100


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass
class _Slot:
    wake: asyncio.Event
    keeper: LeaseKeeper
    task: asyncio.Task[None] | None = None


class Harness:
    """Runs sessions: implements ``wake`` and ``session_ended`` of ``SessionRunner``."""

    def __init__(
        self,
        store: Store,
        gateway: ToolGateway,
        bus: EventBus,
        model: ModelClient,
        config: HarnessConfig | None = None,
        *,
        holder_id: str | None = None,
        clock: Callable[[], datetime] = _utcnow,
        mcp: McpBackend | None = None,
        placement: Callable[[str, str], Awaitable[bool]] | None = None,
        scan_page_size: int = _SCAN_PAGE,
        resend_spec: Callable[[str], None] | None = None,
    ) -> None:
        """``mcp``: how the agents' MCP servers are reached (``control_plane.mcp.McpRouter``);
        without it, MCP servers are reported unavailable and their tools not offered. Like the
        model client, it is the caller's to close. ``scan_page_size``: sessions per store page
        when scanning for work (tests make it small to cover several pages). ``resend_spec``:
        the gateway's, to re-send a session's memory stores to its sandbox (see
        :mod:`~control_plane.harness.memory_writeback`)."""
        self.config = config or HarnessConfig()
        self.holder_id = holder_id or "harness_" + secrets.token_hex(8)
        self._ctx = DriverContext(
            store=store,
            gateway=gateway,
            model=model,
            bus=bus,
            config=self.config,
            clock=clock,
            mcp=mcp,
            memory=MemoryWriteBack(store, clock, resend_spec),
        )
        self._slots: dict[str, _Slot] = {}
        self._placement = placement if self.config.follow_tunnels else None
        self._page = scan_page_size
        self._misplaced_since: dict[str, float] = {}  # session id -> monotonic time
        self._environments: dict[str, str] = {}  # session id -> environment id, for destroy
        self._retries: dict[str, asyncio.TimerHandle] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._closing = False
        self._aborted = False

    async def __aenter__(self) -> Harness:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # -- SessionRunner --------------------------------------------------------------------------
    async def wake(self, session_id: str) -> None:
        """Make sure a task processes the session's log; returns at once."""
        self._ensure_running(session_id)

    async def session_ended(self, session_id: str) -> None:
        """Stop the session's task (its lease is released, then deleted), forget the session,
        then destroy its sandbox."""
        handle = self._retries.pop(session_id, None)
        if handle is not None:
            handle.cancel()
        slot = self._slots.pop(session_id, None)
        if slot is not None and slot.task is not None:
            slot.task.cancel()
            await asyncio.wait({slot.task})
        environment_id = self._environments.pop(session_id, None) or await self._environment_of(session_id)
        await self._forget(session_id)
        if environment_id is None:
            return
        created = await self._ctx.store.get_events(session_id, types=["session.thread_created"])
        keys = [
            session_id,
            *(thread_sandbox_key(session_id, str(e.payload.get("session_thread_id"))) for e in created),
        ]
        for key in keys:  # the session's sandbox, and any of its threads' own (multiagent)
            try:
                await self._ctx.gateway.destroy(key, environment_id)
            except Exception as exc:
                log.warning("session %s: could not destroy sandbox %s: %s", session_id, key, exc)

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Wake the sessions that were running when a harness last stopped, and start sweeping
        for expired leases."""
        await self._scan()
        self._sweeper = asyncio.create_task(self._sweep_loop(), name=f"{self.holder_id}-sweeper")
        log.info("harness %s started", self.holder_id)

    async def close(self, grace_s: float = 0.0) -> None:
        """Stop: give running turns up to ``grace_s`` to reach a resting point, then cancel every
        session task (leases are released, so another harness resumes them at once). Idempotent."""
        self._closing = True
        running = [s.task for s in self._slots.values() if s.task is not None and not s.task.done()]
        if running and grace_s > 0:
            await asyncio.wait(running, timeout=grace_s)
        await self._stop_all()

    async def abort(self) -> None:
        """Stop everything *without* releasing leases, as if the process had died (for fault
        injection in tests): the leases expire and another harness resumes the sessions."""
        self._aborted = self._closing = True
        for slot in self._slots.values():
            slot.keeper.abandon()
        await self._stop_all()

    @property
    def running(self) -> bool:
        """True from :meth:`start` until :meth:`close` or :meth:`abort`, while its sweeper lives."""
        return self._sweeper is not None and not self._sweeper.done() and not self._closing

    def active_sessions(self) -> set[str]:
        """Sessions with a running task in this harness."""
        return {sid for sid, slot in self._slots.items() if slot.task is not None and not slot.task.done()}

    async def _stop_all(self) -> None:
        for handle in self._retries.values():
            handle.cancel()
        self._retries.clear()
        tasks: set[asyncio.Task[None]] = set(self._ctx.background)
        if self._sweeper is not None:
            tasks.add(self._sweeper)
            self._sweeper = None
        for slot in self._slots.values():
            if slot.task is not None:
                tasks.add(slot.task)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        self._slots.clear()

    # -- sessions -------------------------------------------------------------------------------
    def _ensure_running(self, session_id: str) -> None:
        if self._closing:
            return
        slot = self._slots.get(session_id)
        if slot is not None and slot.task is not None and not slot.task.done():
            slot.wake.set()
            return
        keeper = LeaseKeeper(
            self._ctx.store, session_id, self.holder_id, self.config.lease_ttl_s, self._ctx.clock
        )
        slot = _Slot(wake=asyncio.Event(), keeper=keeper)
        slot.task = asyncio.create_task(self._session_main(session_id, slot), name=f"session-{session_id}")
        self._slots[session_id] = slot

    async def _session_main(self, session_id: str, slot: _Slot) -> None:
        failed = False
        try:
            while True:
                slot.wake.clear()
                if self._closing:
                    return
                if self._placement is not None:
                    session = await self._read_session(session_id)
                    if session is not None and not await self._placed_here(session):
                        # Another process holds the hands' tunnel: leave the session to it, and
                        # make sure it hears of this wake (its sweep reads the requests).
                        log.debug("session %s: its edge's tunnel is elsewhere; left", session_id)
                        await self._ctx.store.request_wake(session_id, self._ctx.clock())
                        return
                    acquired = await slot.keeper.acquire()
                    if acquired:
                        await self._ctx.store.clear_wake(session_id)
                else:
                    # Read the session while the lease is being taken: one round trip fewer
                    # before the first model request (the read needs no lease; appends are fenced).
                    acquired, session = await asyncio.gather(
                        slot.keeper.acquire(), self._read_session(session_id)
                    )
                if not acquired:
                    await asyncio.sleep(self.config.lease_busy_retry_s)
                    continue
                driver = SessionDriver(self._ctx, session_id, slot.keeper, slot.wake, session=session)
                try:
                    await driver.run()
                finally:
                    if driver.environment_id is not None:
                        self._environments[session_id] = driver.environment_id
                    if not self._aborted:
                        await slot.keeper.release()
                if driver.ended:
                    await self._forget(session_id)
                    return
                if not slot.wake.is_set():
                    return
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception(
                "session %s: harness error; waking it again in %g s", session_id, self.config.error_retry_s
            )
            failed = True
        finally:
            if self._slots.get(session_id) is slot:
                del self._slots[session_id]
                # Only a running session needs these; the next wake learns them again (the driver
                # has the gateway re-read the session's durable placement when it starts anyway).
                self._environments.pop(session_id, None)
                self._misplaced_since.pop(session_id, None)
                self._ctx.gateway.forget_session(session_id)
            if failed and not self._closing:
                loop = asyncio.get_running_loop()
                self._retries[session_id] = loop.call_later(
                    self.config.error_retry_s, self._retry_wake, session_id
                )

    async def _forget(self, session_id: str) -> None:
        """The session has ended (archived, terminated, deleted): drop what this process knows of
        it, and its lease row once released (the store keeps no lease per session ever run)."""
        self._ctx.provisioned.discard(session_id)
        self._ctx.edge_outages.discard(session_id)
        self._misplaced_since.pop(session_id, None)
        try:
            await self._ctx.store.forget_lease(session_id)
        except Exception as exc:
            log.warning("session %s: could not delete its released lease: %s", session_id, exc)

    async def _placed_here(self, session: Resource) -> bool:
        env = session.body.get("environment_id")
        if self._placement is None or not isinstance(env, str) or not env:
            return True
        return await self._placement(session.id, env)

    async def _release_misplaced(self) -> None:
        """Stop the sessions placement has refused for ``tunnel_lost_release_s`` (their leases are
        released: another process takes them)."""
        if self._placement is None:
            return
        now = time.monotonic()
        for session_id in list(self.active_sessions()):
            env = self._environments.get(session_id) or await self._environment_of(session_id)
            if env is None or await self._placement(session_id, env):
                self._misplaced_since.pop(session_id, None)
                continue
            since = self._misplaced_since.setdefault(session_id, now)
            if now - since < self.config.tunnel_lost_release_s:
                continue
            slot = self._slots.get(session_id)
            if slot is None or slot.task is None:
                continue
            log.info("session %s: no tunnel to its environment here any more; releasing it", session_id)
            self._misplaced_since.pop(session_id, None)
            slot.task.cancel()  # the task releases the lease on its way out
            await asyncio.wait({slot.task})

    async def _read_session(self, session_id: str) -> Resource | None:
        try:
            return await self._ctx.store.get_resource("session", session_id)
        except NotFound:
            return None

    def _retry_wake(self, session_id: str) -> None:
        self._retries.pop(session_id, None)
        self._ensure_running(session_id)

    async def _environment_of(self, session_id: str) -> str | None:
        try:
            resource = await self._ctx.store.get_resource("session", session_id)
        except NotFound:
            return None
        env = resource.body.get("environment_id")
        return env if isinstance(env, str) and env else None

    # -- finding work ---------------------------------------------------------------------------
    async def _scan(self) -> None:
        store = self._ctx.store
        for status in _RESUMABLE_STATUSES:
            cursor: str | None = None
            while True:
                page = await store.list_resources(
                    "session", filters={"status": status}, limit=self._page, cursor=cursor
                )
                for resource in page.items:
                    self._ensure_running(resource.id)
                if page.next_cursor is None:
                    break
                cursor = page.next_cursor
        await self._wake_unsettled_idle()
        await self._wake_expired()

    async def _wake_unsettled_idle(self) -> None:
        """Sessions the resource calls idle whose log is not at rest (it does not end with
        ``session.status_idle`` / ``status_terminated``): input the API appended just before the
        process died, or a turn whose first writes raced a crash. One indexed read per session."""
        store = self._ctx.store
        cursor: str | None = None
        while True:
            page = await store.list_resources(
                "session", filters={"status": "idle"}, limit=self._page, cursor=cursor
            )
            for resource in page.items:
                last = await store.get_events(resource.id, limit=1, order=Order.DESC)
                if last and last[0].type not in _AT_REST:
                    self._ensure_running(resource.id)
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def _wake_expired(self) -> None:
        for lease in await self._ctx.store.expired_leases(self._ctx.clock(), limit=self._page):
            self._ensure_running(lease.session_id)

    async def _wake_released(self) -> None:
        """Resumable sessions whose lease is free (a harness released it mid-turn as it shut
        down or moved it away): one listing plus one lease read per session not running here."""
        store = self._ctx.store
        for status in _RESUMABLE_STATUSES:
            cursor: str | None = None
            while True:
                page = await store.list_resources(
                    "session", filters={"status": status}, limit=self._page, cursor=cursor
                )
                for resource in page.items:
                    if resource.id not in self._slots and await store.get_lease(resource.id) is None:
                        self._ensure_running(resource.id)
                if page.next_cursor is None:
                    break
                cursor = page.next_cursor

    async def _wake_requested(self) -> None:
        """Sessions another process was woken for but may not run (``follow_tunnels``): input sent
        to whichever process the client reached. The placed process takes them (and clears the
        request); the others leave them again."""
        if self._placement is None:
            return
        for session_id in await self._ctx.store.wake_requests(limit=self._page):
            if session_id in self._slots:
                continue
            session = await self._read_session(session_id)
            if session is None:
                await self._ctx.store.clear_wake(session_id)  # deleted meanwhile
            elif await self._placed_here(session):
                self._ensure_running(session_id)

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.lease_scan_interval_s)
            try:
                await self._wake_expired()
                await self._wake_released()
                await self._wake_requested()
                await self._release_misplaced()
            except Exception as exc:
                log.warning("harness %s: could not scan for expired leases: %s", self.holder_id, exc)
