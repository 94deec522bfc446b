"""The WebSocket tunnel with TLS on the control plane's HTTP port (``http_tls``), no Docker: a real
control plane on loopback (port 0) serving HTTPS with client certificates requested but optional,
an edge that registers over ``https://`` (pinned CA) and dials ``wss://`` presenting its client
certificate. The certificate path is proven by connections without a token; the plain-HTTP proof of
possession path is ``test_ws_tunnel.py``."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import stat
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidHandshake, InvalidStatus

from control_plane.config import ControlPlaneConfig
from control_plane.enroll import CertificateAuthority
from control_plane.server import ControlPlane
from edge_agent.connection import TransportKind
from edge_agent.connection.ws_transport import tunnel_ws_url
from edge_agent.enroll import EnrollmentError, register
from edge_agent.identity import Identity
from outpost_wire.pop import AUTH_SCHEME, audience_for, create_token
from tests.integration.tunnel_ws._ws_support import connected_edges, self_signed_edge_cert
from tests.support import eventually
from tests.support.edge_link import (
    api_client,
    make_dialer,
    running_control_plane,
    running_link,
)
from tests.support.edge_link import no_ambient_proxy as no_ambient_proxy

pytestmark = pytest.mark.usefixtures("no_ambient_proxy")


@pytest.fixture
async def cp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[ControlPlane]:
    async with running_control_plane(tmp_path, monkeypatch, http_tls=True) as control_plane:
        yield control_plane


def trusting(cp: ControlPlane) -> ssl.SSLContext:
    """A client context that trusts the control plane's CA and presents no certificate."""
    assert cp.ca is not None
    return ssl.create_default_context(cadata=cp.ca.ca_cert_pem.decode())


def presenting(cp: ControlPlane, cert_pem: bytes, key_pem: bytes, tmp_path: Path) -> ssl.SSLContext:
    context = trusting(cp)
    cert_file, key_file = tmp_path / "client.crt", tmp_path / "client.key"
    cert_file.write_bytes(cert_pem)
    key_file.write_bytes(key_pem)
    context.load_cert_chain(cert_file, key_file)
    return context


@pytest.fixture
async def api(cp: ControlPlane) -> AsyncIterator[httpx.AsyncClient]:
    """An API client without a client certificate: the API key is its credential, as before."""
    async with api_client(cp, verify=trusting(cp)) as client:
        yield client


@pytest.fixture
async def environment(api: httpx.AsyncClient) -> str:
    r = await api.post("/v1/environments", json={"name": "wss", "config": {"type": "self_hosted"}})
    assert r.status_code == 200, r.text
    return str(r.json()["id"])


async def new_token(api: httpx.AsyncClient, environment: str) -> dict[str, str]:
    r = await api.post(f"/v1/environments/{environment}/enrollment_tokens", json={"ttl_seconds": 600})
    assert r.status_code == 200, r.text
    body: dict[str, str] = r.json()
    return body


async def enroll(cp: ControlPlane, api: httpx.AsyncClient, environment: str, state_dir: Path) -> Identity:
    token = await new_token(api, environment)
    return await register(
        cp.http_url, token["token"], state_dir, name="wss-edge", ca_fingerprint=token["ca_fingerprint"]
    )


async def attempt(url: str, *, ssl_context: ssl.SSLContext, token: str | None = None) -> int | str:
    """101 if the tunnel opened, else the refusal's status and body."""
    headers = {"Authorization": f"{AUTH_SCHEME} {token}"} if token is not None else {}
    try:
        async with connect(url, ssl=ssl_context, additional_headers=headers, proxy=None, open_timeout=5):
            return 101
    except InvalidStatus as exc:
        return f"{exc.response.status_code} {exc.response.body.decode()}"


