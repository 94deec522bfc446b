"""The session service on the in-memory store, without HTTP: create (snapshot, overrides, refusals,
repositories, initial events), views, listing by status, updates and their event, archive, delete,
sending and paging events, and a session's repositories. The API tests drive the same service
through the SDK; these pin its rules where no request is involved."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from control_plane.agents.configuration import CustomToolParams, resolve_model
from control_plane.bus import EventBus, Persisted
from control_plane.errors import (
    Conflict,
    EnvironmentArchived,
    EnvironmentNotFound,
    InvalidRequest,
    NotConfigured,
    NotFound,
    VersionConflict,
)
from control_plane.sessions.agent_snapshot import AgentChange, AgentOverrides
from control_plane.sessions.commands import (
    AgentChoice,
    CreateSession,
    EventQuery,
    SessionQuery,
    UpdateSession,
    Viewer,
)
from control_plane.sessions.events import SessionStatus, new_event_id
from control_plane.sessions.repositories import RESOURCE_KIND
from control_plane.sessions.repository_tokens import RepositoryTokens
from control_plane.sessions.service import SessionService
from control_plane.store import MemoryStore
from control_plane.store.base import NewEvent, Order
from control_plane.vault import FileKek, Keyring

T0 = datetime(2026, 5, 1, tzinfo=UTC)
EVERYONE = Viewer()
REPO = "https://git.example.com/org/app.git"
CUSTOM_TOOL = CustomToolParams.model_validate(
    {
        "type": "custom",
        "name": "lookup",
        "description": "look a word up",
        "input_schema": {"type": "object", "properties": {}},
    }
)


class Clock:
    """A second per reading, so every write has its own time."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


class Runner:
    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.calls: list[tuple[str, str]] = []
        self.existed_at_end: dict[str, bool] = {}

    async def wake(self, session_id: str) -> None:
        self.calls.append(("wake", session_id))

    async def session_ended(self, session_id: str) -> None:
        try:
            await self.store.get_resource("session", session_id)
            self.existed_at_end[session_id] = True
        except NotFound:
            self.existed_at_end[session_id] = False
        self.calls.append(("session_ended", session_id))


class Stack:
    def __init__(self, *, vault: bool = True) -> None:
        self.store = MemoryStore()
        self.bus = EventBus()
        self.runner = Runner(self.store)
        self.clock = Clock()
        tokens = RepositoryTokens(Keyring(FileKek.generate())) if vault else None
        self.service = SessionService(self.store, self.bus, self.runner, self.clock, tokens=tokens)

    async def agent(self, agent_id: str = "agent_1", **body: Any) -> str:
        stored = {
            "name": "coder",
            "model": resolve_model("claude-opus-4-8"),
            "system": "be brief",
            "tools": [],
            "mcp_servers": [],
            "skills": [],
            "metadata": {},
            **body,
        }
        await self.store.create_resource("agent", agent_id, stored, self.clock())
        return agent_id

    async def environment(self, environment_id: str = "env_1") -> str:
        await self.store.create_resource("environment", environment_id, {"name": "pool"}, self.clock())
        return environment_id

    async def create(self, viewer: Viewer = EVERYONE, **fields: Any) -> Any:
        """A session of ``agent_1`` in ``env_1`` (made the first time) unless told otherwise."""
        if "agent" not in fields:
            if not await self.exists("agent", "agent_1"):
                await self.agent("agent_1")
            fields["agent"] = AgentChoice("agent_1")
        if "environment_id" not in fields:
            if not await self.exists("environment", "env_1"):
                await self.environment("env_1")
            fields["environment_id"] = "env_1"
        return await self.service.create(CreateSession(**fields), viewer)

    async def exists(self, kind: str, id: str) -> bool:
        try:
            await self.store.get_resource(kind, id)
        except NotFound:
            return False
        return True

    async def types(self, session_id: str) -> list[str]:
        return [e.type for e in await self.store.get_events(session_id)]


def message(text: str = "hello") -> dict[str, Any]:
    return {"type": "user.message", "content": [{"type": "text", "text": text}]}


# -- create --------------------------------------------------------------------------------------


async def test_create_snapshots_the_agent_appends_initial_events_and_wakes() -> None:
    stack = Stack()
    view = await stack.create(title="t", metadata={"k": "v"}, initial_events=[message()])
    body = view.session.body
    assert body["agent"]["id"] == "agent_1" and body["agent"]["version"] == 1
    assert body["agent"]["system"] == "be brief"
    assert body["agent"]["execution_identity"] == {"type": "service_account"}  # the view's default
    assert (body["title"], body["metadata"], body["status"]) == ("t", {"k": "v"}, "idle")
    assert view.current_status is SessionStatus.IDLE
    assert await stack.types(view.session.id) == ["user.message"]
    assert stack.runner.calls == [("wake", view.session.id)]


