"""The real API with a vault, in uvicorn on 127.0.0.1 (port 0), over a real SqliteStore in
tmp_path, driven by the official ``anthropic`` SDK. Every response body the SDK receives is kept
(``VaultApi.bodies``) so tests can prove that no secret ever comes back. Shared by the vault and
the repository (git) API tests: ``running_vault_api``."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import anthropic
import httpx2
import uvicorn

from control_plane.api.app import ApiServices, create_app
from control_plane.api.auth import create_api_key
from control_plane.enroll import CertificateAuthority, EnrollmentService
from control_plane.outbound import OutboundGuard
from control_plane.store.sqlite import SqliteStore
from control_plane.tunnel import EdgeGateway, EdgeRegistry
from control_plane.vault import CapabilitySigner, FileKek, Keyring, Vault
from tests.support import eventually
from tests.support.api_app import utcnow
from tests.support.vault import TokenEndpoint, token_endpoint


@dataclass
class VaultApi:
    url: str
    store: SqliteStore
    db_path: Path
    vault: Vault
    client: anthropic.AsyncAnthropic
    endpoint: TokenEndpoint
    bodies: list[bytes] = field(default_factory=list)  # every response body, raw

    def db_bytes(self) -> bytes:
        """The raw bytes of the database and its WAL, as a thief copying the files would get them."""
        parts = [self.db_path, self.db_path.with_name(self.db_path.name + "-wal")]
        return b"".join(p.read_bytes() for p in parts if p.exists())


# The local token endpoint listens on loopback, which the outbound rules refuse by default: the
# API is run with loopback allowed, as an operator would with outbound_allow_networks. Tests of
# the default rules pass ``allow_networks=()``.
LOOPBACK = ("127.0.0.0/8",)


@contextlib.asynccontextmanager
async def running_vault_api(
    tmp_path: Path, *, allow_networks: tuple[str, ...] = LOOPBACK
) -> AsyncIterator[VaultApi]:
    db_path = tmp_path / "control.db"
    outbound = OutboundGuard(allow_networks)
    async with (
        SqliteStore(db_path) as store,
        token_endpoint() as endpoint,
        outbound.http_client(timeout_s=15) as oauth_http,
    ):
        key, _ = await create_api_key(store, "test", utcnow())
        registry = EdgeRegistry()
        vault = Vault.create(
            store,
            Keyring(FileKek.load_or_create(tmp_path / "vault.kek")),
            CapabilitySigner.load_or_create(tmp_path / "vault-capability.key"),
            oauth_http,
            utcnow,
            outbound=outbound,
        )
        services = ApiServices(
            store=store,
            enrollment=EnrollmentService(
                store, CertificateAuthority.load_or_create(tmp_path / "ca"), clock=utcnow
            ),
            registry=registry,
            gateway=EdgeGateway(registry),
            clock=utcnow,
            tunnel_address=None,
            vault=vault,
            outbound=outbound,
        )
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        server = uvicorn.Server(
            uvicorn.Config(
                create_app(services),
                lifespan="off",
                log_level="warning",
                access_log=False,
                timeout_graceful_shutdown=2,
            )
        )
        task = asyncio.create_task(server.serve(sockets=[sock]))
        bodies: list[bytes] = []

        async def keep_body(response: httpx2.Response) -> None:
            bodies.append(await response.aread())

        try:
            await eventually(lambda: server.started or task.done())
            if task.done():
                task.result()
            url = f"http://127.0.0.1:{port}"
            sdk_http = httpx2.AsyncClient(event_hooks={"response": [keep_body]}, timeout=20)
            client = anthropic.AsyncAnthropic(base_url=url, api_key=key, max_retries=0, http_client=sdk_http)
            async with client:
                yield VaultApi(url, store, db_path, vault, client, endpoint, bodies)
        finally:
            server.should_exit = True
            await asyncio.wait_for(task, timeout=10)
            sock.close()