async def test_https_api_register_and_wss_tunnel_with_mtls(
    cp: ControlPlane,
    api: httpx.AsyncClient,
    environment: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="control_plane.tunnel.ws_server")
    assert cp.http_url.startswith("https://127.0.0.1:")
    # The TLS files the control plane wrote for uvicorn are private.
    tls_dir = cp.config.data_dir / "http-tls"
    assert stat.S_IMODE(tls_dir.stat().st_mode) == 0o700
    for path in tls_dir.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path

    # An API client without a certificate still works (its API key is the credential).
    r = await api.get("/v1/agents")
    assert r.status_code == 200, r.text

    # The edge registers over https (pinned CA) and its identity points at https.
    identity = await enroll(cp, api, environment, tmp_path / "edge")
    assert identity.control_plane_url == cp.http_url
    assert identity.client_cert_files() is not None
    assert tunnel_ws_url(identity.control_plane_url).startswith("wss://")

    # The edge's own transport: wss, client certificate presented, frames flow both ways.
    dialer = make_dialer(identity, tmp_path / "edge", "websocket")
    async with running_link(identity, dialer) as link:
        await asyncio.wait_for(link.connected.wait(), 15)
        edges = await connected_edges(api)
        assert [e["edge_id"] for e in edges] == [identity.edge_id]
        assert list(dialer.attempts) == [(TransportKind.WEBSOCKET, True)]
        assert f"edge {identity.edge_id} authenticated by its TLS client certificate" in caplog.text
        r = await api.post(
            "/v1/sandboxes/exec",
            json={"environment_id": environment, "session_id": "ses_wss", "tool": "bash", "input": {}},
        )
        assert r.status_code == 200, r.text
        assert "fake bash ran" in json.dumps(r.json())

        # Revocation cuts the tunnel; the edge's reconnects are refused.
        r = await api.post(f"/v1/edges/{identity.edge_id}/revoke")
        assert r.status_code == 200, r.text

        async def gone() -> bool:
            return not link.connected.is_set() and not await connected_edges(api)

        await eventually(gone, 15, "the revoked edge to be disconnected", interval_s=0.05)


