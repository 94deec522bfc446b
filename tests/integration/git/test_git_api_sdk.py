"""Session repositories through the official ``anthropic`` SDK, against the real API with a vault
over a real SQLite store: the token is write-only (never in a response), sealed at rest (not in the
database file), rotatable, and purged when the session is archived."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import httpx
import httpx2
import pytest
import uvicorn

from control_plane.api.app import ApiServices, create_app
from control_plane.api.auth import create_api_key
from control_plane.enroll import CertificateAuthority, EnrollmentService
from control_plane.sessions.repositories import RESOURCE_KIND
from control_plane.sessions.repository_tokens import RepositoryTokens, list_repositories
from control_plane.store.sqlite import SqliteStore
from control_plane.tunnel import EdgeGateway, EdgeRegistry
from control_plane.vault import CapabilitySigner, FileKek, Keyring, Vault
from tests.integration.api._support import utcnow, wait_for

TOKEN = "canary-sdk-token-77e1c0"
ROTATED = "canary-sdk-rotated-2a90"
URL = "https://git.internal:8443/org/app.git"


@dataclass
class RepoApi:
    store: SqliteStore
    db_path: Path
    vault: Vault
    client: anthropic.AsyncAnthropic
    bodies: list[bytes] = field(default_factory=list)

    def db_bytes(self) -> bytes:
        parts = [self.db_path, self.db_path.with_name(self.db_path.name + "-wal")]
        return b"".join(p.read_bytes() for p in parts if p.exists())

    async def session(self, **params: Any) -> Any:
        env = await self.client.beta.environments.create(name="git", config={"type": "self_hosted"})
        agent = await self.client.beta.agents.create(name="coder", model="claude-opus-4-8")
        return await self.client.beta.sessions.create(agent=agent.id, environment_id=env.id, **params)


@pytest.fixture
async def repo_api(tmp_path: Path) -> AsyncIterator[RepoApi]:
    db_path = tmp_path / "control.db"
    async with SqliteStore(db_path) as store, httpx.AsyncClient() as oauth_http:
        key, _ = await create_api_key(store, "test", utcnow())
        registry = EdgeRegistry()
        vault = Vault.create(
            store,
            Keyring(FileKek.load_or_create(tmp_path / "vault.kek")),
            CapabilitySigner.load_or_create(tmp_path / "capability.key"),
            oauth_http,
            utcnow,
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
        )
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        server = uvicorn.Server(
            uvicorn.Config(create_app(services), lifespan="off", log_level="warning", access_log=False)
        )
        task = asyncio.create_task(server.serve(sockets=[sock]))
        bodies: list[bytes] = []

        async def keep(response: httpx2.Response) -> None:
            bodies.append(await response.aread())

        try:
            await wait_for(lambda: server.started or task.done())
            if task.done():
                task.result()
            url = f"http://127.0.0.1:{sock.getsockname()[1]}"
            http = httpx2.AsyncClient(event_hooks={"response": [keep]}, timeout=20)
            client = anthropic.AsyncAnthropic(base_url=url, api_key=key, max_retries=0, http_client=http)
            async with client:
                yield RepoApi(store, db_path, vault, client, bodies)
        finally:
            server.should_exit = True
            await asyncio.wait_for(task, timeout=10)
            sock.close()


async def test_create_list_retrieve_rotate_delete(repo_api: RepoApi) -> None:
    session = await repo_api.session(
        resources=[
            {
                "type": "github_repository",
                "url": URL,
                "authorization_token": TOKEN,
                "checkout": {"type": "branch", "name": "main"},
            },
            {
                "type": "github_repository",
                "url": "https://github.com/org/lib",
                "mount_path": "/workspace/vendor/lib",
            },
        ]
    )
    app, lib = session.resources
    assert (app.type, app.url, app.mount_path) == ("github_repository", URL, "/workspace/app")
    assert app.id.startswith("sesrsc_") and app.checkout is not None and app.checkout.name == "main"
    assert (lib.mount_path, lib.checkout) == ("/workspace/vendor/lib", None)
    again = await repo_api.client.beta.sessions.retrieve(session.id)
    assert [r.id for r in again.resources] == [app.id, lib.id]

    resources = repo_api.client.beta.sessions.resources
    listed = [r async for r in resources.list(session.id)]
    assert [r.id for r in listed] == [app.id, lib.id]
    got = await resources.retrieve(app.id, session_id=session.id)
    assert got.url == URL and got.created_at == app.created_at

    # Sealed at rest, bound to the row; opened only for the edge's spec.
    tokens = RepositoryTokens(repo_api.vault.service.keyring)
    stored = {r.id: r for r in await list_repositories(repo_api.store, session.id)}
    assert stored[app.id].body["sealed"] is not None and stored[lib.id].body["sealed"] is None
    assert await tokens.open(stored[app.id]) == TOKEN

    updated = await resources.update(app.id, session_id=session.id, authorization_token=ROTATED)
    assert updated.id == app.id and updated.updated_at >= app.updated_at
    stored = {r.id: r for r in await list_repositories(repo_api.store, session.id)}
    assert await tokens.open(stored[app.id]) == ROTATED
    spec = await tokens.spec_repositories(stored.values())
    assert [(r.id, r.checkout_kind, r.checkout_ref, r.token) for r in spec] == [
        (app.id, "branch", "main", ROTATED),
        (lib.id, "", "", ""),
    ]

    deleted = await resources.delete(lib.id, session_id=session.id)
    assert (deleted.id, deleted.type) == (lib.id, "session_resource_deleted")
    assert [r.id for r in (await repo_api.client.beta.sessions.retrieve(session.id)).resources] == [app.id]
    with pytest.raises(anthropic.NotFoundError):
        await resources.retrieve(lib.id, session_id=session.id)

    for secret in (TOKEN, ROTATED):
        assert all(secret.encode() not in body for body in repo_api.bodies)
        assert secret.encode() not in repo_api.db_bytes()


async def test_refusals(repo_api: RepoApi) -> None:
    resources = repo_api.client.beta.sessions.resources
    with pytest.raises(anthropic.BadRequestError, match=r"resources\[0\]\.url") as info:
        await repo_api.session(
            resources=[{"type": "github_repository", "url": f"https://x:{TOKEN}@git.internal/a.git"}]
        )
    assert TOKEN not in str(info.value)
    with pytest.raises(anthropic.BadRequestError, match="not supported"):
        await repo_api.session(resources=[{"type": "file", "file_id": "file_1"}])
    session = await repo_api.session(resources=[{"type": "github_repository", "url": URL}])
    (app,) = session.resources
    with pytest.raises(anthropic.BadRequestError, match="file"):
        await resources.add(session.id, type="file", file_id="file_1")
    with pytest.raises(anthropic.BadRequestError, match="authorization_token"):
        await resources.update(app.id, session_id=session.id, authorization_token="has spaces")
    other = await repo_api.session()
    with pytest.raises(anthropic.NotFoundError):
        await resources.retrieve(app.id, session_id=other.id)
    with pytest.raises(anthropic.NotFoundError):
        await resources.delete(app.id, session_id=other.id)


async def test_archive_purges_tokens_and_delete_removes_resources(repo_api: RepoApi) -> None:
    resource = {"type": "github_repository", "url": URL, "authorization_token": TOKEN}
    archived = await repo_api.session(resources=[resource])
    await repo_api.client.beta.sessions.archive(archived.id)
    (row,) = await list_repositories(repo_api.store, archived.id)
    assert row.body["sealed"] is None
    with pytest.raises(anthropic.BadRequestError, match="archived"):
        await repo_api.client.beta.sessions.resources.update(
            row.id, session_id=archived.id, authorization_token=ROTATED
        )
    deleted = await repo_api.session(resources=[resource])
    await repo_api.client.beta.sessions.delete(deleted.id)
    page = await repo_api.store.list_resources(RESOURCE_KIND, filters={"session_id": deleted.id})
    assert page.items == []
