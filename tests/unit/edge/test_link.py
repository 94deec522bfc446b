"""The edge link against an in-memory control side: reconnects, redelivery, drain."""

from __future__ import annotations

import asyncio
import random

from edge_agent.config import ConnectionConfig
from edge_agent.connection import Link, LinkState, TransportError
from outpost_wire.events import HelloReceived, ResultReceived
from outpost_wire.frames import PROTOCOL_VERSION, Execute, Hello, Outcome, Request, Welcome
from outpost_wire.results import ToolResult
from outpost_wire.session import Role, SessionConfig, TunnelSession


class Pipe:
    """One connection: frames from the edge go to ``to_control``; ``to_edge`` feeds the edge."""

    def __init__(self) -> None:
        self.to_control: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.to_edge: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.closed = False

    async def send(self, data: bytes) -> None:
        if self.closed:
            raise TransportError("closed")
        await self.to_control.put(data)

    async def receive(self) -> bytes | None:
        return await self.to_edge.get()  # None is the close sentinel, after what was sent

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            await self.to_edge.put(None)
            await self.to_control.put(None)


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


class SlowHandler:
    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.calls = 0

    async def handle(self, request: Request) -> Outcome:
        self.calls += 1
        await self.release.wait()
        return ToolResult.text(f"done {request.request_id}")

    def cancel(self, request_id: str) -> bool:
        return False


def _hello() -> Hello:
    return Hello("edge_1", "test", PROTOCOL_VERSION, (), "sha256:x", 4, 0)


def _request(n: int) -> Request:
    return Request(f"r{n}", "s1", f"k{n}", 0, Execute("bash", '{"command": "true"}'))


CONFIG = ConnectionConfig(
    backoff_initial_s=0.01, backoff_max_s=0.02, heartbeat_interval_s=5, heartbeat_timeout_s=10
)


async def _wait(pred, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout):
        while not pred():
            await asyncio.sleep(0.005)


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
        hello=_hello,
        handler=handler,
        config=CONFIG,
        session_config=SessionConfig(),
        rng=random.Random(1),
    )
    runner = asyncio.create_task(link.run())
    await _wait(lambda: handler.calls == 1)  # the request arrived, then the link dropped
    await _wait(lambda: len(pipes) >= 2 and link.connected.is_set())
    handler.release.set()  # the call finishes while (or after) the link was down
    await _wait(lambda: "r1" in control.results)
    assert control.results["r1"] == ToolResult.text("done r1")
    await _wait(lambda: not link.session.unacked_results())
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

    link = Link(connect=connect, hello=_hello, handler=handler, config=CONFIG, session_config=SessionConfig())
    runner = asyncio.create_task(link.run())
    await _wait(lambda: handler.calls == 1)
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
        connect=connect, hello=_hello, handler=SlowHandler(), config=CONFIG, session_config=SessionConfig()
    )
    runner = asyncio.create_task(link.run())
    await _wait(lambda: attempts >= 4)
    assert link.last_error == "refused"
    await link.drain(0)
    runner.cancel()