async def test_the_client_certificate_authenticates_the_websocket(
    cp: ControlPlane, api: httpx.AsyncClient, environment: str, tmp_path: Path
) -> None:
    identity = await enroll(cp, api, environment, tmp_path / "edge")
    other = await enroll(cp, api, environment, tmp_path / "other")
    url = tunnel_ws_url(cp.http_url)
    with_cert = presenting(cp, identity.cert_pem, identity.key_pem, tmp_path)

    def token(of: Identity) -> str:
        return create_token(
            key_pem=of.key_pem,
            cert_pem=of.cert_pem,
            edge_id=of.edge_id,
            audience=audience_for(of.ca_pem),
            now=time.time(),
        )

    # A valid client certificate and no token: accepted, by the certificate alone.
    assert await attempt(url, ssl_context=with_cert) == 101
    # With a token as well, it must be for the same edge.
    assert await attempt(url, ssl_context=with_cert, token=token(identity)) == 101
    refused = await attempt(url, ssl_context=with_cert, token=token(other))
    assert isinstance(refused, str) and refused.startswith("401") and "edge_mismatch" in refused
    # Without a client certificate the token is required (proof of possession, as over plain HTTP).
    refused = await attempt(url, ssl_context=trusting(cp))
    assert isinstance(refused, str) and refused.startswith("401") and "missing" in refused
    assert await attempt(url, ssl_context=trusting(cp), token=token(identity)) == 101

    # A revoked edge's certificate is refused.
    r = await api.post(f"/v1/edges/{identity.edge_id}/revoke")
    assert r.status_code == 200, r.text
    refused = await attempt(url, ssl_context=with_cert)
    assert isinstance(refused, str) and refused.startswith("401") and "revoked" in refused

    # A certificate from a foreign CA fails the TLS handshake: no HTTP exchange happens at all.
    foreign_key, foreign_cert = self_signed_edge_cert(other)
    foreign = presenting(cp, foreign_cert, foreign_key, tmp_path)
    with pytest.raises((ssl.SSLError, OSError, InvalidHandshake, EOFError)) as failed:
        await attempt(url, ssl_context=foreign, token=token(other))
    assert not isinstance(failed.value, InvalidStatus)
    with pytest.raises(httpx.TransportError):
        async with httpx.AsyncClient(base_url=cp.http_url, verify=foreign) as client:
            await client.get("/healthz")
    port = int(cp.http_url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=foreign)
    writer.write(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n")
    try:  # TLS 1.3: the server rejects the certificate after the client's side of the handshake
        answer = await reader.read()
    except (ssl.SSLError, ConnectionResetError):
        answer = b""
    assert answer == b""  # no HTTP response, not even a refusal
    writer.close()

    # The other edge is unaffected.
    other_cert = presenting(cp, other.cert_pem, other.key_pem, tmp_path)
    assert await attempt(url, ssl_context=other_cert) == 101


async def test_register_over_https_checks_the_pin_before_sending_the_token(
    cp: ControlPlane, api: httpx.AsyncClient, environment: str, tmp_path: Path
) -> None:
    token = await new_token(api, environment)
    with pytest.raises(EnrollmentError, match="CA fingerprint mismatch"):
        await register(cp.http_url, token["token"], tmp_path / "a", name="x", ca_fingerprint="0" * 64)
    assert not Identity.exists(tmp_path / "a")
    # The token was never sent: it still enrolls.
    identity = await register(
        cp.http_url, token["token"], tmp_path / "b", name="x", ca_fingerprint=token["ca_fingerprint"]
    )
    assert Identity.load(tmp_path / "b") == identity

    # Without a pin, the system's trust store decides, and it does not know the control plane's CA.
    token = await new_token(api, environment)
    with pytest.raises(EnrollmentError, match="cannot reach"):
        await register(cp.http_url, token["token"], tmp_path / "c", name="x")


def test_http_tls_files_go_together() -> None:
    with pytest.raises(ValueError, match="go together"):
        ControlPlaneConfig(http_tls=True, http_tls_cert_file=Path("/x.crt"))
    with pytest.raises(ValueError, match="need http_tls"):
        ControlPlaneConfig(http_tls_cert_file=Path("/x.crt"), http_tls_key_file=Path("/x.key"))


async def test_operator_certificate_from_another_ca(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``http_tls_cert_file`` / ``http_tls_key_file``: the server certificate comes from another CA
    (standing in for a public one, trusted through ``SSL_CERT_FILE``); client certificates are still
    checked against the control plane's CA, and registration falls back to the trust store."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "unused")
    public = CertificateAuthority.load_or_create(tmp_path / "public-ca")
    key_pem, cert_pem = public.issue_server_cert(["localhost"], ["127.0.0.1"])
    (tmp_path / "op.key").write_bytes(key_pem)
    (tmp_path / "op.key").chmod(0o600)
    (tmp_path / "op.crt").write_bytes(cert_pem)
    (tmp_path / "public-ca.crt").write_bytes(public.ca_cert_pem)
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "public-ca.crt"))
    config = ControlPlaneConfig(
        data_dir=tmp_path / "cp",
        http_port=0,
        tunnel_port=0,
        http_tls=True,
        http_tls_cert_file=tmp_path / "op.crt",
        http_tls_key_file=tmp_path / "op.key",
        drain_grace_s=0.5,
    )
    async with ControlPlane(config) as cp:
        headers = {"authorization": f"Bearer {cp.admin_key()}"}
        verify = ssl.create_default_context(cadata=public.ca_cert_pem.decode())
        async with httpx.AsyncClient(base_url=cp.http_url, headers=headers, verify=verify) as api:
            r = await api.post("/v1/environments", json={"name": "op", "config": {"type": "self_hosted"}})
            assert r.status_code == 200, r.text
            identity = await enroll(cp, api, str(r.json()["id"]), tmp_path / "edge")
            assert "not from its pinned CA" in caplog.text
            url = tunnel_ws_url(cp.http_url)
            with_cert = ssl.create_default_context(cadata=public.ca_cert_pem.decode())
            (tmp_path / "e.crt").write_bytes(identity.cert_pem)
            (tmp_path / "e.key").write_bytes(identity.key_pem)
            with_cert.load_cert_chain(tmp_path / "e.crt", tmp_path / "e.key")
            assert await attempt(url, ssl_context=with_cert) == 101
            dialer = make_dialer(identity, tmp_path / "edge", "websocket")
            async with running_link(identity, dialer) as link:
                await asyncio.wait_for(link.connected.wait(), 15)
