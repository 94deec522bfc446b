"""A real webhook receiver for the tests: Starlette under uvicorn on 127.0.0.1 (port 0, TCP_NODELAY).

It records every request (headers and body bytes, exactly as received) and answers with what
``answer`` returns for the request's index (default: 200). ``verified(secret)`` unwraps each
recorded delivery with the official SDK, as a user's receiver would."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anthropic
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support import eventually

__all__ = ["Delivery", "Receiver"]

Answer = Callable[[int, Request], Awaitable[Response]]


async def _ok(index: int, request: Request) -> Response:
    return Response("ok", status_code=200)


@dataclass(frozen=True)
class Delivery:
    headers: dict[str, str]
    body: bytes

    @property
    def webhook_id(self) -> str:
        return self.headers["webhook-id"]


@dataclass
class Receiver:
    answer: Answer = _ok
    deliveries: list[Delivery] = field(default_factory=list)
    port: int = 0
    _server: uvicorn.Server | None = None
    _task: asyncio.Task[Any] | None = None
    _sock: socket.socket | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def _handle(self, request: Request) -> Response:
        index = len(self.deliveries)
        self.deliveries.append(Delivery(dict(request.headers), await request.body()))
        return await self.answer(index, request)

    async def __aenter__(self) -> Receiver:
        # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted sockets only then.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self._sock = sock
        app = Starlette(routes=[Route("/hook", self._handle, methods=["POST"])])
        config = uvicorn.Config(
            app, log_level="warning", lifespan="off", access_log=False, timeout_graceful_shutdown=2
        )
        self._server = uvicorn.Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        server, task = self._server, self._task
        await eventually(lambda: server.started or task.done(), 10.0, "the receiver to start")
        if task.done():
            task.result()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await asyncio.wait_for(self._task, timeout=10)
        if self._sock is not None:
            self._sock.close()

    def verified(self, secret: str) -> list[Any]:
        """Every delivery, unwrapped (signature verified) by the official SDK."""
        client = anthropic.Anthropic(api_key="unused", base_url="http://127.0.0.1:9")
        return [
            client.beta.webhooks.unwrap(d.body.decode(), headers=d.headers, key=secret)
            for d in self.deliveries
        ]

    def types(self) -> list[str]:
        import json

        return [json.loads(d.body)["data"]["type"] for d in self.deliveries]

    async def wait_for(self, count: int, timeout_s: float = 30.0) -> None:
        await eventually(lambda: len(self.deliveries) >= count, timeout_s, f"{count} deliveries")
