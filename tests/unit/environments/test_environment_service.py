"""The environment service on the in-memory store, without HTTP: create (``self_hosted`` only,
networking), the update's patch rules, archived environments, what a scoped viewer sees and may do
(not found before forbidden), listings, the edge counts, and :func:`get_environment`, the check
sessions use. The API tests drive the same service through the SDK."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from control_plane.edge_counts import EdgeCounts
from control_plane.environments import Viewer
from control_plane.environments.commands import CreateEnvironment, EnvironmentQuery, UpdateEnvironment
from control_plane.environments.service import EnvironmentService, get_environment
from control_plane.errors import (
    EnvironmentArchived,
    EnvironmentNotFound,
    InvalidRequest,
    PermissionDenied,
)
from control_plane.store import MemoryStore
from control_plane.store.base import EdgeRecord

T0 = datetime(2026, 5, 1, tzinfo=UTC)
EVERYONE = Viewer()


class Clock:
    """A second per reading, so every write has its own time."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


class Stack:
    def __init__(self) -> None:
        self.store = MemoryStore()
        self.here: set[str] = set()  # the edges with a tunnel up to "this process"
        self.service = EnvironmentService(self.store, Clock(), connected_here=lambda: self.here)

    async def create(
        self, name: str = "pool", description: str | None = None, metadata: dict[str, str] | None = None
    ) -> str:
        command = CreateEnvironment(name, description, metadata=metadata or {})
        return (await self.service.create(command, EVERYONE)).environment.id

    async def edge(self, edge_id: str, environment_id: str) -> None:
        await self.store.create_edge(
            EdgeRecord(
                id=edge_id,
                environment_id=environment_id,
                name=edge_id,
                cert_serial="01",
                cert_fingerprint=edge_id.ljust(64, "0"),
                created_at=T0,
                cert_not_after=T0 + timedelta(days=365),
            )
        )


async def test_create_serves_self_hosted_only() -> None:
    stack = Stack()
    view = await stack.service.create(CreateEnvironment("pool", metadata={"a": "1"}), EVERYONE)
    body = view.environment.body
    assert view.environment.id.startswith("env_") and view.edges == EdgeCounts()
    assert body["config"] == {"type": "self_hosted", "networking": {"type": "none"}}
    assert body["metadata"] == {"a": "1"}
    limited = {"type": "self_hosted", "networking": {"type": "limited", "allowed_hosts": ["a.io", "a.io"]}}
    made = await stack.service.create(CreateEnvironment("egress", config=limited), EVERYONE)
    assert made.environment.body["config"]["networking"] == {"type": "limited", "allowed_hosts": ["a.io"]}
    for config, param in (
        ({"type": "cloud"}, "config.type"),
        ({"type": "other"}, "config.type"),
        ({"type": "self_hosted", "packages": {}}, "config"),
        ({"type": "self_hosted", "networking": {"type": "open"}}, "config.networking.type"),
    ):
        with pytest.raises(InvalidRequest) as refused:
            await stack.service.create(CreateEnvironment("bad", config=config), EVERYONE)
        assert refused.value.param == param
    page = await stack.service.list_environments(EnvironmentQuery(include_archived=True), EVERYONE)
    assert len(page.items) == 2  # the refusals wrote nothing


async def test_update_patches_and_an_unchanged_body_writes_nothing() -> None:
    stack = Stack()
    env = await stack.create(description="us-east", metadata={"a": "1", "b": "2"})
    kept = await stack.service.update(env, UpdateEnvironment(name="pool-2"), EVERYONE)
    assert (kept.environment.body["name"], kept.environment.body["description"]) == ("pool-2", "us-east")
    changed = await stack.service.update(
        env, UpdateEnvironment(description=None, metadata={"a": None, "b": "", "c": "3"}), EVERYONE
    )
    body = changed.environment.body
    assert body["description"] is None and body["metadata"] == {"c": "3"}  # "" deletes too
    same = await stack.service.update(env, UpdateEnvironment(name="pool-2", scope=None), EVERYONE)
    assert same.environment.version == changed.environment.version


