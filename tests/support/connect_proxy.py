"""A small HTTP CONNECT-only proxy for tests: Basic auth, and an allow-list of target ports."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from dataclasses import dataclass, field


@dataclass
class ConnectProxy:
    username: str
    password: str
    allowed_ports: set[int]
    port: int = 0
    log: list[tuple[str, int]] = field(default_factory=list)  # (target, status) of each CONNECT
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def __aenter__(self) -> ConnectProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def url(self, password: str | None = None) -> str:
        return f"http://{self.username}:{password or self.password}@127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._handle(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        request_line, *header_lines = head.split("\r\n")
        method, target, _ = request_line.split(" ", 2)
        headers = {}
        for line in header_lines:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        if method != "CONNECT":
            return await self._reply(writer, target, 405, "Method Not Allowed")
        expected = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        if headers.get("proxy-authorization") != f"Basic {expected}":
            return await self._reply(
                writer,
                target,
                407,
                "Proxy Authentication Required",
                'Proxy-Authenticate: Basic realm="t"\r\n',
            )
        host, _, port_text = target.rpartition(":")
        if host.strip("[]") not in ("127.0.0.1", "localhost") or int(port_text) not in self.allowed_ports:
            return await self._reply(writer, target, 403, "Forbidden")
        upstream_reader, upstream_writer = await asyncio.open_connection(host.strip("[]"), int(port_text))
        await self._reply(writer, target, 200, "Connection established", close=False)
        await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))

    async def _reply(
        self,
        writer: asyncio.StreamWriter,
        target: str,
        status: int,
        reason: str,
        extra: str = "",
        *,
        close: bool = True,
    ) -> None:
        self.log.append((target, status))
        length = "" if status == 200 else "Content-Length: 0\r\n"
        writer.write(f"HTTP/1.1 {status} {reason}\r\n{extra}{length}\r\n".encode())
        await writer.drain()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()
