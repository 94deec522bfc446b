"""The one task that gives a sans-I/O tunnel session its sense of time.

A :class:`~outpost_wire.session.TunnelSession` owns no clock: it says when it next needs the time
(``next_timer(now)``) and acts when told (``tick(now)``: a heartbeat out, a silent peer declared
dead). A :class:`SessionTimer` is the task between the two: it sleeps until the session's next
deadline, ticks it, lets its owner handle what came of it (``on_tick``: the session's events and
frames), and sleeps again.

The deadline moves whenever the session sees something, so the owner calls :meth:`SessionTimer.poke`
after every input it feeds the session and after every frame it writes::

    owner (link / edge connection)                  SessionTimer
    ──────────────────────────────                  ────────────
    session.receive_data(...) / frames sent ───────► poke()     deadline may have moved: re-arm
                                                      (sleeps until session.next_timer(now))
    on_tick() ◄────────────────────────────────────── session.tick(now)   when the deadline comes

A poke is cheap and mostly does nothing: a frame received pushes the liveness deadline *later*,
a frame sent pushes the next heartbeat *later*, and a deadline that moved later is found when the
task wakes at the old one (a ``tick`` with nothing due does nothing) and sleeps again. A poke wakes
the task only when the deadline moved *earlier* than the one it sleeps until, as when the handshake
ends and heartbeats start: the session's deadline drops from the handshake's liveness timeout to
the first heartbeat. (A timer that slept on the handshake's deadline and was never re-armed sent no
heartbeat, and both sides declared an idle peer dead at every timeout.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

__all__ = ["Clock", "SessionTimer", "Timed", "Waiter", "wait_event"]

log = logging.getLogger(__name__)

#: Monotonic seconds, the same clock the session is given its ``now`` from.
Clock = Callable[[], float]
#: Wait until ``event`` is set or ``timeout_s`` seconds of the clock have passed (``inf``: no limit).
Waiter = Callable[[asyncio.Event, float], Awaitable[None]]


class Timed(Protocol):
    """What the timer needs of a session (:class:`~outpost_wire.session.TunnelSession` has it)."""

    def next_timer(self, now: float) -> float: ...

    def tick(self, now: float) -> None: ...


async def wait_event(event: asyncio.Event, timeout_s: float) -> None:
    """The real :data:`Waiter`, on the event loop's clock (``time.monotonic``).

    Not ``asyncio.wait_for``: on Python 3.11 it swallows a cancellation that arrives just as the
    event is set, and :meth:`SessionTimer.close` would wait for a task that never ends.
    """
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(None if math.isinf(timeout_s) else timeout_s):
            await event.wait()


class SessionTimer:
    """Tick ``session`` at its deadlines; see the module docstring.

    ``on_tick`` runs after every ``tick``, on the timer's task: it handles the session's events
    (a heartbeat queued, the peer dead) the way the owner handles them after a frame. Use it as an
    async context manager, or :meth:`start` and :meth:`close` (idempotent).
    """

    def __init__(
        self,
        session: Timed,
        on_tick: Callable[[], None],
        *,
        name: str = "session-timer",
        clock: Clock = time.monotonic,
        waiter: Waiter = wait_event,
    ) -> None:
        self._session = session
        self._on_tick = on_tick
        self._name = name
        self._clock = clock
        self._waiter = waiter
        self._wake = asyncio.Event()
        self._armed_at = math.inf  # the deadline the task sleeps until
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def armed_at(self) -> float:
        """The deadline the timer sleeps until now (``inf``: none; the next poke re-arms it)."""
        return self._armed_at

    def poke(self) -> None:
        """The session's deadline may have changed: re-arm if it moved earlier."""
        if self._task is None or self._wake.is_set():
            return
        if self._session.next_timer(self._clock()) < self._armed_at:
            self._wake.set()

    def start(self) -> None:
        if self._closed:
            raise RuntimeError("SessionTimer.start() after close()")
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=self._name)

    async def close(self) -> None:
        """Stop ticking. Idempotent."""
        self._closed = True
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        await asyncio.wait({task})  # unlike `await task`, a cancellation of our caller goes through
        if not task.cancelled() and task.exception() is not None:
            log.error("%s failed: %r", self._name, task.exception())

    async def __aenter__(self) -> SessionTimer:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _run(self) -> None:
        while True:
            self._wake.clear()  # before reading the deadline: a poke from here on is not lost
            now = self._clock()
            deadline = self._session.next_timer(now)
            if deadline <= now:
                self._armed_at = math.inf
                self._session.tick(now)
                try:
                    self._on_tick()
                except Exception:  # a bug in the owner must not stop heartbeats for good
                    log.exception("%s: handling the session's timer events failed", self._name)
                await asyncio.sleep(0)  # never starve the loop, whatever the session says next
                continue
            self._armed_at = deadline
            await self._waiter(self._wake, deadline - now)
