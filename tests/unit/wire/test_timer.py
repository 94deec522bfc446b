"""SessionTimer on a clock the test moves: heartbeats follow the handshake, a silent peer is dropped
at its deadline, and a poke re-arms the timer only when the deadline moved earlier."""

from __future__ import annotations

import asyncio
import dataclasses
import math

import pytest

from outpost_wire import (
    ConnState,
    Event,
    Heartbeat,
    PeerDead,
    Role,
    SessionConfig,
    ToolResult,
    TunnelSession,
    encode_frame,
)
from outpost_wire.timer import SessionTimer

from .pair import HELLO, WELCOME, Pair, frames

# The shipped defaults: the edge's 3 s / 7.5 s, the control plane's 3 s / 9 s.
EDGE = SessionConfig(heartbeat_interval_s=3.0, heartbeat_timeout_s=7.5)
CONTROL = SessionConfig(heartbeat_interval_s=3.0, heartbeat_timeout_s=9.0)
WELCOME_3S = dataclasses.replace(WELCOME, heartbeat_interval_s=3.0)


class FakeClock:
    """Monotonic seconds that move only when the test says so; also the timers' waiter."""

    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[float] = []  # every timeout a timer slept with
        self._moved = asyncio.Event()

    def __call__(self) -> float:
        return self.now

    async def advance(self, seconds: float) -> None:
        self.now += seconds
        self._moved.set()
        self._moved = asyncio.Event()
        await settle()

    async def wait(self, event: asyncio.Event, timeout_s: float) -> None:
        until = self.now + timeout_s
        self.waits.append(timeout_s)
        while not event.is_set() and self.now < until:
            moved = asyncio.ensure_future(self._moved.wait())
            woken = asyncio.ensure_future(event.wait())
            await asyncio.wait({moved, woken}, return_when=asyncio.FIRST_COMPLETED)
            moved.cancel()
            woken.cancel()


async def settle() -> None:
    """Let every task run until it waits again (each wake takes a few loop turns)."""
    for _ in range(50):
        await asyncio.sleep(0)


async def handshake(pair: Pair, *sides: Side) -> None:
    """Connect ``pair`` the way the daemons do: the timers run from the start of the handshake
    (armed on its liveness deadline) and are poked after every frame."""
    pair.edge.connection_made(pair.now)
    pair.control.connection_made(pair.now)
    await settle()
    assert all(side.timer.armed_at < math.inf for side in sides)
    pair.edge.send_hello(HELLO)
    pair.pump()
    pair.control.send_welcome(WELCOME_3S)
    pair.pump()
    for side in sides:
        side.timer.poke()
    await settle()


class Side:
    """One session and its timer, collecting what the timer's ticks produce."""

    def __init__(self, session: TunnelSession, clock: FakeClock) -> None:
        self.session = session
        self.events: list[Event] = []
        self.timer = SessionTimer(session, self._on_tick, clock=clock, waiter=clock.wait)

    def _on_tick(self) -> None:
        self.events += self.session.events_received()


async def test_heartbeats_start_when_the_handshake_ends() -> None:
    """The bug this timer exists for: armed on the handshake's deadline (the liveness timeout), it
    must move to the first heartbeat as soon as the handshake is done."""
    clock = FakeClock()
    pair = Pair(EDGE, CONTROL)
    edge = Side(pair.edge, clock)
    pair.edge.connection_made(0.0)
    pair.edge.send_hello(HELLO)
    pair.edge.data_to_send()
    async with edge.timer:
        await settle()
        assert edge.timer.armed_at == 7.5  # handshaking: only the liveness deadline
        await clock.advance(1.0)
        pair.edge.receive_data(_welcome_frame(), clock.now)
        edge.timer.poke()
        await settle()
        assert edge.timer.armed_at == 3.0  # now OPEN: the first heartbeat is due at 0 + 3 s
        await clock.advance(2.0)
        assert [type(f) for f in frames(pair.edge)] == [Heartbeat]
        assert edge.timer.armed_at == 6.0


