"""The edge link against an in-memory control side: reconnects, redelivery, drain."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence

from edge_agent.config import ConnectionConfig
from edge_agent.connection import Link, LinkState, TransportError
from outpost_wire.errors import ErrorCode
from outpost_wire.frames import PROTOCOL_VERSION, Execute, Outcome, Request, Welcome
from outpost_wire.results import ToolResult
from outpost_wire.session import Role, SessionConfig, TunnelSession
from outpost_wire.tunnel_events import HelloReceived, ResultReceived
from tests.support import eventually
from tests.unit.edge._link_support import CONFIG, Pipe, SlowHandler, hello


class FakeControl:
    """A CONTROL-role session per connection; collects results."""

    def __init__(self) -> None:
        self.results: dict[str, Outcome] = {}
        self.result_count = 0
        self.sessions: list[TunnelSession] = []

    async def serve(
        self, pipe: Pipe, requests: list[Request], drop_after_first_request: bool = False
    ) -> None:
        session = TunnelSession(Role.CONTROL, SessionConfig())
        self.sessions.append(session)
        session.connection_made(0.0)
        while True:
            data = await pipe.to_control.get()
            if data is None:
                return
            session.receive_data(data, 0.0)
            for ev in session.events_received():
                if isinstance(ev, HelloReceived):
                    session.send_welcome(Welcome("cp", "test", PROTOCOL_VERSION, 10.0))
                    for r in requests:
                        session.send_request(r)
                elif isinstance(ev, ResultReceived):
                    self.results[ev.request_id] = ev.outcome
                    self.result_count += 1
            for out in session.data_to_send():
                await pipe.to_edge.put(out)
            if drop_after_first_request and requests:
                await pipe.close()
                return


def _request(n: int) -> Request:
    return Request(f"r{n}", "s1", f"k{n}", 0, Execute("bash", '{"command": "true"}'))


async def test_result_finished_while_disconnected_is_redelivered_after_reconnect() -> None:
    control = FakeControl()
    handler = SlowHandler()
    pipes: list[Pipe] = []
    servers: list[asyncio.Task[None]] = []

    async def connect() -> Pipe:
        pipe = Pipe()
        first = not pipes
        pipes.append(pipe)
        servers.append(
            asyncio.create_task(
                control.serve(pipe, [_request(1)] if first else [], drop_after_first_request=first)
            )
        )
        return pipe

    link = Link(
        connect=connect,
        hello=hello,
        handler=handler,
        config=CONFIG,
        session_config=SessionConfig(),
        rng=random.Random(1),
    )
    runner = asyncio.create_task(link.run())
    await eventually(lambda: handler.calls == 1)  # the request arrived, then the link dropped
    await eventually(lambda: len(pipes) >= 2 and link.connected.is_set())
    handler.release.set()  # the call finishes while (or after) the link was down
    await eventually(lambda: "r1" in control.results)
    assert control.results["r1"] == ToolResult.text("done r1")
    await eventually(lambda: not link.session.unacked_results())
    await link.drain(1.0)
    assert link.state is LinkState.STOPPED
    runner.cancel()
    for s in servers:
        s.cancel()


async def test_drain_waits_for_in_flight_calls() -> None:
    control = FakeControl()
    handler = SlowHandler()
    servers: list[asyncio.Task[None]] = []

    async def connect() -> Pipe:
        pipe = Pipe()
        servers.append(asyncio.create_task(control.serve(pipe, [_request(7)])))
        return pipe

    link = Link(connect=connect, hello=hello, handler=handler, config=CONFIG, session_config=SessionConfig())
    runner = asyncio.create_task(link.run())
    await eventually(lambda: handler.calls == 1)
    drain = asyncio.create_task(link.drain(5.0))
    await asyncio.sleep(0.05)
    assert not drain.done()  # still waiting for the call
    handler.release.set()
    await asyncio.wait_for(drain, 5)
    assert control.results["r7"] == ToolResult.text("done r7")
    runner.cancel()


async def test_connect_failures_back_off_and_retry() -> None:
    attempts = 0

    async def connect() -> Pipe:
        nonlocal attempts
        attempts += 1
        raise TransportError("refused", unauthenticated=attempts == 2)

    link = Link(
        connect=connect, hello=hello, handler=SlowHandler(), config=CONFIG, session_config=SessionConfig()
    )
    runner = asyncio.create_task(link.run())
    await eventually(lambda: attempts >= 4)
    assert link.last_error == "refused"
    await link.drain(0)
    runner.cancel()


# -- a draining control plane -----------------------------------------------------------------------
class DrainingControl:
    """A CONTROL-role session per connection. ``turn_away``: answer the Hello the way a draining
    control plane does (Welcome, Drain, a DRAINING error, end of stream). Otherwise Welcome, then
    ``requests``, then Drain if ``drain``; the connection stays until the edge leaves."""

    def __init__(self, *, turn_away: bool, requests: Sequence[Request] = (), drain: bool = False) -> None:
        self.turn_away = turn_away
        self.requests = list(requests)
        self.drain = drain
        self.results: dict[str, Outcome] = {}
        self.ended = asyncio.Event()  # the edge closed the connection

    async def serve(self, pipe: Pipe) -> None:
        session = TunnelSession(Role.CONTROL, SessionConfig())
        session.connection_made(0.0)
        while True:
            data = await pipe.to_control.get()
            if data is None:
                self.ended.set()
                return
            session.receive_data(data, 0.0)
            for ev in session.events_received():
                if isinstance(ev, HelloReceived):
                    session.send_welcome(Welcome("cp", "test", PROTOCOL_VERSION, 10.0))
                    for r in self.requests:
                        session.send_request(r)
                    if self.turn_away or self.drain:
                        session.send_drain("control plane shutting down", 30_000)
                    if self.turn_away:
                        session.close(ErrorCode.DRAINING, "control plane shutting down")
                elif isinstance(ev, ResultReceived):
                    self.results[ev.request_id] = ev.outcome
            for out in session.data_to_send():
                await pipe.to_edge.put(out)
            if self.turn_away:
                await pipe.close()
                return


SLOW_BACKOFF = ConnectionConfig(
    backoff_initial_s=5.0, backoff_max_s=10.0, heartbeat_interval_s=5, heartbeat_timeout_s=10
)


def _draining_link(
    controls: list[DrainingControl], config: ConnectionConfig, moves: list[bool]
) -> tuple[Link, list[Pipe], list[asyncio.Task[None]]]:
    """A link whose n-th connection is served by ``controls[n]`` (the last one serves the rest);
    its ``on_peer_drain`` pops the answers in ``moves`` (then says no)."""
    pipes: list[Pipe] = []
    servers: list[asyncio.Task[None]] = []

    async def connect() -> Pipe:
        pipe = Pipe()
        control = controls[min(len(pipes), len(controls) - 1)]
        pipes.append(pipe)
        servers.append(asyncio.create_task(control.serve(pipe)))
        return pipe

    def on_peer_drain() -> bool:
        return moves.pop(0) if moves else False

    link = Link(
        connect=connect,
        hello=hello,
        handler=SlowHandler(),
        config=config,
        session_config=SessionConfig(),
        on_peer_drain=on_peer_drain,
    )
    return link, pipes, servers


async def test_turned_away_by_a_draining_control_plane_the_link_moves_on_at_once_without_backoff() -> None:
    healthy = DrainingControl(turn_away=False)
    moves = [True]
    link, pipes, servers = _draining_link([DrainingControl(turn_away=True), healthy], SLOW_BACKOFF, moves)
    runner = asyncio.create_task(link.run())
    await eventually(lambda: len(pipes) == 2 and link.connected.is_set(), 1.0)  # backoff would be ≥ 0
    assert moves == []  # the dialer was asked to move on, once
    assert link._backoff.attempt == 0 and link.last_error is None  # not a failure
    assert link.connections == 2
    await asyncio.sleep(0.1)
    assert len(pipes) == 2 and not pipes[1].closed  # and it stays on the healthy one
    await link.drain(0)
    runner.cancel()
    for s in servers:
        s.cancel()


async def test_with_no_other_address_a_turned_away_link_backs_off_instead_of_looping() -> None:
    config = ConnectionConfig(
        backoff_initial_s=0.05, backoff_max_s=0.2, heartbeat_interval_s=5, heartbeat_timeout_s=10
    )
    link, pipes, servers = _draining_link([DrainingControl(turn_away=True)], config, [])
    runner = asyncio.create_task(link.run())
    await asyncio.sleep(0.5)
    # Full-jitter backoff from 0.05 s capped at 0.2 s: a handful of attempts, not a hot loop.
    assert 2 <= len(pipes) <= 25, len(pipes)
    assert link._backoff.attempt >= len(pipes) - 1
    await link.drain(0)
    runner.cancel()
    for s in servers:
        s.cancel()


async def test_a_drained_link_leaves_only_once_its_call_in_flight_answered_and_was_acked() -> None:
    busy = DrainingControl(turn_away=False, requests=[_request(3)], drain=True)
    link, pipes, servers = _draining_link([busy, DrainingControl(turn_away=False)], SLOW_BACKOFF, [True])
    handler = link._handler
    assert isinstance(handler, SlowHandler)
    runner = asyncio.create_task(link.run())
    await eventually(lambda: handler.calls == 1 and link._peer_draining)
    await asyncio.sleep(0.1)
    assert len(pipes) == 1 and not pipes[0].closed  # the call is still owed to this control plane
    handler.release.set()
    await eventually(lambda: "r3" in busy.results)
    await asyncio.wait_for(busy.ended.wait(), 1.0)  # then the edge left, at once ...
    await eventually(lambda: len(pipes) == 2 and link.connected.is_set(), 1.0)  # ... for the next
    assert busy.results["r3"] == ToolResult.text("done r3")
    assert link._backoff.attempt == 0 and not link.session.unacked_results()
    await link.drain(0)
    runner.cancel()
    for s in servers:
        s.cancel()
