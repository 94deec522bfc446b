"""Shared pieces of the Docker egress tests: loopback servers, a fake resolver, the in-sandbox client."""

from __future__ import annotations

import asyncio
import ipaddress
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from edge_agent.egress import EgressMode, EgressSpec
from edge_agent.egress.addresses import IPAddress
from edge_agent.sandbox import SandboxLimits, SandboxManager
from tests.support.sandbox_calls import run_tool

IMAGE = "outpost-sandbox:1"
EDGE_PREFIX = f"test-egr-{uuid.uuid4().hex[:8]}"
LOOPBACK = "127.0.0.1"

ManagerFactory = Callable[..., Awaitable[SandboxManager]]


def limits(mode: EgressMode = EgressMode.NONE, *hosts: str) -> SandboxLimits:
    return SandboxLimits(
        image=IMAGE, cpus=1.0, memory_bytes=256 * 1024 * 1024, pids=128, egress=EgressSpec(mode, hosts)
    )


@dataclass
class HttpServer:
    """Answers every request with its name; records request heads. Listens on host loopback only."""

    name: str
    heads: list[bytes] = field(default_factory=list)
    server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    async def start(self) -> HttpServer:
        self.server = await asyncio.start_server(self._serve, LOOPBACK, 0)
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            self.heads.append(await reader.readuntil(b"\r\n\r\n"))
            body = self.name.encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@dataclass
class Servers:
    allowed: HttpServer
    forbidden: HttpServer
    echo_port: int


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(4096):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def fake_resolver(host: str, port: int) -> Sequence[IPAddress]:
    """Test names only; never the real DNS. Both names point at the host's loopback."""
    table = {"allowed.test": LOOPBACK, "evil.test": LOOPBACK}
    if host not in table:
        raise OSError(f"{host}: unknown to the test resolver")
    return [ipaddress.ip_address(table[host])]


# Runs inside the sandbox (python3 stdlib). Output is one line per call.
NET_PY = r"""
import os, socket, sys, time, urllib.error, urllib.request
from urllib.parse import urlsplit

def get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            print(r.status, r.read().decode())
    except urllib.error.HTTPError as e:
        print(e.code, e.read().decode().strip())

def connect(target):
    proxy = urlsplit(os.environ["HTTPS_PROXY"])
    s = socket.create_connection((proxy.hostname, proxy.port), timeout=10)
    s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)
        if not chunk:
            break
        head += chunk
    status = head.split(b"\r\n")[0].decode()
    if " 200 " not in status:
        print(status, s.recv(1000).decode().strip())
        return
    s.sendall(b"ping-through-tunnel")
    got = b""
    while len(got) < 19:
        chunk = s.recv(100)
        if not chunk:
            break
        got += chunk
    print(status, got.decode())

def direct(host, port):
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
        print("open")
    except OSError as e:
        print("closed", type(e).__name__)

def serve(port, seconds):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", int(port)))
    s.listen()
    s.settimeout(float(seconds))
    try:
        while True:
            s.accept()[0].close()
    except OSError:
        pass

{"get": get, "connect": connect, "direct": direct, "serve": serve}[sys.argv[1]](*sys.argv[2:])
"""


class Shell:
    """Runs commands in one session's sandbox."""

    def __init__(self, manager: SandboxManager, session_id: str, sandbox_limits: SandboxLimits) -> None:
        self.manager = manager
        self.session_id = session_id
        self.limits = sandbox_limits

    async def run(self, command: str) -> str:
        result = await run_tool(
            self.manager, self.session_id, "bash", {"command": command}, timeout_s=30, limits=self.limits
        )
        assert not result.is_error, result.plain_text
        return result.plain_text.strip()

    async def net(self, *args: object) -> str:
        """Run the in-sandbox client (see NET_PY): get URL | connect HOST:PORT | direct HOST PORT."""
        return await self.run("python3 /workspace/net.py " + " ".join(str(a) for a in args))

    async def install(self) -> None:
        result = await run_tool(
            self.manager,
            self.session_id,
            "write",
            {"file_path": "/workspace/net.py", "content": NET_PY},
            timeout_s=10,
            limits=self.limits,
        )
        assert not result.is_error, result.plain_text