async def test_create_without_events_does_not_wake() -> None:
    stack = Stack()
    view = await stack.create()
    assert await stack.types(view.session.id) == []
    assert stack.runner.calls == []


async def test_overrides_and_pinned_version() -> None:
    stack = Stack()
    agent_id = await stack.agent()
    current = await stack.store.get_resource("agent", agent_id)
    await stack.store.update_resource(
        "agent", agent_id, {**current.body, "system": "v2"}, stack.clock(), keep_history=True
    )
    pinned = await stack.create(agent=AgentChoice(agent_id, version=1))
    assert pinned.session.body["agent"]["system"] == "be brief"
    overrides = AgentOverrides(system=None, tools=[CUSTOM_TOOL], model="claude-sonnet-4-6")
    overridden = await stack.create(agent=AgentChoice(agent_id, overrides=overrides))
    snapshot = overridden.session.body["agent"]
    assert snapshot["version"] == 2 and snapshot["system"] is None
    assert snapshot["model"]["id"] == "claude-sonnet-4-6"
    assert [t["name"] for t in snapshot["tools"]] == ["lookup"]
    kept = await stack.create(agent=AgentChoice(agent_id, overrides=AgentOverrides()))
    assert kept.session.body["agent"]["system"] == "v2"  # system not sent: the agent's


async def test_create_refusals_write_nothing() -> None:
    stack = Stack(vault=False)
    env = await stack.environment()
    agent = AgentChoice(await stack.agent())
    with pytest.raises(InvalidRequest, match="budget"):
        await stack.create(agent=agent, environment_id=env, budget={"type": "usd"})
    token_repo = {"type": "github_repository", "url": REPO, "authorization_token": "tok"}
    with pytest.raises(NotConfigured, match="authorization_token needs the vault"):
        await stack.create(agent=agent, environment_id=env, resources=[token_repo])
    with pytest.raises(EnvironmentNotFound) as missing:
        await stack.create(agent=agent, environment_id="env_nope")
    assert missing.value.error_code == "environment_not_found"
    with pytest.raises(EnvironmentNotFound):  # a scoped viewer: another environment is unknown
        await stack.create(Viewer(frozenset({"env_other"})), agent=agent, environment_id=env)
    with pytest.raises(NotFound, match="vault"):
        await stack.create(agent=agent, environment_id=env, vault_ids=["vlt_nope"])
    with pytest.raises(InvalidRequest, match="initial_events"):
        await stack.create(agent=agent, environment_id=env, initial_events=[{"type": "user.interrupt"}])
    await stack.store.archive_resource("agent", agent.id, stack.clock())
    with pytest.raises(InvalidRequest, match="archived"):
        await stack.create(agent=agent, environment_id=env)
    await stack.store.archive_resource("environment", env, stack.clock())
    with pytest.raises(EnvironmentArchived) as archived:
        await stack.create(agent=AgentChoice(await stack.agent("agent_2")), environment_id=env)
    assert archived.value.error_code == "environment_archived"
    assert (await stack.store.list_resources("session")).items == []


async def test_repositories_are_stored_sealed_and_viewed() -> None:
    stack = Stack()
    repos = [
        {"type": "github_repository", "url": REPO, "authorization_token": "secret-token"},
        {"type": "github_repository", "url": "https://git.example.com/org/lib.git"},
    ]
    view = await stack.create(resources=repos)
    assert [r.body["url"] for r in view.repositories] == [REPO, repos[1]["url"]]
    assert view.repositories[0].body["sealed"] and view.repositories[1].body["sealed"] is None
    assert "secret-token" not in str(view.repositories[0].body)


# -- read, list ----------------------------------------------------------------------------------


async def test_a_scoped_viewer_sees_only_its_environments() -> None:
    stack = Stack()
    mine = await stack.create(environment_id=await stack.environment("env_a"))
    other = await stack.create(environment_id=await stack.environment("env_b"))
    scoped = Viewer(frozenset({"env_a"}))
    assert (await stack.service.get(mine.session.id, scoped)).session.id == mine.session.id
    with pytest.raises(NotFound):
        await stack.service.get(other.session.id, scoped)
    with pytest.raises(NotFound):
        await stack.service.send_events(other.session.id, [message()], scoped)
    page = await stack.service.list_sessions(SessionQuery(), scoped)
    assert [v.session.id for v in page.items] == [mine.session.id]


