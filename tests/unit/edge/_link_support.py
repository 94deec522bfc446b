"""The edge link's in-memory pieces shared by its unit tests: a connection, a handler, its config."""

from __future__ import annotations

import asyncio

from edge_agent.config import ConnectionConfig
from edge_agent.connection import TransportError
from outpost_wire.frames import PROTOCOL_VERSION, Hello, Outcome, Request
from outpost_wire.results import ToolResult

CONFIG = ConnectionConfig(
    backoff_initial_s=0.01, backoff_max_s=0.02, heartbeat_interval_s=5, heartbeat_timeout_s=10
)


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


class SlowHandler:
    """Answers each request once ``release`` is set; counts the calls."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.calls = 0

    async def handle(self, request: Request) -> Outcome:
        self.calls += 1
        await self.release.wait()
        return ToolResult.text(f"done {request.request_id}")

    def cancel(self, request_id: str) -> bool:
        return False


def hello() -> Hello:
    """The edge's Hello."""
    return Hello("edge_1", "test", PROTOCOL_VERSION, (), "sha256:x", 4, 0)
