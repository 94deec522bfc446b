"""Enrollment end to end over real HTTP: uvicorn on 127.0.0.1 (port 0), a SQLite store, the CA on
disk, and the edge's ``register`` talking to it with httpx."""

from __future__ import annotations

import asyncio
import socket
import stat
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import uvicorn
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from fastapi import FastAPI

from control_plane.api.auth import PUBLIC_PATHS, ApiKeyGate, create_api_key
from control_plane.api.enroll_routes import enroll_router, operator_router
from control_plane.enroll import CertificateAuthority, EnrollmentService
from control_plane.store.sqlite import SqliteStore
from edge_agent.enroll import EnrollmentError, register
from edge_agent.identity import Identity
from tests.support import eventually

ENV_ID = "env_integration"
TUNNEL = "127.0.0.1:7443"


class Clock:
    """Wall-clock time plus an offset the test can move forward."""

    def __init__(self) -> None:
        self.offset = timedelta()

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += timedelta(seconds=seconds)


@dataclass
class ControlPlane:
    url: str
    clock: Clock
    ca: CertificateAuthority
    service: EnrollmentService
    http: httpx.AsyncClient

    async def token(self, ttl_seconds: float = 600) -> dict[str, str]:
        response = await self.http.post(
            f"/v1/environments/{ENV_ID}/enrollment_tokens", json={"ttl_seconds": ttl_seconds}
        )
        assert response.status_code == 200, response.text
        body: dict[str, str] = response.json()
        return body


@pytest.fixture
async def control_plane(tmp_path: Path) -> AsyncIterator[ControlPlane]:
    clock = Clock()
    async with SqliteStore(tmp_path / "control.db") as store:
        await store.create_resource("environment", ENV_ID, {"name": "integration"}, clock())
        ca = CertificateAuthority.load_or_create(tmp_path / "ca", clock=clock)
        service = EnrollmentService(store, ca, clock=clock)
        app = FastAPI()
        app.include_router(enroll_router(service, tunnel_address=TUNNEL))
        app.include_router(operator_router(service))
        app.add_middleware(ApiKeyGate, store=store, public=PUBLIC_PATHS, clock=clock)  # the operator routes
        key, _ = await create_api_key(store, "admin", clock())

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False))
        task = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            await eventually(lambda: server.started or task.done())
            if task.done():
                task.result()  # surface a startup failure
            url = f"http://127.0.0.1:{port}"
            headers = {"authorization": f"Bearer {key}"}
            async with httpx.AsyncClient(base_url=url, timeout=10, headers=headers) as http:
                yield ControlPlane(url, clock, ca, service, http)
        finally:
            server.should_exit = True
            await asyncio.wait_for(task, timeout=10)
            sock.close()


async def test_register_then_replays_and_refusals(control_plane: ControlPlane, tmp_path: Path) -> None:
    cp = control_plane
    issued = await cp.token()
    assert issued["ca_fingerprint"] == cp.ca.fingerprint_sha256

    state = tmp_path / "edge-state"
    identity = await register(
        cp.url, issued["token"], state, name="edge-one", ca_fingerprint=issued["ca_fingerprint"]
    )

    # The identity on disk: modes, contents, and it round-trips.
    directory = state / "identity"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE((directory / "edge.key").stat().st_mode) == 0o600
    assert stat.S_IMODE((directory / "identity.json").stat().st_mode) == 0o600
    assert (directory / "ca.crt").read_bytes() == cp.ca.ca_cert_pem
    assert Identity.load(state) == identity
    assert identity.environment_id == ENV_ID
    assert identity.tunnel_address == TUNNEL
    assert identity.control_plane_url == cp.url
    for path in state.rglob("*"):
        if path.is_file():
            assert issued["token"].encode() not in path.read_bytes()

    # The control plane knows the edge, and the tunnel would accept its certificate.
    edges = (await cp.http.get("/v1/edges", params={"environment_id": ENV_ID})).json()["data"]
    assert [(e["id"], e["name"]) for e in edges] == [(identity.edge_id, "edge-one")]
    assert edges[0]["cert_fingerprint"] == identity.fingerprint
    der = x509.load_pem_x509_certificate(identity.cert_pem).public_bytes(serialization.Encoding.DER)
    assert (await cp.service.authenticate_peer(der)).id == identity.edge_id

    # Replaying the same token: 401 "used".
    with pytest.raises(EnrollmentError) as info:
        await register(cp.url, issued["token"], tmp_path / "replay", name="edge-two")
    assert info.value.status_code == 401
    assert info.value.error_type == "authentication_error"
    assert str(info.value) == "enrollment token rejected: used"
    assert not Identity.exists(tmp_path / "replay")


async def test_expired_token(control_plane: ControlPlane, tmp_path: Path) -> None:
    issued = await control_plane.token(ttl_seconds=60)
    control_plane.clock.advance(61)
    with pytest.raises(EnrollmentError) as info:
        await register(control_plane.url, issued["token"], tmp_path, name="late")
    assert info.value.status_code == 401
    assert str(info.value) == "enrollment token rejected: expired"


async def test_garbage_token(control_plane: ControlPlane, tmp_path: Path) -> None:
    with pytest.raises(EnrollmentError) as info:
        await register(control_plane.url, "oet_garbage", tmp_path, name="x")
    assert info.value.status_code == 401
    assert str(info.value) == "enrollment token rejected: unknown"


async def test_bad_fingerprint_pin(control_plane: ControlPlane, tmp_path: Path) -> None:
    issued = await control_plane.token()
    wrong = "0" * 64
    with pytest.raises(EnrollmentError, match="CA fingerprint mismatch"):
        await register(control_plane.url, issued["token"], tmp_path, name="x", ca_fingerprint=wrong)
    assert not Identity.exists(tmp_path)
    # The pin was checked before the token was sent: the token still enrolls the edge.
    right = issued["ca_fingerprint"]
    identity = await register(control_plane.url, issued["token"], tmp_path, name="x", ca_fingerprint=right)
    assert Identity.exists(tmp_path) and identity.edge_id


async def test_malformed_csr(control_plane: ControlPlane, tmp_path: Path) -> None:
    issued = await control_plane.token()
    response = await control_plane.http.post(
        "/v1/edges/enroll",
        json={
            "token": issued["token"],
            "csr_pem": "-----BEGIN CERTIFICATE REQUEST-----\nnope\n",
            "name": "x",
        },
    )
    assert response.status_code == 400
    body = response.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert "csr_pem" in body["error"]["message"]
    # The malformed request did not spend the token.
    identity = await register(control_plane.url, issued["token"], tmp_path, name="x")
    assert identity.environment_id == ENV_ID
