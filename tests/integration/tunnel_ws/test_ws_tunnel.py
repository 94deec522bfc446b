"""The WebSocket tunnel end to end, no Docker: a real control plane (SQLite, gRPC mTLS and uvicorn
on loopback, port 0), a real enrolled edge identity, and the edge's real ``Dialer`` + ``Link`` with a
fake request handler. The proxy tests go through a CONNECT-only proxy started here that allows
only the API's port and requires Basic auth, so gRPC cannot pass and WebSocket can."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from control_plane.server import ControlPlane
from edge_agent.connection import LinkState, TransportError, TransportKind
from edge_agent.connection.selection import CHOICE_FILE
from edge_agent.connection.ws_transport import tunnel_ws_url
from edge_agent.enroll import register
from edge_agent.identity import Identity
from outpost_wire.pop import AUTH_SCHEME, audience_for, create_token
from tests.integration.tunnel_ws._ws_support import connected_edges, self_signed_edge_cert
from tests.support import eventually
from tests.support.connect_proxy import ConnectProxy
from tests.support.edge_link import api_fixture as api_fixture
from tests.support.edge_link import cp_fixture as cp_fixture
from tests.support.edge_link import make_dialer, running_link
from tests.support.edge_link import no_ambient_proxy as no_ambient_proxy

pytestmark = pytest.mark.usefixtures("no_ambient_proxy")


@pytest.fixture
async def environment(api: httpx.AsyncClient) -> str:
    r = await api.post("/v1/environments", json={"name": "ws", "config": {"type": "self_hosted"}})
    assert r.status_code == 200, r.text
    return str(r.json()["id"])


@pytest.fixture
async def identity(cp: ControlPlane, api: httpx.AsyncClient, environment: str, tmp_path: Path) -> Identity:
    r = await api.post(f"/v1/environments/{environment}/enrollment_tokens", json={"ttl_seconds": 600})
    token = r.json()
    return await register(
        cp.http_url, token["token"], tmp_path / "edge", name="ws-edge", ca_fingerprint=token["ca_fingerprint"]
    )


# -- (1) the WebSocket transport carries the tunnel ---------------------------------------------------
async def test_websocket_transport_connects_serves_and_is_cut_on_revoke(
    cp: ControlPlane, api: httpx.AsyncClient, environment: str, identity: Identity, tmp_path: Path
) -> None:
    dialer = make_dialer(identity, tmp_path / "edge", "websocket")
    async with running_link(identity, dialer) as link:
        await asyncio.wait_for(link.connected.wait(), 15)
        edges = await connected_edges(api)
        assert [e["edge_id"] for e in edges] == [identity.edge_id]
        assert edges[0]["peer"].startswith("ws:127.0.0.1:")
        assert list(dialer.attempts) == [(TransportKind.WEBSOCKET, True)]

        # Frames flow both ways: a tool call goes to the edge, its result comes back.
        r = await api.post(
            "/v1/sandboxes/exec",
            json={"environment_id": environment, "session_id": "ses_ws", "tool": "bash", "input": {}},
        )
        assert r.status_code == 200, r.text
        assert "fake bash ran" in json.dumps(r.json())

        # Heartbeats keep it up past the heartbeat timeout (3 s) with no other traffic.
        conn = cp.registry.get(identity.edge_id)
        assert conn is not None
        started = time.monotonic()
        await eventually(
            lambda: _true_after(started, 3.5), what="the heartbeat timeout to pass", interval_s=0.05
        )
        assert cp.registry.get(identity.edge_id) is conn and conn.is_open
        assert link.connections == 1

        # Revocation cuts the WebSocket tunnel, and the link stops for good (no reconnect).
        r = await api.post(f"/v1/edges/{identity.edge_id}/revoke")
        assert r.status_code == 200, r.text

        async def gone() -> bool:
            return not link.connected.is_set() and not await connected_edges(api)

        await eventually(gone, what="the revoked edge to be disconnected", interval_s=0.05)
        await eventually(
            lambda: _ready(link.state is LinkState.REFUSED), what="the link to stop", interval_s=0.05
        )
        assert link.refusal == "revoked" and link.connections == 1
        assert list(dialer.attempts) == [(TransportKind.WEBSOCKET, True)]  # never dialled again

    # A new attempt is refused before the upgrade (HTTP 401), for good too.
    with pytest.raises(TransportError) as refused:
        await make_dialer(identity, tmp_path / "edge", "websocket").connect()
    assert "401" in str(refused.value) and refused.value.refusal == "revoked"


async def _true_after(started: float, seconds: float) -> bool:
    return time.monotonic() - started >= seconds


async def _ready(value: bool) -> bool:
    return value


async def test_grpc_transport_still_connects(
    api: httpx.AsyncClient, identity: Identity, tmp_path: Path
) -> None:
    dialer = make_dialer(identity, tmp_path / "edge", "grpc")
    async with running_link(identity, dialer) as link:
        await asyncio.wait_for(link.connected.wait(), 15)
        edges = await connected_edges(api)
        assert [e["edge_id"] for e in edges] == [identity.edge_id]
        assert not edges[0]["peer"].startswith("ws:")


# -- (2) bad proof-of-possession tokens are refused, the server keeps working ------------------------
async def _attempt(url: str, token: str | None) -> int:
    """Open the tunnel with ``token``; returns 101 on success, else the refusal's HTTP status
    (and checks the refusal says why)."""
    headers = {"Authorization": f"{AUTH_SCHEME} {token}"} if token is not None else {}
    try:
        async with connect(url, additional_headers=headers, proxy=None, open_timeout=5):
            return 101
    except InvalidStatus as exc:
        assert b"unauthenticated" in exc.response.body
        return exc.response.status_code


async def _refusal(url: str, token: str | None) -> str:
    headers = {"Authorization": f"{AUTH_SCHEME} {token}"} if token is not None else {}
    with pytest.raises(InvalidStatus) as info:
        async with connect(url, additional_headers=headers, proxy=None, open_timeout=5):
            pass
    assert info.value.response.status_code == 401
    return info.value.response.body.decode()


async def test_bad_tokens_are_refused_and_the_server_keeps_working(
    cp: ControlPlane, api: httpx.AsyncClient, identity: Identity, tmp_path: Path
) -> None:
    url = tunnel_ws_url(cp.http_url)
    aud = audience_for(identity.ca_pem)
    now = time.time()

    def token(**overrides: Any) -> str:
        args: dict[str, Any] = {
            "key_pem": identity.key_pem,
            "cert_pem": identity.cert_pem,
            "edge_id": identity.edge_id,
            "audience": aud,
            "now": now,
        }
        args.update(overrides)
        return create_token(**args)

    other_key = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    foreign_key, foreign_cert = self_signed_edge_cert(identity)

    assert "missing" in await _refusal(url, None)
    assert "bad_signature" in await _refusal(url, token(key_pem=other_key))
    assert "expired" in await _refusal(url, token(now=now - 600))
    assert "bad_lifetime" in await _refusal(url, token(ttl_s=3600))
    assert "wrong_audience" in await _refusal(url, token(audience="outpost-tunnel:someone-else"))
    assert "untrusted_issuer" in await _refusal(url, token(key_pem=foreign_key, cert_pem=foreign_cert))
    assert "malformed" in await _refusal(url, "not-a-token")

    once = token()
    assert await _attempt(url, once) == 101  # a good token works ...
    assert "replayed" in await _refusal(url, once)  # ... once

    # The server still serves a well-behaved edge.
    dialer = make_dialer(identity, tmp_path / "edge", "websocket")
    async with running_link(identity, dialer) as link:
        await asyncio.wait_for(link.connected.wait(), 15)
    r = await api.post(f"/v1/edges/{identity.edge_id}/revoke")
    assert r.status_code == 200, r.text
    assert "revoked" in await _refusal(url, token(now=time.time()))
    with pytest.raises(TransportError) as refused:
        await dialer.connect()
    assert refused.value.unauthenticated


# -- (3) through a CONNECT-only proxy: auto falls back to WebSocket and remembers it -----------------
async def test_auto_falls_back_to_websocket_through_proxy_and_remembers(
    cp: ControlPlane,
    api: httpx.AsyncClient,
    identity: Identity,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    http_port = int(cp.http_url.rsplit(":", 1)[1])
    tunnel_port = int(cp.tunnel_address.rsplit(":", 1)[1])
    state_dir = tmp_path / "edge"
    async with ConnectProxy("edge", "s3cret", allowed_ports={http_port}) as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url())

        dialer = make_dialer(identity, state_dir, "auto")
        async with running_link(identity, dialer) as link:
            await asyncio.wait_for(link.connected.wait(), 20)
            edges = await connected_edges(api)
            assert [e["edge_id"] for e in edges] == [identity.edge_id]
        assert list(dialer.attempts) == [(TransportKind.GRPC, False), (TransportKind.WEBSOCKET, True)]
        # gRPC did try the proxy (and was refused); the WebSocket went through it.
        assert (f"127.0.0.1:{tunnel_port}", 403) in proxy.log
        assert (f"127.0.0.1:{http_port}", 200) in proxy.log
        assert json.loads((state_dir / CHOICE_FILE).read_text())["transport"] == "websocket"

        # Next start: the remembered transport is dialled straight away; gRPC is not tried.
        proxy.log.clear()
        dialer = make_dialer(identity, state_dir, "auto")
        async with running_link(identity, dialer) as link:
            await asyncio.wait_for(link.connected.wait(), 10)
        assert list(dialer.attempts) == [(TransportKind.WEBSOCKET, True)]
        assert all(target.endswith(f":{http_port}") for target, _ in proxy.log)

        # Wrong proxy credentials: a clear error that does not leak the password.
        monkeypatch.setenv("HTTPS_PROXY", proxy.url(password="wrong-pass"))
        dialer = make_dialer(identity, state_dir, "websocket")
        with pytest.raises(TransportError) as failed:
            await dialer.connect()
        message = str(failed.value)
        assert "407" in message and "credentials" in message
        assert "wrong-pass" not in message and "s3cret" not in message
