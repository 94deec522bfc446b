"""The egress proxy over real loopback sockets, with a fake resolver (no Docker, no DNS).

The test process is the "sandbox": it connects from 127.0.0.1, which the tests grant an allowlist.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

import pytest

from edge_agent.egress import Allowlist, EgressProxy, ProxyLimits
from edge_agent.egress.addresses import IPAddress

LOOPBACK = "127.0.0.1"


@dataclass
class Upstream:
    """A tiny HTTP server that answers every request with its name and records the heads."""

    name: str
    heads: list[bytes] = field(default_factory=list)
    server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    async def start(self) -> Upstream:
        self.server = await asyncio.start_server(self._serve, LOOPBACK, 0)
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            self.heads.append(await reader.readuntil(b"\r\n\r\n"))
            body = self.name.encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
            )
            await writer.drain()
        finally:
            writer.close()


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(4096):
        writer.write(data)
        await writer.drain()
    writer.close()


class FakeResolver:
    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int) -> Sequence[IPAddress]:
        self.calls.append(host)
        if host not in self.table:
            raise OSError(f"{host}: no such host")
        return [ipaddress.ip_address(a) for a in self.table[host]]


@dataclass
class Rig:
    proxy: EgressProxy
    allowed: Upstream
    forbidden: Upstream
    echo_port: int
    resolver: FakeResolver

    def allow(self, *entries: str, session: str = "sesn_a") -> None:
        self.proxy.grant(LOOPBACK, session, Allowlist.parse(entries))

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(LOOPBACK, self.proxy.port)

    async def send(self, raw: bytes) -> tuple[int, bytes, bytes]:
        """Send one request; return (status, head, body) after the proxy closes."""
        reader, writer = await self.connect()
        writer.write(raw)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        head, _, body = data.partition(b"\r\n\r\n")
        return int(head.split(b" ")[1]), head, body

    async def get(self, url: str) -> tuple[int, bytes]:
        status, _, body = await self.send(f"GET {url} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        return status, body


async def make_rig(limits: ProxyLimits | None = None) -> AsyncIterator[Rig]:
    allowed, forbidden = await Upstream("allowed").start(), await Upstream("forbidden").start()
    echo_server = await asyncio.start_server(echo, LOOPBACK, 0)
    resolver = FakeResolver(
        {"allowed.test": [LOOPBACK], "evil.test": [LOOPBACK], "meta.test": ["169.254.169.254"]}
    )
    proxy = EgressProxy(LOOPBACK, 0, limits=limits, resolver=resolver)
    await proxy.start()
    try:
        yield Rig(proxy, allowed, forbidden, int(echo_server.sockets[0].getsockname()[1]), resolver)
    finally:
        await proxy.close()
        for server in (allowed.server, forbidden.server, echo_server):
            assert server is not None
            server.close()


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    async for r in make_rig():
        yield r


async def test_plain_http_is_forwarded_in_origin_form(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="edge_agent.egress")
    rig.allow(f"{LOOPBACK}:{rig.allowed.port}")
    status, _, body = await rig.send(
        f"GET http://{LOOPBACK}:{rig.allowed.port}/p?q=1 HTTP/1.1\r\nHost: evil.test\r\n"
        "Proxy-Authorization: Bearer secret-token\r\nX-Keep: yes\r\n\r\n".encode()
    )
    assert (status, body) == (200, b"allowed")
    (seen,) = rig.allowed.heads
    assert seen.startswith(b"GET /p?q=1 HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % rig.allowed.port)
    assert b"X-Keep: yes" in seen and b"secret-token" not in seen and b"evil.test" not in seen
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "sesn_a" in logged and "allowed" in logged
    assert "secret-token" not in logged and "X-Keep" not in logged


async def test_forbidden_port_and_host_are_refused_naming_the_rule(rig: Rig) -> None:
    rig.allow(f"{LOOPBACK}:{rig.allowed.port}", "allowed.test")
    status, body = await rig.get(f"http://{LOOPBACK}:{rig.forbidden.port}/")
    assert status == 403 and body.startswith(b"egress.allowlist: ")
    status, body = await rig.get("http://other.test/")
    assert status == 403 and b"egress.allowlist" in body
    assert rig.forbidden.heads == [] and rig.resolver.calls == []  # refused before any lookup


async def test_names_resolving_to_loopback_need_the_explicit_ip(rig: Rig) -> None:
    rig.allow(f"{LOOPBACK}:{rig.allowed.port}", "allowed.test", "evil.test", "meta.test")
    assert await rig.get(f"http://allowed.test:{rig.allowed.port}/") == (200, b"allowed")
    status, body = await rig.get(f"http://evil.test:{rig.forbidden.port}/")
    assert status == 403 and body.startswith(b"egress.resolved_address: evil.test resolves to 127.0.0.1")
    status, body = await rig.get("http://meta.test/latest/meta-data/")
    assert status == 403 and b"metadata endpoint" in body
    assert rig.forbidden.heads == []
    assert rig.resolver.calls == ["allowed.test", "evil.test", "meta.test"]  # once each: no re-resolution


async def test_connect_tunnels_bytes_both_ways(rig: Rig) -> None:
    rig.allow(f"{LOOPBACK}:{rig.echo_port}")
    reader, writer = await rig.connect()
    writer.write(f"CONNECT {LOOPBACK}:{rig.echo_port} HTTP/1.1\r\nHost: x\r\n\r\nearly".encode())
    assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 200 Connection established\r\n\r\n"
    assert await reader.readexactly(5) == b"early"  # bytes sent with the head are not lost
    writer.write(b"\x00\x01binary\xff")
    assert await reader.readexactly(9) == b"\x00\x01binary\xff"
    writer.write_eof()
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()


async def test_connect_to_a_forbidden_target_is_refused(rig: Rig) -> None:
    rig.allow("allowed.test")
    status, head, body = await rig.send(f"CONNECT {LOOPBACK}:{rig.echo_port} HTTP/1.1\r\n\r\n".encode())
    assert status == 403 and b"X-Outpost-Egress-Rule: egress.allowlist" in head
    status, _, body = await rig.send(f"CONNECT allowed.test:{rig.echo_port} HTTP/1.1\r\n\r\n".encode())
    assert status == 403 and body.startswith(b"egress.resolved_address")


async def test_unknown_sources_and_other_methods(rig: Rig) -> None:
    status, body = await rig.get(f"http://{LOOPBACK}:{rig.allowed.port}/")
    assert status == 403 and body.startswith(b"egress.unknown_source")
    rig.allow(f"{LOOPBACK}:{rig.allowed.port}")
    status, _, body = await rig.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 405 and body.startswith(b"egress.method")
    status, _, _ = await rig.send(b"GET https://allowed.test/ HTTP/1.1\r\n\r\n")
    assert status == 405
    status, _, body = await rig.send(b"NOT HTTP\r\n\r\n")
    assert status == 400
    assert rig.allowed.heads == []


async def test_unresolvable_and_unreachable_targets(rig: Rig) -> None:
    free = rig.forbidden.port
    assert rig.forbidden.server is not None
    rig.forbidden.server.close()
    await rig.forbidden.server.wait_closed()
    rig.allow("nowhere.test", f"{LOOPBACK}:{free}")
    status, body = await rig.get("http://nowhere.test/")
    assert status == 502 and body.startswith(b"egress.resolve")
    status, body = await rig.get(f"http://{LOOPBACK}:{free}/")
    assert status == 502 and body.startswith(b"egress.connect")


async def test_revoke_cuts_open_tunnels_and_sessions_are_separate(rig: Rig) -> None:
    rig.allow(f"{LOOPBACK}:{rig.echo_port}", session="sesn_a")
    reader, writer = await rig.connect()
    writer.write(f"CONNECT {LOOPBACK}:{rig.echo_port} HTTP/1.1\r\n\r\n".encode())
    await reader.readuntil(b"\r\n\r\n")
    rig.proxy.revoke(LOOPBACK, "sesn_other")  # not its session: no effect
    writer.write(b"x")
    assert await reader.readexactly(1) == b"x"
    rig.proxy.revoke(LOOPBACK, "sesn_a")
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()
    assert rig.proxy.granted() == {}
    # The same address granted to another session gets that session's allowlist.
    rig.allow(f"{LOOPBACK}:{rig.forbidden.port}", session="sesn_b")
    assert (await rig.get(f"http://{LOOPBACK}:{rig.forbidden.port}/"))[0] == 200
    assert (await rig.get(f"http://{LOOPBACK}:{rig.allowed.port}/"))[0] == 403


async def test_limits_tunnels_idle_and_head() -> None:
    limits = ProxyLimits(
        max_tunnels_per_session=1, idle_timeout_s=0.3, head_timeout_s=0.3, max_head_bytes=1024
    )
    async for rig in make_rig(limits):
        rig.allow(f"{LOOPBACK}:{rig.echo_port}")
        reader, writer = await rig.connect()
        writer.write(f"CONNECT {LOOPBACK}:{rig.echo_port} HTTP/1.1\r\n\r\n".encode())
        await reader.readuntil(b"\r\n\r\n")
        status, _, body = await rig.send(f"CONNECT {LOOPBACK}:{rig.echo_port} HTTP/1.1\r\n\r\n".encode())
        assert status == 503 and body.startswith(b"egress.max_tunnels")
        # Nothing moves: the tunnel is closed after the idle timeout.
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
        # A head that never ends, or is too large.
        status, _, _ = await rig.send(b"GET http://x.test/ HTTP/1.1\r\n")
        assert status == 408
        status, _, _ = await rig.send(b"GET http://x.test/ HTTP/1.1\r\nX: " + b"a" * 2048 + b"\r\n\r\n")
        assert status == 431


async def test_close_is_idempotent_and_cuts_connections(rig: Rig) -> None:
    rig.allow(f"{LOOPBACK}:{rig.echo_port}")
    reader, writer = await rig.connect()
    writer.write(f"CONNECT {LOOPBACK}:{rig.echo_port} HTTP/1.1\r\n\r\n".encode())
    await reader.readuntil(b"\r\n\r\n")
    await rig.proxy.close()
    await rig.proxy.close()
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()
    with pytest.raises(OSError):
        await rig.connect()


async def test_connection_cap_and_limit_validation() -> None:
    async for rig in make_rig(ProxyLimits(max_connections=1)):
        rig.allow(f"{LOOPBACK}:{rig.allowed.port}")
        _, idle_writer = await rig.connect()  # holds the only slot, sending nothing
        reader, writer = await rig.connect()
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed at once, unanswered
        writer.close()
        idle_writer.close()
    with pytest.raises(ValueError, match="idle_timeout_s"):
        ProxyLimits(idle_timeout_s=0)
