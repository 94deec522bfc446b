"""A Streamable-HTTP MCP server for the hub's integration tests, run inside the test process.

Built with the official SDK (``MCPServer``) and served by uvicorn on 127.0.0.1, port 0 (the bound
port is read back; :meth:`HttpMcpServer.restart` binds the same port again). Every request must
carry ``Authorization: Bearer <token>``; anything else is answered 401, before the MCP app.

Tools: ``mul(a, b)``, ``greet(name)`` and ``requests_seen()`` (how many MCP requests this server
instance has authorised).
"""

from __future__ import annotations

import asyncio
import hmac
import socket
from pathlib import Path
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["HttpMcpServer"]


class _BearerGuard:
    """ASGI middleware: 401 unless the request carries the expected bearer token."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self._app = app
        self._expected = f"Bearer {token}".encode()
        self.authorised = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"text/plain"), (b"www-authenticate", b"Bearer")],
                    }
                )
                await send({"type": "http.response.body", "body": b"missing or wrong bearer token"})
                return
            self.authorised += 1
        await self._app(scope, receive, send)


def _build_app(token: str) -> _BearerGuard:
    server = MCPServer("outpost-test-http", log_level="WARNING")
    guard: _BearerGuard

    @server.tool(description="Multiply two integers.")
    def mul(a: int, b: int) -> int:
        return a * b

    @server.tool(description="Greet someone.")
    def greet(name: str) -> str:
        return f"hello, {name}"

    @server.tool(description="How many MCP requests this server instance has authorised.")
    def requests_seen() -> int:
        return guard.authorised

    guard = _BearerGuard(server.streamable_http_app(), token)
    return guard


class HttpMcpServer:
    """Start, stop and restart the server on one loopback port; ``tls=(cert, key)`` serves https."""

    def __init__(self, token: str, tls: tuple[Path, Path] | None = None) -> None:
        self._token = token
        self._tls = tls
        self.port = 0
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[Any] | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self._tls else "http"
        return f"{scheme}://127.0.0.1:{self.port}/mcp"

    async def start(self) -> None:
        # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted sockets only when the
        # listening socket says so (proto 0 leaves Nagle on: a 40 ms stall per keep-alive request).
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        tls: dict[str, Any] = {}
        if self._tls is not None:
            tls = {"ssl_certfile": str(self._tls[0]), "ssl_keyfile": str(self._tls[1])}
        config = uvicorn.Config(_build_app(self._token), log_level="warning", lifespan="on", **tls)
        self._server = uvicorn.Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while not self._server.started:
            if self._task.done():
                self._task.result()
            if loop.time() > deadline:
                raise TimeoutError("the test HTTP MCP server did not start")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        server, task = self._server, self._task
        self._server = self._task = None
        if server is not None and task is not None:
            server.should_exit = True
            await task

    async def restart(self) -> None:
        await self.stop()
        await self.start()
