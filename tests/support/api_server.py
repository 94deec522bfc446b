"""The real API in a real uvicorn server on 127.0.0.1 (port 0) over a real SqliteStore and a real
blob store in a directory, driven by the official ``anthropic`` SDK (:func:`serve_api`; the API
tests' ``api`` fixture). The harness is replaced by a :class:`FakeRunner`."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from pathlib import Path

import anthropic
import httpx
import uvicorn

from control_plane.api.app import ApiConfig, ApiServices, create_app
from control_plane.api.auth import create_api_key
from control_plane.blobs import FilesystemBlobStore
from control_plane.bus import EventBus
from control_plane.enroll import CertificateAuthority, EnrollmentService
from control_plane.store.sqlite import SqliteStore
from control_plane.tunnel import EdgeGateway, EdgeRegistry
from control_plane.vault import CapabilitySigner, FileKek, Keyring, Vault
from tests.support import eventually
from tests.support.api_app import MAX_BODY_BYTES, PING_INTERVAL_S, Api, FakeRunner, utcnow

__all__ = ["DEFAULT_CONFIG", "serve_api"]

DEFAULT_CONFIG = ApiConfig(
    max_body_bytes=MAX_BODY_BYTES,
    max_content_body_bytes=MAX_BODY_BYTES,
    stream_ping_interval_s=PING_INTERVAL_S,
)


@contextlib.asynccontextmanager
async def serve_api(
    tmp_path: Path,
    config: ApiConfig = DEFAULT_CONFIG,
    clock: Callable[[], datetime] = utcnow,
    *,
    with_vault: bool = False,
) -> AsyncIterator[Api]:
    """The API over a SqliteStore and a blob store (``<tmp_path>/blobs``), served on a free port.
    ``with_vault``: with a vault (a key file in ``tmp_path``; its token-endpoint client is unused)."""
    async with SqliteStore(tmp_path / "control.db") as store, httpx.AsyncClient() as vault_http:
        key, _ = await create_api_key(store, "test", utcnow())
        runner = FakeRunner(store)
        bus = EventBus()
        ca = CertificateAuthority.load_or_create(tmp_path / "ca")
        registry = EdgeRegistry()
        services = ApiServices(
            store=store,
            enrollment=EnrollmentService(store, ca, clock=utcnow),
            registry=registry,
            gateway=EdgeGateway(registry),
            clock=clock,
            tunnel_address=None,
            bus=bus,
            runner=runner,
            config=config,
            blobs=FilesystemBlobStore(tmp_path / "blobs"),
            vault=_vault(tmp_path, store, vault_http) if with_vault else None,
        )
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        server_config = uvicorn.Config(
            create_app(services),
            lifespan="off",
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=2,
        )
        server = uvicorn.Server(server_config)
        task = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            await eventually(lambda: server.started or task.done())
            if task.done():
                task.result()  # surface a start-up failure
            url = f"http://127.0.0.1:{port}"
            client = anthropic.AsyncAnthropic(base_url=url, api_key=key, max_retries=0, timeout=20)
            headers = {"authorization": f"Bearer {key}", "anthropic-beta": "managed-agents-2026-04-01"}
            async with client, httpx.AsyncClient(base_url=url, headers=headers, timeout=20) as http:
                yield Api(url, key, store, bus, runner, client, http)
        finally:
            server.should_exit = True
            await asyncio.wait_for(task, timeout=10)
            sock.close()


def _vault(tmp_path: Path, store: SqliteStore, http: httpx.AsyncClient) -> Vault:
    keyring = Keyring(FileKek.load_or_create(tmp_path / "vault.kek"))
    signer = CapabilitySigner.load_or_create(tmp_path / "vault-capability.key")
    return Vault.create(store, keyring, signer, http, utcnow)