async def test_list_by_status_reads_on_until_the_page_is_full() -> None:
    stack = Stack()
    ids = [(await stack.create()).session.id for _ in range(5)]
    for session_id in ids[:3]:  # the three oldest run
        running = NewEvent(new_event_id(), "session.status_running", {})
        await stack.store.append(session_id, [running], stack.clock())
    query = SessionQuery(limit=2, statuses=frozenset({SessionStatus.RUNNING}))
    first = await stack.service.list_sessions(query, EVERYONE)
    assert [v.session.id for v in first.items] == [ids[2], ids[1]]  # newest first
    assert first.next_cursor is not None
    second = await stack.service.list_sessions(replace(query, cursor=first.next_cursor), EVERYONE)
    assert [v.session.id for v in second.items] == [ids[0]]
    none = await stack.service.list_sessions(SessionQuery(memory_store_id="memstore_1"), EVERYONE)
    assert none.items == [] and none.next_cursor is None


# -- update --------------------------------------------------------------------------------------


async def test_update_appends_the_changed_fields() -> None:
    stack = Stack()
    view = await stack.create(title="a", metadata={"keep": "1", "drop": "2"})
    session_id = view.session.id
    updated = await stack.service.update(
        session_id, UpdateSession(title="b", metadata={"drop": None}), EVERYONE
    )
    assert (updated.session.body["title"], updated.session.body["metadata"]) == ("b", {"keep": "1"})
    (event,) = await stack.store.get_events(session_id)
    assert (event.type, event.payload) == ("session.updated", {"title": "b", "metadata": {"keep": "1"}})
    same = await stack.service.update(session_id, UpdateSession(title="b"), EVERYONE)
    assert same.session.version == updated.session.version  # nothing changed, nothing written
    assert len(await stack.store.get_events(session_id)) == 1
    tools = await stack.service.update(
        session_id, UpdateSession(agent=AgentChange(tools=[CUSTOM_TOOL])), EVERYONE
    )
    assert [t["name"] for t in tools.session.body["agent"]["tools"]] == ["lookup"]
    assert (await stack.store.get_events(session_id))[-1].payload.keys() == {"agent"}


async def test_update_refusals() -> None:
    stack = Stack()
    session_id = (await stack.create()).session.id
    with pytest.raises(InvalidRequest, match="vault_ids"):
        await stack.service.update(session_id, UpdateSession(vault_ids=None), EVERYONE)
    with pytest.raises(InvalidRequest, match="budget"):
        await stack.service.update(session_id, UpdateSession(budget={}), EVERYONE)
    await stack.store.append(session_id, [NewEvent(new_event_id(), "session.status_running")], stack.clock())
    with pytest.raises(InvalidRequest, match="when idle"):
        await stack.service.update(session_id, UpdateSession(agent=AgentChange(tools=[])), EVERYONE)


async def test_update_gives_up_with_a_conflict_when_the_session_keeps_changing() -> None:
    stack = Stack()
    session_id = (await stack.create()).session.id

    async def always_moved(kind: str, id: str, *args: Any, **kwargs: Any) -> Any:
        raise VersionConflict(kind, id, 1, 2)

    stack.store.update_resource = always_moved  # type: ignore[method-assign]
    with pytest.raises(Conflict, match="kept changing"):
        await stack.service.update(session_id, UpdateSession(title="x"), EVERYONE)
    assert await stack.types(session_id) == []


# -- archive, delete -----------------------------------------------------------------------------


async def test_archive_terminates_purges_tokens_and_ends_the_run() -> None:
    stack = Stack()
    repo = {"type": "github_repository", "url": REPO, "authorization_token": "secret-token"}
    session_id = (await stack.create(resources=[repo])).session.id
    view = await stack.service.archive(session_id, EVERYONE)
    assert view.current_status is SessionStatus.TERMINATED
    assert view.session.body["status"] == "terminated"
    assert view.repositories[0].body["sealed"] is None
    assert await stack.types(session_id) == ["session.status_terminated"]
    assert ("session_ended", session_id) in stack.runner.calls
    await stack.service.archive(session_id, EVERYONE)  # again: no second terminated event
    assert await stack.types(session_id) == ["session.status_terminated"]
    with pytest.raises(InvalidRequest, match="archived"):
        await stack.service.send_events(session_id, [message()], EVERYONE)


