"""edge_agent.enroll.register against a scripted control plane (httpx.MockTransport)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives import serialization

from control_plane.enroll import CertificateAuthority
from edge_agent.enroll import EnrollmentError, normalize_fingerprint, register
from edge_agent.identity import Identity, generate_key_and_csr

from .conftest import FakeClock

URL = "http://cp.test"
TOKEN = "oet_unit-test-token-value"
Handler = Callable[[httpx.Request], httpx.Response]


def signing_handler(ca: CertificateAuthority, seen: list[dict[str, str]], **extra: object) -> Handler:
    """A control plane that signs whatever CSR it gets."""

    def handle(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/edges/enroll"
        body = json.loads(request.content)
        seen.append(body)
        cert = ca.sign_edge_csr(body["csr_pem"].encode(), "edge_1", "env_1")
        return httpx.Response(
            200,
            json={
                "edge_id": "edge_1",
                "environment_id": "env_1",
                "certificate_pem": cert.public_bytes(serialization.Encoding.PEM).decode(),
                "ca_certificate_pem": ca.ca_cert_pem.decode(),
                **extra,
            },
        )

    return handle


def client(handler: Handler) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


async def test_register_saves_identity(
    ca: CertificateAuthority, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[dict[str, str]] = []
    async with client(signing_handler(ca, seen)) as http:
        with caplog.at_level(logging.DEBUG):
            identity = await register(
                URL + "/",
                TOKEN,
                tmp_path,
                name="box",
                ca_fingerprint=ca.fingerprint_sha256.upper(),
                tunnel_address="cp.test:7443",
                http_client=http,
            )
    assert seen[0]["token"] == TOKEN and seen[0]["name"] == "box"
    assert "PRIVATE" not in seen[0]["csr_pem"]
    assert identity.edge_id == "edge_1"
    assert identity.control_plane_url == URL
    assert identity.tunnel_address == "cp.test:7443"
    assert Identity.load(tmp_path) == identity
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes()
    assert TOKEN not in caplog.text


async def test_tunnel_address_from_the_control_plane_wins(ca: CertificateAuthority, tmp_path: Path) -> None:
    async with client(signing_handler(ca, [], tunnel_address="tunnel.cp:443")) as http:
        identity = await register(URL, TOKEN, tmp_path, name="b", tunnel_address="mine:1", http_client=http)
    assert identity.tunnel_address == "tunnel.cp:443"


async def test_pin_mismatch_refused_and_nothing_saved(
    ca: CertificateAuthority, tmp_path: Path, clock: FakeClock
) -> None:
    other = CertificateAuthority.load_or_create(tmp_path / "other", clock=clock)
    async with client(signing_handler(ca, [])) as http:
        with pytest.raises(EnrollmentError, match="CA fingerprint mismatch"):
            await register(
                URL,
                TOKEN,
                tmp_path / "state",
                name="b",
                ca_fingerprint=other.fingerprint_sha256,
                http_client=http,
            )
    assert not Identity.exists(tmp_path / "state")


async def test_bad_pin_format_refused_before_any_request(tmp_path: Path) -> None:
    seen: list[httpx.Request] = []
    async with client(lambda r: seen.append(r) or httpx.Response(500)) as http:
        with pytest.raises(EnrollmentError, match="64 hex"):
            await register(URL, TOKEN, tmp_path, name="b", ca_fingerprint="abc", http_client=http)
    assert seen == []


def test_normalize_fingerprint() -> None:
    hex64 = "ab" * 32
    assert normalize_fingerprint(hex64.upper()) == hex64
    assert normalize_fingerprint("sha256:" + ":".join(["AB"] * 32)) == hex64


async def test_existing_identity_kept_unless_overwrite(ca: CertificateAuthority, tmp_path: Path) -> None:
    seen: list[dict[str, str]] = []
    async with client(signing_handler(ca, seen)) as http:
        first = await register(URL, TOKEN, tmp_path, name="b", http_client=http)
        with pytest.raises(EnrollmentError, match="already holds"):
            await register(URL, TOKEN, tmp_path, name="b", http_client=http)
        assert len(seen) == 1  # the token was not spent
        second = await register(URL, TOKEN, tmp_path, name="b", http_client=http, overwrite=True)
    assert second.key_pem != first.key_pem
    assert Identity.load(tmp_path) == second


async def test_server_error_message_is_passed_on(tmp_path: Path) -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        error = {"type": "authentication_error", "message": "enrollment token rejected: expired"}
        return httpx.Response(401, json={"type": "error", "error": error})

    async with client(handle) as http:
        with pytest.raises(EnrollmentError) as info:
            await register(URL, TOKEN, tmp_path, name="b", http_client=http)
    assert str(info.value) == "enrollment token rejected: expired"
    assert info.value.status_code == 401
    assert info.value.error_type == "authentication_error"


async def test_non_json_error(tmp_path: Path) -> None:
    async with client(lambda r: httpx.Response(502, text="<html>bad gateway</html>")) as http:
        with pytest.raises(EnrollmentError, match="HTTP 502") as info:
            await register(URL, TOKEN, tmp_path, name="b", http_client=http)
    assert info.value.status_code == 502


async def test_unreachable_control_plane(tmp_path: Path) -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    async with client(handle) as http:
        with pytest.raises(EnrollmentError, match="cannot reach") as info:
            await register(URL, TOKEN, tmp_path, name="b", http_client=http)
    assert TOKEN not in str(info.value)


async def test_certificate_for_another_key_refused(ca: CertificateAuthority, tmp_path: Path) -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        _, csr = generate_key_and_csr()  # not the edge's key
        cert = ca.sign_edge_csr(csr, "edge_1", "env_1")
        return httpx.Response(
            200,
            json={
                "edge_id": "edge_1",
                "environment_id": "env_1",
                "certificate_pem": cert.public_bytes(serialization.Encoding.PEM).decode(),
                "ca_certificate_pem": ca.ca_cert_pem.decode(),
            },
        )

    async with client(handle) as http:
        with pytest.raises(EnrollmentError, match="does not belong"):
            await register(URL, TOKEN, tmp_path, name="b", http_client=http)
    assert not Identity.exists(tmp_path)


async def test_incomplete_answer_refused(tmp_path: Path) -> None:
    async with client(lambda r: httpx.Response(200, json={"edge_id": "edge_1"})) as http:
        with pytest.raises(EnrollmentError, match="lacks environment_id"):
            await register(URL, TOKEN, tmp_path, name="b", http_client=http)
