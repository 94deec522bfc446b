"""The control plane's outbound guard with real sockets on loopback: the pinned client dials the
checked address while TLS still verifies (and SNI and ``Host`` still name) the URL's host; the
config key is validated."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from control_plane.config import ControlPlaneConfig
from control_plane.enroll import CertificateAuthority
from control_plane.errors import InvalidRequest
from control_plane.outbound import OutboundGuard, OutboundRefused


@dataclass
class TlsServer:
    port: int
    ca_file: Path
    sni: list[str | None] = field(default_factory=list)
    heads: list[bytes] = field(default_factory=list)


@pytest.fixture
async def tls_server(tmp_path: Path) -> AsyncIterator[TlsServer]:
    ca = CertificateAuthority.load_or_create(tmp_path / "ca")
    key_pem, cert_pem = ca.issue_server_cert(["token.test"], [])
    (tmp_path / "server.pem").write_bytes(cert_pem + key_pem)
    (tmp_path / "ca.pem").write_bytes(ca.ca_cert_pem)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "server.pem")
    seen = TlsServer(0, tmp_path / "ca.pem")
    context.sni_callback = lambda sock, name, ctx: seen.sni.append(name)  # type: ignore[assignment,func-returns-value]

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            seen.heads.append(await reader.readuntil(b"\r\n\r\n"))
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=context)
    seen.port = server.sockets[0].getsockname()[1]
    try:
        yield seen
    finally:
        server.close()
        await server.wait_closed()


async def _to_loopback(host: str, port: int) -> Sequence[str]:
    return ["127.0.0.1"]


async def test_the_pinned_client_verifies_the_name_not_the_address(
    tls_server: TlsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_server.ca_file))
    # The server is on loopback: allowed here as an operator would with outbound_allow_networks.
    guard = OutboundGuard(["127.0.0.0/8"], resolver=_to_loopback)
    async with guard.http_client(timeout_s=10) as client:
        response = await client.post(f"https://token.test:{tls_server.port}/token")
        assert (response.status_code, response.text) == (200, "ok")
        assert tls_server.sni == ["token.test"]
        assert f"host: token.test:{tls_server.port}".encode() in tls_server.heads[0].lower()
        # Another name pinned to the same address: the certificate does not match it.
        with pytest.raises(httpx.ConnectError, match=r"CERTIFICATE_VERIFY_FAILED|match"):
            await client.get(f"https://other.test:{tls_server.port}/")
    assert len(tls_server.heads) == 1


async def test_without_the_allow_list_nothing_is_dialled(tls_server: TlsServer) -> None:
    guard = OutboundGuard(resolver=_to_loopback)
    async with guard.http_client(timeout_s=10) as client:
        with pytest.raises(OutboundRefused) as caught:
            await client.get(f"https://token.test:{tls_server.port}/")
    assert caught.value.rule == "outbound.loopback"
    assert "outbound_allow_networks" in caught.value.message
    assert tls_server.sni == [] and tls_server.heads == []


def test_check_url_names_the_param_and_the_rule() -> None:
    guard = OutboundGuard()
    with pytest.raises(InvalidRequest) as caught:
        guard.check_url("https://[::ffff:169.254.169.254]/x", param="auth.refresh.token_endpoint")
    assert caught.value.param == "auth.refresh.token_endpoint"
    assert "rule: outbound.metadata" in str(caught.value)
    guard.check_url("https://auth.example.com/token", param="p")  # names are resolved at the dial
    OutboundGuard(["169.254.169.254/32"]).check_url("http://169.254.169.254/", param="p")


def test_config_key() -> None:
    assert ControlPlaneConfig().outbound_allow_networks == ()
    config = ControlPlaneConfig.model_validate({"outbound_allow_networks": ["10.20.0.0/16", "fd00::/8"]})
    assert config.outbound_allow_networks == ("10.20.0.0/16", "fd00::/8")
    with pytest.raises(ValidationError, match="CIDR"):
        ControlPlaneConfig.model_validate({"outbound_allow_networks": ["10.20.0.0/33"]})
