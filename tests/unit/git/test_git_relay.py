"""The git relay behind the egress proxy, over real loopback sockets, with the upstream replaced by
an ``httpx.MockTransport`` (no Docker, no git).

The test process plays the sandboxes: it connects from 127.0.0.1 (granted to ``sesn_a``) and from
127.0.0.2 (granted to ``sesn_b``).
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
import pytest

from edge_agent.egress import Allowlist, EgressProxy, LocalService
from edge_agent.git import EdgeCredentials, GitCredentialConfig, GitRelay, RelayRoutes
from edge_agent.git.policy import RepositoryPolicy
from edge_agent.mcp.config import SecretSource
from outpost_wire.frames import Repository

A_ADDR, B_ADDR = "127.0.0.1", "127.0.0.2"
CANARY = "canary-delivered-9c1e"
EDGE_SECRET = "edge-own-secret-41d0"
REPO = Repository("sesrsc_a1", "https://git.internal:8443/org/app.git", "/workspace/app", token=CANARY)
EDGE_REPO = Repository("sesrsc_a2", "https://edge.internal/lib.git", "/workspace/lib")
B_REPO = Repository("sesrsc_b1", "https://git.internal:8443/org/other.git", "/workspace/other")
# The edge's repositories rule for these tests (the default allows no repository at all).
POLICY = RepositoryPolicy(allowed_hosts=("git.internal", "edge.internal", "down.internal"))


@dataclass
class Upstream:
    requests: list[httpx.Request] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "application/x-git-result"})

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        self.bodies.append(await request.aread())
        return httpx.Response(self.status, headers=self.headers, stream=httpx.ByteStream(b"PACK-DATA" * 1000))


@dataclass
class Rig:
    proxy: EgressProxy
    routes: RelayRoutes
    upstream: Upstream

    def path(self, session: str, repo: str, endpoint: str) -> str:
        return f"/git/{self.routes.token_for(session)}/{repo}/{endpoint}"

    async def send(self, raw: bytes, *, source: str = A_ADDR) -> tuple[int, bytes, bytes]:
        reader, writer = await asyncio.open_connection(
            self.proxy.host, self.proxy.port, local_addr=(source, 0)
        )
        writer.write(raw)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        head, _, body = data.partition(b"\r\n\r\n")
        return int(head.split(b" ")[1]), head, body


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    upstream = Upstream()
    routes = RelayRoutes()
    creds = EdgeCredentials(
        [GitCredentialConfig(host="edge.internal", token=SecretSource(value=EDGE_SECRET))]
    )
    relay = GitRelay(routes, creds, idle_timeout_s=5, transport=httpx.MockTransport(upstream), policy=POLICY)
    proxy = EgressProxy(A_ADDR, 0, local=LocalService(GitRelay.prefix, relay.serve))
    await proxy.start()
    proxy.grant(A_ADDR, "sesn_a", Allowlist.parse([]))
    proxy.grant(B_ADDR, "sesn_b", Allowlist.parse([]))
    routes.update("sesn_a", [REPO, EDGE_REPO])
    routes.update("sesn_b", [B_REPO])
    try:
        yield Rig(proxy, routes, upstream)
    finally:
        await proxy.close()
        await relay.close()


def get(path: str, *extra: str) -> bytes:
    return "\r\n".join([f"GET {path} HTTP/1.1", "Host: sandbox", *extra, "", ""]).encode()


async def test_info_refs_is_relayed_with_the_delivered_token(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    path = rig.path("sesn_a", "sesrsc_a1", "info/refs") + "?service=git-upload-pack"
    status, head, body = await rig.send(
        get(path, "Authorization: Basic c2FuZGJveDpmYWtl", "Cookie: x=1", "Git-Protocol: version=2")
    )
    assert status == 200, body
    assert body == b"PACK-DATA" * 1000
    assert b"Content-Type: application/x-git-result" in head and b"Connection: close" in head
    (sent,) = rig.upstream.requests
    assert str(sent.url) == "https://git.internal:8443/org/app.git/info/refs?service=git-upload-pack"
    expected = "Basic " + base64.b64encode(f"x-access-token:{CANARY}".encode()).decode()
    assert sent.headers["authorization"] == expected  # ours, not the sandbox's
    assert "cookie" not in sent.headers
    assert sent.headers["git-protocol"] == "version=2"
    assert CANARY not in caplog.text and expected not in caplog.text


async def test_absolute_form_through_the_proxy_is_relayed_too(rig: Rig) -> None:
    """What git sends when HTTP_PROXY points at the proxy itself."""
    own = f"http://{rig.proxy.host}:{rig.proxy.port}"
    path = own + rig.path("sesn_a", "sesrsc_a2", "info/refs") + "?service=git-receive-pack"
    status, _, _ = await rig.send(get(path, "Proxy-Connection: Keep-Alive"))
    assert status == 200
    (sent,) = rig.upstream.requests
    assert str(sent.url) == "https://edge.internal/lib.git/info/refs?service=git-receive-pack"
    expected = "Basic " + base64.b64encode(f"x-access-token:{EDGE_SECRET}".encode()).decode()
    assert sent.headers["authorization"] == expected  # the edge's own credential for the host


async def test_post_bodies_fixed_and_chunked(rig: Rig) -> None:
    path = rig.path("sesn_a", "sesrsc_a1", "git-upload-pack")
    fixed = (
        f"POST {path} HTTP/1.1\r\nHost: s\r\nContent-Type: application/x-git-upload-pack-request\r\n"
        "Content-Length: 11\r\n\r\nhello world"
    ).encode()
    assert (await rig.send(fixed))[0] == 200
    chunked = (
        f"POST {path} HTTP/1.1\r\nHost: s\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n"
        "5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"
    ).encode()
    status, head, _ = await rig.send(chunked)
    assert head.startswith(b"HTTP/1.1 100 Continue")
    assert rig.upstream.bodies == [b"hello world", b"hello world"]
    assert rig.upstream.requests[0].headers["content-length"] == "11"
    bad = f"POST {path} HTTP/1.1\r\nHost: s\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n".encode()
    status, _, body = await rig.send(bad)
    assert status == 400 and body.startswith(b"git.body")


async def test_one_sandbox_cannot_use_anothers_url(rig: Rig) -> None:
    a_url = rig.path("sesn_a", "sesrsc_a1", "info/refs") + "?service=git-upload-pack"
    status, _, body = await rig.send(get(a_url), source=B_ADDR)
    assert status == 404 and body.startswith(b"git.repository")
    # Nor its own token with the other's repository id.
    cross = rig.path("sesn_b", "sesrsc_a1", "info/refs") + "?service=git-upload-pack"
    assert (await rig.send(get(cross), source=B_ADDR))[0] == 404
    own = rig.path("sesn_b", "sesrsc_b1", "info/refs") + "?service=git-upload-pack"
    assert (await rig.send(get(own), source=B_ADDR))[0] == 200
    assert [str(r.url) for r in rig.upstream.requests] == [
        "https://git.internal:8443/org/other.git/info/refs?service=git-upload-pack"
    ]
    assert "authorization" not in rig.upstream.requests[0].headers  # no credential for it: anonymous


async def test_an_unknown_source_is_refused_before_the_relay(rig: Rig) -> None:
    rig.proxy.revoke(B_ADDR, "sesn_b")
    own = rig.path("sesn_b", "sesrsc_b1", "info/refs") + "?service=git-upload-pack"
    status, _, body = await rig.send(get(own), source=B_ADDR)
    assert status == 403 and body.startswith(b"egress.unknown_source")


@pytest.mark.parametrize(
    ("request_line", "status", "rule"),
    [
        ("GET /git/{t}/sesrsc_a1/HEAD", 404, b"git.path"),
        ("GET /git/{t}/sesrsc_a1/info/refs", 403, b"git.service"),
        ("GET /git/{t}/sesrsc_a1/info/refs?service=git-upload-archive", 403, b"git.service"),
        ("POST /git/{t}/sesrsc_a1/info/refs?service=git-upload-pack", 400, b"git.method"),
        ("GET /git/{t}/sesrsc_a1/git-upload-pack", 400, b"git.method"),
        ("GET /git/wrong-token/sesrsc_a1/info/refs?service=git-upload-pack", 404, b"git.repository"),
        ("GET /elsewhere", 405, b"egress.method"),  # not the relay's prefix: the proxy as before
    ],
)
async def test_refusals(rig: Rig, request_line: str, status: int, rule: bytes) -> None:
    line = request_line.replace("{t}", rig.routes.token_for("sesn_a"))
    got, _, body = await rig.send(f"{line} HTTP/1.1\r\nHost: s\r\nContent-Length: 0\r\n\r\n".encode())
    assert (got, body.split(b":")[0]) == (status, rule)
    assert rig.upstream.requests == []


@pytest.mark.parametrize(
    ("upstream_status", "status", "rule"),
    [(401, 403, b"git.upstream_auth"), (302, 502, b"git.upstream_redirect")],
)
async def test_upstream_answers_git_must_not_act_on(
    rig: Rig, upstream_status: int, status: int, rule: bytes
) -> None:
    rig.upstream.status = upstream_status
    rig.upstream.headers = {"WWW-Authenticate": 'Basic realm="x"', "Location": "https://evil.test/"}
    path = rig.path("sesn_a", "sesrsc_a1", "info/refs") + "?service=git-upload-pack"
    got, head, body = await rig.send(get(path))
    assert (got, body.split(b":")[0]) == (status, rule)
    assert b"WWW-Authenticate" not in head and b"evil.test" not in head


async def test_upstream_404_and_unreachable(rig: Rig) -> None:
    rig.upstream.status = 404
    path = rig.path("sesn_a", "sesrsc_a1", "info/refs") + "?service=git-upload-pack"
    assert (await rig.send(get(path)))[0] == 404
    rig.routes.update("sesn_a", [Repository("sesrsc_a1", "https://down.internal:1/x.git", "/workspace/x")])

    async def broken(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    rig.upstream.__class__ = type("Broken", (Upstream,), {"__call__": lambda self, r: broken(r)})
    status, _, body = await rig.send(get(path))
    assert status == 502 and body.startswith(b"git.upstream")


async def test_the_policy_and_the_address_checks_hold_in_the_relay(rig: Rig) -> None:
    path = rig.path("sesn_a", "sesrsc_a1", "info/refs") + "?service=git-upload-pack"
    for url, rule in (
        ("https://other.example/x.git", b"repositories.allowed_hosts"),
        ("http://git.internal/x.git", b"repositories.allow_http"),
    ):
        rig.routes.update("sesn_a", [Repository("sesrsc_a1", url, "/workspace/x")])
        status, _, body = await rig.send(get(path))
        assert (status, body.split(b":")[0]) == (403, rule)
    assert rig.upstream.requests == []


async def test_the_real_upstream_client_dials_only_checked_addresses() -> None:
    """No transport hook: a host that resolves to loopback is refused before any connect."""
    connections: list[int] = []

    async def count(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        writer.close()

    listener = await asyncio.start_server(count, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]

    async def to_loopback(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    routes = RelayRoutes()
    policy = RepositoryPolicy(allowed_hosts=("git.rebind.test",), allow_http=True)
    relay = GitRelay(routes, EdgeCredentials([]), idle_timeout_s=5, policy=policy, resolver=to_loopback)
    proxy = EgressProxy(A_ADDR, 0, local=LocalService(GitRelay.prefix, relay.serve))
    await proxy.start()
    proxy.grant(A_ADDR, "sesn_a", Allowlist.parse([]))
    routes.update("sesn_a", [Repository("r1", f"http://git.rebind.test:{port}/x.git", "/workspace/x")])
    try:
        rig = Rig(proxy, routes, Upstream())
        status, _, body = await rig.send(
            get(rig.path("sesn_a", "r1", "info/refs") + "?service=git-upload-pack")
        )
    finally:
        await proxy.close()
        await relay.close()
        listener.close()
        await listener.wait_closed()
    assert status == 403 and body.startswith(b"repositories.address")
    assert b"loopback" in body
    assert connections == []
