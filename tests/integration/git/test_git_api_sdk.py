"""Session repositories through the official ``anthropic`` SDK, against the real API with a vault
over a real SQLite store: the token is write-only (never in a response), sealed at rest (not in the
database file), rotatable, and purged when the session is archived."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from control_plane.sessions.repositories import RESOURCE_KIND
from control_plane.sessions.repository_tokens import RepositoryTokens, list_repositories
from tests.support.vault_app import VaultApi, running_vault_api

TOKEN = "canary-sdk-token-77e1c0"
ROTATED = "canary-sdk-rotated-2a90"
URL = "https://git.internal:8443/org/app.git"


@pytest.fixture
async def repo_api(tmp_path: Path) -> AsyncIterator[VaultApi]:
    async with running_vault_api(tmp_path) as api:
        yield api


async def new_session(api: VaultApi, **params: Any) -> Any:
    """A session (with a fresh environment and agent) to attach repositories to."""
    env = await api.client.beta.environments.create(name="git", config={"type": "self_hosted"})
    agent = await api.client.beta.agents.create(name="coder", model="claude-opus-4-8")
    return await api.client.beta.sessions.create(agent=agent.id, environment_id=env.id, **params)


async def test_create_list_retrieve_rotate_delete(repo_api: VaultApi) -> None:
    session = await new_session(
        repo_api,
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
        ],
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


async def test_refusals(repo_api: VaultApi) -> None:
    resources = repo_api.client.beta.sessions.resources
    with pytest.raises(anthropic.BadRequestError, match=r"resources\[0\]\.url") as info:
        await new_session(
            repo_api,
            resources=[{"type": "github_repository", "url": f"https://x:{TOKEN}@git.internal/a.git"}],
        )
    assert TOKEN not in str(info.value)
    with pytest.raises(anthropic.NotFoundError, match="file_1"):  # file resources are served now
        await new_session(repo_api, resources=[{"type": "file", "file_id": "file_1"}])
    session = await new_session(repo_api, resources=[{"type": "github_repository", "url": URL}])
    (app,) = session.resources
    with pytest.raises(anthropic.NotFoundError, match="file_1"):
        await resources.add(session.id, type="file", file_id="file_1")
    with pytest.raises(anthropic.BadRequestError, match="authorization_token"):
        await resources.update(app.id, session_id=session.id, authorization_token="has spaces")
    other = await new_session(
        repo_api,
    )
    with pytest.raises(anthropic.NotFoundError):
        await resources.retrieve(app.id, session_id=other.id)
    with pytest.raises(anthropic.NotFoundError):
        await resources.delete(app.id, session_id=other.id)


async def test_archive_purges_tokens_and_delete_removes_resources(repo_api: VaultApi) -> None:
    resource = {"type": "github_repository", "url": URL, "authorization_token": TOKEN}
    archived = await new_session(repo_api, resources=[resource])
    await repo_api.client.beta.sessions.archive(archived.id)
    (row,) = await list_repositories(repo_api.store, archived.id)
    assert row.body["sealed"] is None
    with pytest.raises(anthropic.BadRequestError, match="archived"):
        await repo_api.client.beta.sessions.resources.update(
            row.id, session_id=archived.id, authorization_token=ROTATED
        )
    deleted = await new_session(repo_api, resources=[resource])
    await repo_api.client.beta.sessions.delete(deleted.id)
    page = await repo_api.store.list_resources(RESOURCE_KIND, filters={"session_id": deleted.id})
    assert page.items == []
