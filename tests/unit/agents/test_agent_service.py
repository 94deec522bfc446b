"""The agent service on the in-memory store, without HTTP: create (resolution, refusals), versions,
the update's patch rules and its ``version`` precondition, concurrent updates, archive, listing. The
API tests drive the same service through the SDK; these pin its rules where no request is involved."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from control_plane.agents.commands import AgentQuery, CreateAgent, UpdateAgent
from control_plane.agents.configuration import CustomToolParams, ModelConfigParams
from control_plane.agents.service import AgentService
from control_plane.errors import Conflict, InvalidRequest, VersionConflict
from control_plane.store import MemoryStore
from control_plane.store.base import Resource

T0 = datetime(2026, 5, 1, tzinfo=UTC)
LOOKUP = CustomToolParams.model_validate(
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


class Meddling(MemoryStore):
    """Another writer updates the agent just before each of the next ``times`` updates of ours."""

    def __init__(self) -> None:
        super().__init__()
        self.times = 0

    async def update_resource(self, kind: str, id: str, body: Any, now: datetime, **kw: Any) -> Resource:
        if self.times > 0:
            self.times -= 1
            current = await self.get_resource(kind, id)
            theirs = {**current.body, "metadata": {**current.body["metadata"], "n": str(self.times)}}
            await super().update_resource(kind, id, theirs, now, keep_history=True)
        return await super().update_resource(kind, id, body, now, **kw)


def service(store: MemoryStore | None = None) -> AgentService:
    return AgentService(store or MemoryStore(), Clock())


async def test_create_resolves_the_configuration() -> None:
    agents = service()
    agent = await agents.create(
        CreateAgent(name="coder", model="claude-opus-4-8", description="", system="be brief", tools=[LOOKUP])
    )
    assert agent.id.startswith("agent_") and agent.version == 1
    body = agent.body
    assert body["model"]["id"] == "claude-opus-4-8" and body["model"]["effort"] is None
    assert body["description"] is None and body["system"] == "be brief"  # "" means none
    assert [t["name"] for t in body["tools"]] == ["lookup"]
    assert (body["mcp_servers"], body["skills"], body["metadata"], body["multiagent"]) == ([], [], {}, None)
    assert await agents.get(agent.id) == agent


async def test_create_refusals() -> None:
    agents = service()
    with pytest.raises(InvalidRequest, match="multiagent") as refused:
        await agents.create(CreateAgent(name="x", model="m", multiagent={"type": "coordinator"}))
    assert refused.value.param == "multiagent"
    with pytest.raises(InvalidRequest, match="16"):
        await agents.create(CreateAgent(name="x", model="m", metadata={str(i): "v" for i in range(17)}))
    assert (await agents.list_agents(AgentQuery(include_archived=True))).items == []


async def test_update_makes_a_version_and_keeps_what_is_not_sent() -> None:
    agents = service()
    first = await agents.create(
        CreateAgent(name="coder", model="m", system="s", metadata={"a": "1", "b": "2"})
    )
    second = await agents.update(first.id, UpdateAgent(name="coder-2", metadata={"a": None, "c": "3"}))
    assert second.version == 2
    assert (second.body["name"], second.body["system"]) == ("coder-2", "s")
    assert second.body["metadata"] == {"b": "2", "c": "3"}
    assert (await agents.get(first.id, 1)).body["name"] == "coder"  # the old version stays readable
    cleared = await agents.update(first.id, UpdateAgent(system=None, tools=[LOOKUP]))
    assert cleared.body["system"] is None and [t["name"] for t in cleared.body["tools"]] == ["lookup"]
    assert [r.version for r in (await agents.versions(first.id, limit=10, cursor=None)).items] == [3, 2, 1]


async def test_an_update_that_changes_nothing_makes_no_version() -> None:
    agents = service()
    agent = await agents.create(CreateAgent(name="coder", model="m"))
    same = await agents.update(agent.id, UpdateAgent(name="coder", description=""))
    assert same.version == 1


async def test_a_model_without_effort_keeps_the_effort() -> None:
    agents = service()
    effortful = ModelConfigParams.model_validate({"id": "m", "effort": {"type": "high"}})
    agent = await agents.create(CreateAgent(name="coder", model=effortful))
    assert agent.body["model"]["effort"] == {"type": "high"}
    moved = await agents.update(agent.id, UpdateAgent(model=ModelConfigParams.model_validate({"id": "m2"})))
    assert moved.body["model"]["id"] == "m2" and moved.body["model"]["effort"] == {"type": "high"}
    bare = await agents.update(agent.id, UpdateAgent(model="m3"))
    assert bare.body["model"]["effort"] == {"type": "high"}
    cleared = ModelConfigParams.model_validate({"id": "m3", "effort": None})  # sent as null: cleared
    assert (await agents.update(agent.id, UpdateAgent(model=cleared))).body["model"]["effort"] is None


async def test_update_refusals() -> None:
    agents = service()
    agent = await agents.create(CreateAgent(name="coder", model="m"))
    for command, param in (
        (UpdateAgent(name=None), "name"),
        (UpdateAgent(model=None), "model"),
        (UpdateAgent(multiagent={"type": "coordinator"}), "multiagent"),
    ):
        with pytest.raises(InvalidRequest) as refused:
            await agents.update(agent.id, command)
        assert refused.value.param == param
    assert await agents.update(agent.id, UpdateAgent(multiagent=None)) == agent  # null: nothing to do
    await agents.archive(agent.id)
    with pytest.raises(InvalidRequest, match="archived and cannot be updated"):
        await agents.update(agent.id, UpdateAgent(name="again"))


async def test_the_version_precondition() -> None:
    agents = service()
    agent = await agents.create(CreateAgent(name="coder", model="m"))
    await agents.update(agent.id, UpdateAgent(name="coder-2"))
    with pytest.raises(VersionConflict):
        await agents.update(agent.id, UpdateAgent(version=1, name="coder-3"))
    assert (await agents.update(agent.id, UpdateAgent(version=2, name="coder-3"))).version == 3


async def test_a_concurrent_update_is_applied_on_top_unless_a_version_was_given() -> None:
    store = Meddling()
    agents = service(store)
    agent = await agents.create(CreateAgent(name="coder", model="m", metadata={"k": "v"}))
    store.times = 1
    updated = await agents.update(agent.id, UpdateAgent(name="coder-2"))
    assert updated.version == 3  # theirs, then ours on top of it
    assert updated.body["name"] == "coder-2" and updated.body["metadata"] == {"k": "v", "n": "0"}
    store.times = 1
    with pytest.raises(VersionConflict):  # a precondition is not retried
        await agents.update(agent.id, UpdateAgent(version=3, name="coder-3"))
    store.times = 10
    with pytest.raises(Conflict, match="kept changing"):
        await agents.update(agent.id, UpdateAgent(name="coder-4"))


async def test_listing_leaves_archived_agents_out_unless_asked() -> None:
    agents = service()
    kept = await agents.create(CreateAgent(name="a", model="m"))
    gone = await agents.create(CreateAgent(name="b", model="m"))
    await agents.archive(gone.id)
    assert [r.id for r in (await agents.list_agents(AgentQuery())).items] == [kept.id]
    everything = await agents.list_agents(AgentQuery(include_archived=True))
    assert [r.id for r in everything.items] == [gone.id, kept.id]
    first = await agents.list_agents(AgentQuery(limit=1, include_archived=True))
    assert first.next_cursor is not None
    rest = await agents.list_agents(AgentQuery(limit=1, cursor=first.next_cursor, include_archived=True))
    assert [r.id for r in rest.items] == [kept.id]


async def test_the_version_a_new_session_snapshots() -> None:
    agents = service()
    first = await agents.create(CreateAgent(name="coder", model="claude-opus-4-8", system="v1"))
    await agents.update(first.id, UpdateAgent(system="v2"))
    assert (await agents.for_new_session(first.id, None)).body["system"] == "v2"
    assert (await agents.for_new_session(first.id, 1)).body["system"] == "v1"
    await agents.archive(first.id)
    with pytest.raises(InvalidRequest, match="archived") as refused:  # no version of it starts one
        await agents.for_new_session(first.id, 1)
    assert refused.value.param == "agent"
