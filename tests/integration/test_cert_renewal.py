"""Automatic renewal of edge certificates end to end, no Docker: a real control plane (SQLite, gRPC
mTLS and uvicorn on loopback, port 0), an edge registered with a real enrollment token, its real
renewal code (``edge_agent.renew``) and its real ``Dialer`` + ``Link`` with a fake request handler.

What is checked: the files on disk change (new fingerprint, key 0600); the new certificate gets in
over gRPC and over WebSocket, after which the old one is refused; the crash window (the control
plane renewed, the edge did not save the answer) costs nothing; the daemon's renewal task swaps
the identity under a live tunnel without dropping it; refusals (revoked edge, bad token, bad CSR).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from control_plane.config import ControlPlaneConfig
from control_plane.server import ControlPlane
from edge_agent.connection import TransportError
from edge_agent.enroll import register
from edge_agent.identity import Identity, generate_key_and_csr, write_pending_key
from edge_agent.renew import (
    RENEW_AUDIENCE_PREFIX,
    RENEW_PATH,
    CertificateRenewer,
    RenewalError,
    RenewalSchedule,
    renew_certificate,
)
from outpost_wire.errors import ErrorCode
from outpost_wire.pop import AUTH_SCHEME, audience_for, create_token
from tests.support import eventually
from tests.support.edge_link import api_fixture as api_fixture
from tests.support.edge_link import cp_fixture as cp_fixture
from tests.support.edge_link import make_dialer, running_link
from tests.support.edge_link import no_ambient_proxy as no_ambient_proxy

pytestmark = pytest.mark.usefixtures("no_ambient_proxy")


@pytest.fixture
async def identity(cp: ControlPlane, api: httpx.AsyncClient, tmp_path: Path) -> Identity:
    r = await api.post("/v1/environments", json={"name": "renew", "config": {"type": "self_hosted"}})
    assert r.status_code == 200, r.text
    r = await api.post(f"/v1/environments/{r.json()['id']}/enrollment_tokens", json={"ttl_seconds": 600})
    token = r.json()
    return await register(
        cp.http_url,
        token["token"],
        tmp_path / "edge",
        name="renew-edge",
        ca_fingerprint=token["ca_fingerprint"],
    )


async def connects(identity: Identity, state_dir: Path, transport: str, cp: ControlPlane) -> None:
    """The edge gets a tunnel up over ``transport`` with this identity."""
    dialer = make_dialer(identity, state_dir, transport)
    async with running_link(identity, dialer, sandbox_capacity=1) as link:
        await asyncio.wait_for(link.connected.wait(), 15)
        conn = cp.registry.get(identity.edge_id)
        assert conn is not None and conn.peer.startswith("ws:" if transport == "websocket" else "ipv4:")
    await _gone(cp, identity.edge_id)


async def refused(identity: Identity, state_dir: Path, transport: str) -> bool:
    """Whether the control plane refuses this identity over ``transport`` (as unauthenticated)."""
    dialer = make_dialer(identity, state_dir, transport)
    try:
        transport_ = await dialer.connect()
    except TransportError as exc:
        return exc.unauthenticated
    try:
        await asyncio.wait_for(transport_.receive(), 10)  # gRPC: the stream is refused, not the TLS
    except TransportError as exc:
        return exc.unauthenticated
    finally:
        await transport_.close()
    return False


async def _gone(cp: ControlPlane, edge_id: str) -> None:
    await eventually(lambda: cp.registry.get(edge_id) is None, 10, "the edge's tunnel to go away")


def renew_token(identity: Identity, audience: str | None = None) -> str:
    return create_token(
        key_pem=identity.key_pem,
        cert_pem=identity.cert_pem,
        edge_id=identity.edge_id,
        audience=audience or RENEW_AUDIENCE_PREFIX + identity.ca_fingerprint,
        now=time.time(),
    )


async def post_renew(cp: ControlPlane, authorization: str | None, csr_pem: bytes) -> httpx.Response:
    headers = {"authorization": authorization} if authorization is not None else {}
    async with httpx.AsyncClient(base_url=cp.http_url, timeout=30) as client:
        return await client.post(RENEW_PATH, json={"csr_pem": csr_pem.decode()}, headers=headers)


def _error(r: httpx.Response) -> tuple[int, str, str]:
    body: dict[str, Any] = r.json()
    return r.status_code, body["error"]["type"], body["error"]["message"]


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


# -- the happy path ---------------------------------------------------------------------------------------
async def test_renewed_certificate_connects_over_grpc_and_websocket_then_the_old_one_is_refused(
    cp: ControlPlane, api: httpx.AsyncClient, identity: Identity, tmp_path: Path
) -> None:
    state_dir = tmp_path / "edge"
    directory = state_dir / "identity"
    old_files = {name: (directory / name).read_bytes() for name in ("edge.key", "edge.crt")}

    started = time.monotonic()
    new = await renew_certificate(identity, [cp.http_url])
    renew_s = time.monotonic() - started

    # On disk: the new key and certificate, 0600 key, nothing pending; the CA and metadata kept.
    assert new.edge_id == identity.edge_id and new.environment_id == identity.environment_id
    assert new.fingerprint != identity.fingerprint and new.key_pem != identity.key_pem
    assert Identity.load(state_dir) == new
    assert (directory / "edge.key").read_bytes() != old_files["edge.key"]
    assert (directory / "edge.crt").read_bytes() != old_files["edge.crt"]
    assert _mode(directory / "edge.key") == 0o600 and _mode(directory / "identity.json") == 0o600
    assert sorted(p.name for p in directory.iterdir() if not p.name.startswith(".")) == [
        "ca.crt",
        "edge.crt",
        "edge.key",
        "identity.json",
    ]
    assert new.not_after >= identity.not_after
    # The control plane's record follows; the old certificate is kept as the previous one.
    r = await api.get(f"/v1/edges/{identity.edge_id}")
    assert r.json()["cert_fingerprint"] == new.fingerprint
    assert cp.store is not None
    assert (await cp.store.get_edge(identity.edge_id)).previous_cert_fingerprint == identity.fingerprint

    # The new certificate gets in over both transports; the first use retires the old one.
    await connects(new, state_dir, "grpc", cp)
    await connects(new, state_dir, "websocket", cp)
    assert (await cp.store.get_edge(identity.edge_id)).previous_cert_fingerprint is None
    assert await refused(identity, state_dir, "grpc")
    assert await refused(identity, state_dir, "websocket")
    # ... and it no longer renews either.
    r = await post_renew(cp, f"{AUTH_SCHEME} {renew_token(identity)}", generate_key_and_csr()[1])
    assert _error(r)[:2] == (401, "authentication_error") and "certificate_mismatch" in r.text
    assert renew_s < 10


# -- the crash window ---------------------------------------------------------------------------------------
async def test_crash_after_the_control_plane_answered_the_old_certificate_still_works_and_renews(
    cp: ControlPlane, identity: Identity, tmp_path: Path
) -> None:
    state_dir = tmp_path / "edge"
    # The edge asked for a renewal, the control plane issued and recorded it, the edge died before
    # saving it: it left only its pending key behind.
    lost_key, csr = generate_key_and_csr()
    assert identity.directory is not None
    write_pending_key(identity.directory, lost_key)
    r = await post_renew(cp, f"{AUTH_SCHEME} {renew_token(identity)}", csr)
    assert r.status_code == 200, r.text
    assert r.json()["edge_id"] == identity.edge_id
    assert cp.store is not None
    record = await cp.store.get_edge(identity.edge_id)
    assert record.cert_fingerprint != identity.fingerprint
    assert record.previous_cert_fingerprint == identity.fingerprint

    # Restarted, it loads what it has and connects with it, over both transports.
    restarted = Identity.load(state_dir)
    assert restarted == identity
    await connects(restarted, state_dir, "grpc", cp)
    await connects(restarted, state_dir, "websocket", cp)
    # Its next renewal discards the stale pending key and succeeds.
    new = await renew_certificate(restarted, [cp.http_url])
    assert not (identity.directory / "edge.key.pending").exists()
    record = await cp.store.get_edge(identity.edge_id)
    assert (record.cert_fingerprint, record.previous_cert_fingerprint) == (
        new.fingerprint,
        identity.fingerprint,
    )
    await connects(new, state_dir, "websocket", cp)
    assert await refused(identity, state_dir, "grpc")


# -- the daemon's task under a live tunnel ------------------------------------------------------------------
async def test_renewal_task_swaps_the_identity_without_dropping_the_tunnel(
    cp: ControlPlane, identity: Identity, tmp_path: Path
) -> None:
    state_dir = tmp_path / "edge"
    dialer = make_dialer(identity, state_dir, "grpc")
    async with running_link(identity, dialer, sandbox_capacity=1) as link:
        await asyncio.wait_for(link.connected.wait(), 15)
        conn = cp.registry.get(identity.edge_id)
        clock = [identity.not_after - timedelta(days=1)]  # the certificate is due

        async def renew(current: Identity, urls: Sequence[str]) -> Identity:
            renewed = await renew_certificate(current, urls)
            clock[0] = datetime.now(UTC)  # and the renewed one is not
            return renewed

        renewer = CertificateRenewer(
            identity,
            schedule=RenewalSchedule(renew_before=timedelta(days=30), check_interval_s=3600),
            urls=[cp.http_url],
            renew=renew,
            on_renewed=dialer.set_identity,
            clock=lambda: clock[0],
        )
        assert await renewer.check() == 3600
        new = renewer.identity
        assert new.fingerprint != identity.fingerprint and dialer.identity == new
        # The tunnel that was up stays up.
        await asyncio.sleep(0.5)
        assert cp.registry.get(identity.edge_id) is conn and conn is not None and conn.is_open
        assert link.connections == 1
        # The next connection presents the new certificate.
        conn.close(ErrorCode.UNAVAILABLE, "test: reconnect")
        await eventually(lambda: link.connections >= 2, 15, "the link to reconnect")
    assert cp.store is not None
    record = await cp.store.get_edge(identity.edge_id)
    assert (record.cert_fingerprint, record.previous_cert_fingerprint) == (new.fingerprint, None)


# -- refusals -----------------------------------------------------------------------------------------------
async def test_a_revoked_edge_is_not_renewed(
    cp: ControlPlane, api: httpx.AsyncClient, identity: Identity
) -> None:
    r = await api.post(f"/v1/edges/{identity.edge_id}/revoke")
    assert r.status_code == 200, r.text
    with pytest.raises(RenewalError) as info:
        await renew_certificate(identity, [cp.http_url])
    assert info.value.status_code == 401 and "revoked" in str(info.value)
    assert identity.directory is not None
    assert Identity.load(identity.directory.parent) == identity  # the identity on disk is untouched
    assert not (identity.directory / "edge.key.pending").exists()


async def test_bad_tokens_are_refused_with_their_reason(cp: ControlPlane, identity: Identity) -> None:
    _, csr = generate_key_and_csr()
    r = await post_renew(cp, None, csr)
    assert _error(r)[:2] == (401, "authentication_error") and "missing" in r.text
    r = await post_renew(cp, f"{AUTH_SCHEME} not-a-token", csr)
    assert _error(r)[:2] == (401, "authentication_error") and "malformed" in r.text
    r = await post_renew(cp, f"Bearer {cp.admin_key()}", csr)  # an API key is not the credential
    assert r.status_code == 401 and "missing" in r.text
    # A tunnel token does not renew (another audience).
    tunnel_token = renew_token(identity, audience=audience_for(identity.ca_pem))
    r = await post_renew(cp, f"{AUTH_SCHEME} {tunnel_token}", csr)
    assert r.status_code == 401 and "wrong_audience" in r.text
    # A token works once.
    token = renew_token(identity)
    assert (await post_renew(cp, f"{AUTH_SCHEME} {token}", csr)).status_code == 200
    r = await post_renew(cp, f"{AUTH_SCHEME} {token}", csr)
    assert r.status_code == 401 and "replayed" in r.text
    assert token not in r.text


async def test_a_bad_csr_is_400(cp: ControlPlane, identity: Identity) -> None:
    r = await post_renew(
        cp, f"{AUTH_SCHEME} {renew_token(identity)}", b"-----BEGIN CERTIFICATE REQUEST-----\nx"
    )
    status, error_type, message = _error(r)
    assert (status, error_type) == (400, "invalid_request_error") and "csr_pem" in message
    async with httpx.AsyncClient(base_url=cp.http_url, timeout=30) as client:
        r = await client.post(RENEW_PATH, json={}, headers={"authorization": f"{AUTH_SCHEME} x"})
    assert r.status_code == 400
    assert cp.store is not None
    assert (await cp.store.get_edge(identity.edge_id)).cert_fingerprint == identity.fingerprint


# -- over HTTPS (http_tls): the pinned CA verifies the server, the edge presents its certificate -----------
async def test_renewal_over_https(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "unused")
    config = ControlPlaneConfig(data_dir=tmp_path / "cp", http_port=0, tunnel_port=0, http_tls=True)
    async with ControlPlane(config) as cp:
        assert cp.http_url.startswith("https://") and cp.ca is not None
        verify = ssl.create_default_context(cadata=cp.ca.ca_cert_pem.decode())
        headers = {"authorization": f"Bearer {cp.admin_key()}"}
        async with httpx.AsyncClient(base_url=cp.http_url, headers=headers, verify=verify) as api:
            r = await api.post("/v1/environments", json={"name": "tls", "config": {"type": "self_hosted"}})
            environment = r.json()["id"]
            r = await api.post(f"/v1/environments/{environment}/enrollment_tokens", json={})
            token = r.json()
        state_dir = tmp_path / "edge"
        identity = await register(
            cp.http_url, token["token"], state_dir, name="tls-edge", ca_fingerprint=token["ca_fingerprint"]
        )
        new = await renew_certificate(identity, [cp.http_url])
        assert new.fingerprint != identity.fingerprint and Identity.load(state_dir) == new
        await connects(new, state_dir, "websocket", cp)  # wss://, mTLS with the new certificate
        assert await refused(identity, state_dir, "websocket")


async def test_the_operator_command_renews_now(
    cp: ControlPlane,
    identity: Identity,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from edge_agent import cli
    from edge_agent.cli import main

    monkeypatch.setattr(cli, "_configure_logging", lambda config, args, **_: None)  # keep pytest's handlers
    state_dir = tmp_path / "edge"
    assert await asyncio.to_thread(main, ["renew-certificate", "--state-dir", str(state_dir)]) == 0
    renewed = Identity.load(state_dir)
    assert renewed.fingerprint != identity.fingerprint
    out = capsys.readouterr().out
    assert f"renewed the client certificate of edge {identity.edge_id}" in out
    # An identity the control plane no longer accepts: one line, exit status 3 (refused), files kept.
    assert cp.enrollment is not None
    await cp.enrollment.revoke(identity.edge_id)
    assert await asyncio.to_thread(main, ["renew-certificate", "--state-dir", str(state_dir)]) == 3
    err = capsys.readouterr().err
    assert "revoked" in err and len(err.strip().splitlines()) == 1, err
    assert Identity.load(state_dir) == renewed