async def test_delete_ends_the_run_first_then_removes_everything() -> None:
    stack = Stack()
    repo = {"type": "github_repository", "url": REPO}
    session_id = (await stack.create(resources=[repo], initial_events=[message()])).session.id
    with stack.bus.subscribe(session_id) as subscription:
        await stack.service.delete(session_id, EVERYONE)
        notice = subscription.get_nowait()  # live streams are told the log moved: they find it gone
    assert isinstance(notice, Persisted) and notice.last_seq == 0
    assert stack.runner.existed_at_end[session_id] is True
    with pytest.raises(NotFound):
        await stack.service.get(session_id, EVERYONE)
    assert (await stack.store.list_resources(RESOURCE_KIND)).items == []


# -- events --------------------------------------------------------------------------------------


async def test_send_events_validates_the_whole_batch_first() -> None:
    stack = Stack()
    session_id = (await stack.create()).session.id
    with pytest.raises(InvalidRequest, match=r"events\[1\]"):
        await stack.service.send_events(session_id, [message(), {"type": "user.nope"}], EVERYONE)
    confirm = {"type": "user.tool_confirmation", "tool_use_id": "sevt_x", "result": "allow"}
    with pytest.raises(InvalidRequest, match="not waiting"):
        await stack.service.send_events(session_id, [confirm], EVERYONE)
    assert await stack.types(session_id) == [] and stack.runner.calls == []
    stored = await stack.service.send_events(session_id, [message("a"), message("b")], EVERYONE)
    assert [e.seq for e in stored] == [1, 2]
    assert stack.runner.calls == [("wake", session_id)]
    await stack.store.append(
        session_id, [NewEvent(new_event_id(), "session.status_terminated")], stack.clock()
    )
    with pytest.raises(InvalidRequest, match="terminated"):
        await stack.service.send_events(session_id, [message()], EVERYONE)


async def test_event_pages_by_seq_order_and_time() -> None:
    stack = Stack()
    session_id = (await stack.create()).session.id
    for index in range(5):
        await stack.service.send_events(session_id, [message(str(index))], EVERYONE)
    first = await stack.service.events(session_id, EventQuery(limit=2), EVERYONE)
    assert [e.seq for e in first.events] == [1, 2] and first.more
    rest = await stack.service.events(session_id, EventQuery(limit=10, after=2), EVERYONE)
    assert [e.seq for e in rest.events] == [3, 4, 5] and not rest.more
    newest = await stack.service.events(session_id, EventQuery(limit=2, order=Order.DESC), EVERYONE)
    assert [e.seq for e in newest.events] == [5, 4]
    events = await stack.store.get_events(session_id)
    window = EventQuery(
        limit=10, processed_after=events[1].processed_at, processed_before=events[3].processed_at
    )
    assert [e.seq for e in (await stack.service.events(session_id, window, EVERYONE)).events] == [2, 3, 4]


# -- repositories --------------------------------------------------------------------------------


async def test_repository_token_rotation_and_removal() -> None:
    stack = Stack()
    view = await stack.create(resources=[{"type": "github_repository", "url": REPO}])
    session_id, resource_id = view.session.id, view.repositories[0].id
    rotated = await stack.service.rotate_token(
        session_id, resource_id, {"authorization_token": "fresh"}, EVERYONE
    )
    assert rotated.body["sealed"] and "fresh" not in str(rotated.body)
    with pytest.raises(InvalidRequest, match="unknown field"):
        await stack.service.rotate_token(session_id, resource_id, {"url": "x"}, EVERYONE)
    with pytest.raises(InvalidRequest, match="file_id"):
        await stack.service.add_resource(session_id, {"type": "file"}, EVERYONE)
    other = (await stack.create()).session.id
    with pytest.raises(NotFound):  # another session's repository is unknown here
        await stack.service.repository(other, resource_id, EVERYONE)
    await stack.service.remove_repository(session_id, resource_id, EVERYONE)
    page = await stack.service.repositories(session_id, EVERYONE, limit=10, cursor=None)
    assert page.items == []


async def test_token_rotation_needs_the_vault() -> None:
    stack = Stack(vault=False)
    view = await stack.create(resources=[{"type": "github_repository", "url": REPO}])
    with pytest.raises(NotConfigured):
        await stack.service.rotate_token(
            view.session.id, view.repositories[0].id, {"authorization_token": "t"}, EVERYONE
        )
