"""``peer_certificate`` against the real uvicorn and Starlette installed: if an upgrade stops
handing us the TLS client certificate, these fail (and the WebSocket tunnel would silently fall
back to proof of possession). Real sockets on loopback, a server certificate and an edge client
certificate from a throwaway CA, each of uvicorn's WebSocket implementations that is installed."""

from __future__ import annotations

import asyncio
import importlib.util
import socket
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import uvicorn
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket
from websockets.asyncio.client import connect

from control_plane.enroll import CertificateAuthority
from control_plane.enroll.http_tls import prepare_http_tls
from control_plane.tunnel.tls_peer import peer_certificate
from edge_agent.identity import generate_key_and_csr

_WS_IMPLS: list[object] = [
    "auto",
    "websockets-sansio",
    pytest.param(
        "websockets", marks=pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore:.*deprecated")
    ),
]
if importlib.util.find_spec("wsproto") is not None:
    _WS_IMPLS.append("wsproto")


class Recorder:
    def __init__(self) -> None:
        self.seen: list[bytes | None] = []

    async def endpoint(self, websocket: WebSocket) -> None:
        self.seen.append(peer_certificate(websocket))
        await websocket.accept()
        await websocket.send_text("ok")
        await websocket.close()


@asynccontextmanager
async def serve(app: Starlette, ws: str, **tls: object) -> AsyncIterator[int]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, ws=ws, lifespan="off", log_config=None, access_log=False, **tls)  # type: ignore[arg-type]
    )
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        yield port
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
        sock.close()


@pytest.fixture
def pki(tmp_path: Path) -> tuple[CertificateAuthority, Path, Path, bytes]:
    """A CA, an edge client certificate from it (files) and that certificate's DER."""
    ca = CertificateAuthority.load_or_create(tmp_path / "ca")
    key_pem, csr_pem = generate_key_and_csr()
    cert = ca.sign_edge_csr(csr_pem, "edge_tls", "env_tls")
    cert_file, key_file = tmp_path / "edge.crt", tmp_path / "edge.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key_pem)
    key_file.chmod(0o600)
    return ca, cert_file, key_file, cert.public_bytes(serialization.Encoding.DER)


@pytest.mark.parametrize("ws", _WS_IMPLS)
async def test_uvicorn_hands_over_the_verified_client_certificate(
    ws: str, pki: tuple[CertificateAuthority, Path, Path, bytes], tmp_path: Path
) -> None:
    ca, cert_file, key_file, der = pki
    tls = prepare_http_tls(ca, tmp_path / "data", hostnames=["localhost"], ips=["127.0.0.1"])
    recorder = Recorder()
    app = Starlette(routes=[WebSocketRoute("/ws", recorder.endpoint)])
    async with serve(app, ws, **tls.uvicorn_options()) as port:
        with_cert = ssl.create_default_context(cadata=ca.ca_cert_pem.decode())
        with_cert.load_cert_chain(cert_file, key_file)
        async with connect(f"wss://127.0.0.1:{port}/ws", ssl=with_cert, proxy=None) as conn:
            assert await conn.recv() == "ok"
        without_cert = ssl.create_default_context(cadata=ca.ca_cert_pem.decode())
        async with connect(f"wss://127.0.0.1:{port}/ws", ssl=without_cert, proxy=None) as conn:
            assert await conn.recv() == "ok"
    assert recorder.seen == [der, None]
    assert x509.load_der_x509_certificate(der).subject.rfc4514_string() == "CN=edge_tls"


async def test_plain_http_has_no_peer_certificate() -> None:
    recorder = Recorder()
    app = Starlette(routes=[WebSocketRoute("/ws", recorder.endpoint)])
    async with serve(app, "auto") as port, connect(f"ws://127.0.0.1:{port}/ws", proxy=None) as conn:
        assert await conn.recv() == "ok"
    assert recorder.seen == [None]