async def test_an_archived_environment_takes_no_change_nor_session() -> None:
    stack = Stack()
    env = await stack.create()
    archived = await stack.service.archive(env, EVERYONE)
    assert archived.environment.archived_at is not None
    with pytest.raises(EnvironmentArchived, match="archived and cannot be updated") as refused:
        await stack.service.update(env, UpdateEnvironment(name="again"), EVERYONE)
    assert refused.value.error_code == "environment_archived"
    assert (await get_environment(stack.store, env)).id == env  # readable
    with pytest.raises(EnvironmentArchived, match=r"is archived$"):
        await get_environment(stack.store, env, EVERYONE, usable=True)


async def test_a_scoped_viewer_sees_its_own_and_changes_none() -> None:
    stack = Stack()
    mine, theirs = await stack.create("mine"), await stack.create("theirs")
    scoped = Viewer(frozenset({mine}))
    assert (await stack.service.get(mine, scoped)).environment.id == mine
    for call in (
        stack.service.get(theirs, scoped),
        stack.service.update(theirs, UpdateEnvironment(name="x"), scoped),
        stack.service.archive(theirs, scoped),
        stack.service.delete(theirs, scoped),
    ):
        with pytest.raises(EnvironmentNotFound) as missing:  # as if unknown, before any permission
            await call
        assert missing.value.error_code == "environment_not_found"
    for call in (
        stack.service.update(mine, UpdateEnvironment(name="x"), scoped),
        stack.service.archive(mine, scoped),
        stack.service.delete(mine, scoped),
    ):
        with pytest.raises(PermissionDenied, match="not limited to environments"):
            await call
    with pytest.raises(PermissionDenied, match="creating environments"):
        await stack.service.create(CreateEnvironment("new"), scoped)
    assert (await stack.service.get(mine, EVERYONE)).environment.body["name"] == "mine"  # untouched


async def test_listings() -> None:
    stack = Stack()
    first, second, third = await stack.create("1"), await stack.create("2"), await stack.create("3")
    await stack.service.archive(second, EVERYONE)
    page = await stack.service.list_environments(EnvironmentQuery(limit=1), EVERYONE)
    assert [v.environment.id for v in page.items] == [third] and page.next_cursor is not None
    rest = await stack.service.list_environments(EnvironmentQuery(cursor=page.next_cursor), EVERYONE)
    assert [v.environment.id for v in rest.items] == [first]
    scoped = Viewer(frozenset({first, second, "env_deleted_since"}))
    own = await stack.service.list_environments(EnvironmentQuery(include_archived=True), scoped)
    assert [v.environment.id for v in own.items] == [second, first] and own.next_cursor is None
    live = await stack.service.list_environments(EnvironmentQuery(), scoped)
    assert [v.environment.id for v in live.items] == [first]


async def test_views_count_the_edges() -> None:
    stack = Stack()
    env, other = await stack.create("a"), await stack.create("b")
    await stack.edge("e1", env)
    await stack.edge("e2", env)
    await stack.edge("e3", other)
    stack.here = {"e1", "e3"}
    assert (await stack.service.get(env, EVERYONE)).edges == EdgeCounts(enrolled=2, connected=1)
    await stack.store.revoke_edge("e3", T0)
    listed = await stack.service.list_environments(EnvironmentQuery(), EVERYONE)
    assert {v.environment.id: v.edges for v in listed.items} == {env: EdgeCounts(2, 1), other: EdgeCounts()}


async def test_delete() -> None:
    stack = Stack()
    env = await stack.create()
    await stack.service.delete(env, EVERYONE)
    with pytest.raises(EnvironmentNotFound):
        await stack.service.get(env, EVERYONE)
    with pytest.raises(EnvironmentNotFound):
        await stack.service.delete(env, EVERYONE)