async def test_an_idle_pair_on_default_settings_stays_open_for_ten_minutes() -> None:
    clock = FakeClock()
    pair = Pair(EDGE, CONTROL)
    edge, control = Side(pair.edge, clock), Side(pair.control, clock)
    beats = 0
    async with edge.timer, control.timer:
        await handshake(pair, edge, control)
        for _ in range(600):
            await clock.advance(1.0)
            pair.now = clock.now
            sent = pair.edge.data_to_send(), pair.control.data_to_send()
            beats += len(sent[0]) + len(sent[1])
            for data in sent[0]:
                pair.control.receive_data(data, clock.now)
            for data in sent[1]:
                pair.edge.receive_data(data, clock.now)
            edge.timer.poke()
            control.timer.poke()
    assert pair.edge.state is pair.control.state is ConnState.OPEN
    assert edge.events == control.events == []
    assert beats == 2 * 200  # one heartbeat each way every 3 s


async def test_a_silent_peer_is_declared_dead_at_the_timeout() -> None:
    clock = FakeClock()
    pair = Pair(EDGE, CONTROL)
    control = Side(pair.control, clock)
    async with control.timer:
        await handshake(pair, control)
        for _ in range(8):  # the control plane keeps beating; the edge says nothing any more
            await clock.advance(1.0)
            pair.control.data_to_send()
        assert control.events == []
        await clock.advance(1.0)  # t = 9 s: the control plane's heartbeat_timeout_s
        assert control.events == [PeerDead()]
        assert pair.control.state is ConnState.CLOSED
        assert control.timer.armed_at == math.inf


async def test_poke_wakes_the_timer_only_for_an_earlier_deadline() -> None:
    clock = FakeClock()
    pair = Pair(EDGE, CONTROL)
    edge = Side(pair.edge, clock)
    async with edge.timer:
        await handshake(pair, edge)
        assert edge.timer.armed_at == 3.0
        sleeps = len(clock.waits)
        await clock.advance(1.0)
        pair.edge.tick(clock.now)  # the session learns the time; nothing is due yet
        pair.edge.send_result("r1", ToolResult.text("ok"))  # a frame goes out: next beat at 4 s
        pair.edge.data_to_send()
        edge.timer.poke()
        await settle()
        assert len(clock.waits) == sleeps  # a later deadline: the timer sleeps on
        await clock.advance(2.0)  # t = 3 s: it wakes on the old deadline, finds nothing due
        assert frames(pair.edge) == []
        assert edge.timer.armed_at == 4.0
        await clock.advance(1.0)
        assert [type(f) for f in frames(pair.edge)] == [Heartbeat]


async def test_no_timer_while_disconnected_and_close_is_idempotent() -> None:
    clock = FakeClock()
    session = TunnelSession(Role.EDGE, EDGE)
    side = Side(session, clock)
    side.timer.poke()  # before start: nothing to wake
    side.timer.start()
    await settle()
    assert side.timer.armed_at == math.inf
    assert clock.waits == [math.inf]
    session.connection_made(clock.now)
    side.timer.poke()
    await settle()
    assert side.timer.armed_at == 7.5
    await side.timer.close()
    await side.timer.close()
    with pytest.raises(RuntimeError):
        side.timer.start()


async def test_a_failing_owner_does_not_stop_the_timer() -> None:
    clock = FakeClock()
    pair = Pair(EDGE, CONTROL)
    calls = 0

    def on_tick() -> None:
        nonlocal calls
        calls += 1
        raise ValueError("bug in the owner")

    timer = SessionTimer(pair.edge, on_tick, clock=clock, waiter=clock.wait)
    async with timer:
        pair.connect(WELCOME_3S)
        timer.poke()
        for _ in range(2):
            await clock.advance(3.0)
            pair.edge.data_to_send()
    assert calls == 2


async def test_real_clock_default_waiter() -> None:
    """The default waiter on the real clock: a session with short heartbeats beats on its own."""
    # Short heartbeats (50 ms) so the test waits on a real clock for well under a second.
    pair = Pair(SessionConfig(heartbeat_interval_s=0.05, heartbeat_timeout_s=60.0))
    loop = asyncio.get_running_loop()
    pair.now = loop.time()
    sent = asyncio.Event()

    def on_tick() -> None:
        if pair.edge.data_to_send():
            sent.set()

    async with SessionTimer(pair.edge, on_tick) as timer:
        pair.connect()
        timer.poke()
        await asyncio.wait_for(sent.wait(), 30)


def _welcome_frame() -> bytes:
    return encode_frame(WELCOME_3S, EDGE.max_frame_bytes)
