"""A Streamable-HTTP MCP server for the control plane's MCP tests, run in the test process.

Built with the ``mcp`` SDK (``MCPServer``), served by uvicorn on 127.0.0.1, port 0 (the bound port
is read back; :meth:`BearerMcpServer.restart` binds the same port again). Every request must carry
``Authorization: Bearer <token>``, else it is answered 401 before it reaches the MCP app.

Tools: ``echo(text)``, ``add(a, b)``, ``boom()`` (raises: an error result), ``sleep(seconds)``
(hangs, for timeouts), ``report()`` (an embedded PDF, :data:`PDF_BYTES`); ``calls`` counts the
tool calls that ran, by tool.

Run as a program (``python mcp_cp_server.py [port]``, the token in ``MCP_CP_TEST_TOKEN``) it serves
until killed and prints ``port <n>`` once listening: a server process that can really crash.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import os
import socket
import sys
from collections import Counter
from typing import Any

import mcp_types
import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["PDF_BYTES", "BearerMcpServer"]

PDF_BYTES = b"%PDF-1.4\n%outpost test\n%%EOF\n"  # a PDF by media type; nothing parses it


class _BearerGuard:
    def __init__(self, app: ASGIApp, token: str) -> None:
        self._app = app
        self._expected = f"Bearer {token}".encode()
        self.seen_authorizations: list[bytes] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope["headers"]).get(b"authorization", b"")
            self.seen_authorizations.append(given)
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
        await self._app(scope, receive, send)


class BearerMcpServer:
    """Start, stop and restart the server on one loopback port."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.port = 0
        self.calls: Counter[str] = Counter()
        self.guard: _BearerGuard | None = None
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[Any] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def _app(self) -> _BearerGuard:
        server = MCPServer("outpost-mcp-cp-test", log_level="WARNING")
        calls = self.calls

        @server.tool(description="Echo the text back.")
        def echo(text: str) -> str:
            calls["echo"] += 1
            return text

        @server.tool(description="Add two integers.")
        def add(a: int, b: int) -> int:
            calls["add"] += 1
            return a + b

        @server.tool(description="Always fails.")
        def boom() -> str:
            calls["boom"] += 1
            raise RuntimeError("boom went the tool")

        @server.tool(description="Sleep, then answer.")
        async def sleep(seconds: float) -> str:
            calls["sleep"] += 1
            await asyncio.sleep(seconds)
            return "slept"

        @server.tool(description="Return a small PDF as an embedded resource.")
        def report() -> mcp_types.EmbeddedResource:
            calls["report"] += 1
            blob = base64.b64encode(PDF_BYTES).decode("ascii")
            contents = mcp_types.BlobResourceContents(
                uri="file:///report.pdf", mime_type="application/pdf", blob=blob
            )
            return mcp_types.EmbeddedResource(type="resource", resource=contents)

        self.guard = _BearerGuard(server.streamable_http_app(json_response=True), self.token)
        return self.guard

    async def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self._app(), log_level="warning", lifespan="on")
        self._server = uvicorn.Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while not self._server.started:
            if self._task.done():
                self._task.result()
            if loop.time() > deadline:
                raise TimeoutError("the test MCP server did not start")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        server, task = self._server, self._task
        self._server = self._task = None
        if server is not None and task is not None:
            server.should_exit = True
            server.force_exit = True
            await task

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    async def __aenter__(self) -> BearerMcpServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()


async def _main(port: int) -> None:
    server = BearerMcpServer(os.environ["MCP_CP_TEST_TOKEN"])
    server.port = port
    await server.start()
    print(f"port {server.port}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(_main(int(sys.argv[1]) if len(sys.argv) > 1 else 0))
