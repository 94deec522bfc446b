"""``file`` session resources through the official SDK, every reply parsed strictly: at create and
with ``sessions.resources.add``, listed, retrieved, deleted; mount paths checked."""

from __future__ import annotations

import anthropic
import pytest
from anthropic.types.beta.sessions.beta_managed_agents_file_resource import BetaManagedAgentsFileResource

from tests.support.api_app import Api, assert_complete


async def test_file_resources_at_create_and_added(api: Api) -> None:
    files = api.client.beta.files
    first = await files.upload(file=("a.csv", b"x,y\n1,2\n", "text/csv"))
    second = await files.upload(file=("b.txt", b"hello", "text/plain"))
    agent = await api.agent()
    env_id = await api.environment()
    session = await api.client.beta.sessions.create(
        agent=agent.id, environment_id=env_id, resources=[{"type": "file", "file_id": first.id}]
    )
    (made,) = session.resources
    assert isinstance(made, BetaManagedAgentsFileResource)
    assert_complete(made)
    assert (made.file_id, made.mount_path) == (first.id, f"/mnt/session/uploads/{first.id}")
    resources = api.client.beta.sessions.resources
    added = await resources.add(
        session.id, type="file", file_id=second.id, mount_path="/mnt/session/in/b.txt"
    )
    assert isinstance(added, BetaManagedAgentsFileResource)
    assert_complete(added)
    assert added.mount_path == "/mnt/session/in/b.txt"
    listed = [r async for r in resources.list(session.id)]
    assert [r.id for r in listed] == [made.id, added.id]
    got = await resources.retrieve(added.id, session_id=session.id)
    assert got == added
    with pytest.raises(anthropic.BadRequestError, match="authorization_token"):
        await resources.update(added.id, session_id=session.id, authorization_token="tok")
    deleted = await resources.delete(added.id, session_id=session.id)
    assert (deleted.id, deleted.type) == (added.id, "session_resource_deleted")
    assert [r.id async for r in resources.list(session.id)] == [made.id]


@pytest.mark.parametrize(
    "mount_path",
    [
        "/etc/passwd",
        "/mnt/session/../etc",
        "/mnt/session/a/../b",
        "relative",
        "/mnt/session",
        "/mnt/memory/x",
    ],
)
async def test_bad_mount_paths_are_refused(api: Api, mount_path: str) -> None:
    meta = await api.client.beta.files.upload(file=("a.txt", b"a", "text/plain"))
    session = await api.client.beta.sessions.create(
        agent=(await api.agent()).id, environment_id=await api.environment()
    )
    with pytest.raises(anthropic.BadRequestError, match="mount_path"):
        await api.client.beta.sessions.resources.add(
            session.id, type="file", file_id=meta.id, mount_path=mount_path
        )


async def test_colliding_mount_paths_are_refused(api: Api) -> None:
    meta = await api.client.beta.files.upload(file=("a.txt", b"a", "text/plain"))
    with pytest.raises(anthropic.BadRequestError, match="collides"):
        await api.client.beta.sessions.create(
            agent=(await api.agent()).id,
            environment_id=await api.environment(),
            resources=[
                {"type": "file", "file_id": meta.id, "mount_path": "/mnt/session/x"},
                {"type": "file", "file_id": meta.id, "mount_path": "/mnt/session/x/y"},
            ],
        )
    session = await api.client.beta.sessions.create(
        agent=(await api.agent()).id, environment_id=await api.environment()
    )
    with pytest.raises(anthropic.NotFoundError):
        await api.client.beta.sessions.resources.add(session.id, type="file", file_id="file_missing")
