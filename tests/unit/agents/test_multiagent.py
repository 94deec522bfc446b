"""An agent's ``multiagent``: the roster rules on create and update, and the mapping of
``multiagent_20261001`` onto the same roster (control_plane/agents/multiagent.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from control_plane.agents.commands import CreateAgent, UpdateAgent
from control_plane.agents.service import AgentService
from control_plane.errors import InvalidRequest
from control_plane.sessions.roster import session_multiagent
from control_plane.store import MemoryStore


def service() -> tuple[AgentService, MemoryStore]:
    store = MemoryStore()
    return AgentService(store, lambda: datetime(2026, 4, 1, tzinfo=UTC)), store


def coordinator(*agents: Any) -> dict[str, Any]:
    return {"type": "coordinator", "agents": list(agents)}


async def test_a_roster_is_resolved_with_versions_pinned() -> None:
    agents, store = service()
    helper = await agents.create(CreateAgent(name="helper", model="m"))
    await agents.update(helper.id, UpdateAgent(system="v2"))
    other = await agents.create(CreateAgent(name="other", model="m"))
    lead = await agents.create(
        CreateAgent(
            name="lead",
            model="m",
            multiagent=coordinator(
                helper.id,
                {"type": "agent", "id": other.id, "version": 1},
                {"type": "self"},
                {"type": "advisor", "model": "claude-opus-4-8"},
            ),
        )
    )
    assert lead.body["multiagent"] == coordinator(
        {"type": "agent", "id": helper.id, "version": 2},
        {"type": "agent", "id": other.id, "version": 1},
        {"type": "agent", "id": lead.id, "version": 1},
        {"type": "advisor", "model": "claude-opus-4-8"},
    )
    # the session's copy: full definitions, no roster of their own
    copy = await session_multiagent(lead.body["multiagent"], store)
    assert copy is not None
    assert [a.get("name") for a in copy["agents"]] == ["helper", "other", "lead", None]
    assert copy["agents"][0]["system"] == "v2" and "multiagent" not in copy["agents"][2]
    updated = await agents.update(lead.id, UpdateAgent(multiagent=coordinator({"type": "self"})))
    assert updated.body["multiagent"] == coordinator({"type": "agent", "id": lead.id, "version": 2})
    assert (await agents.update(lead.id, UpdateAgent(multiagent=None))).body["multiagent"] is None


@pytest.mark.parametrize(
    ("roster", "message"),
    [
        ([], "1 to 20"),
        (["agent_x"] * 21, "1 to 20"),
        (["agent_missing"], "'agent_missing' does not exist"),
        ([{"type": "agent", "id": "HELPER", "version": 9}], "version 9 does not exist"),
        (["HELPER", {"type": "agent", "id": "HELPER"}], "in the roster twice"),
        ([{"type": "self"}, {"type": "self"}], "one 'self'"),
        ([{"type": "advisor", "model": "a"}, {"type": "advisor", "model": "b"}], "one advisor"),
        (["NESTED"], "rosters nest one level only"),
        (["ARCHIVED"], "archived"),
        ([{"type": "robot"}], "must be an agent id"),
    ],
)
async def test_roster_refusals(roster: list[Any], message: str) -> None:
    agents, _ = service()
    helper = await agents.create(CreateAgent(name="helper", model="m"))
    nested = await agents.create(CreateAgent(name="n", model="m", multiagent=coordinator(helper.id)))
    archived = await agents.create(CreateAgent(name="gone", model="m"))
    await agents.archive(archived.id)
    names = {"HELPER": helper.id, "NESTED": nested.id, "ARCHIVED": archived.id}

    def named(entry: Any) -> Any:
        if isinstance(entry, str):
            return names.get(entry, entry)
        if isinstance(entry, dict) and "id" in entry:
            return {**entry, "id": names.get(entry["id"], entry["id"])}
        return entry

    with pytest.raises(InvalidRequest, match=message) as refused:
        await agents.create(CreateAgent(name="x", model="m", multiagent=coordinator(*map(named, roster))))
    assert refused.value.param == "multiagent"


async def test_multiagent_20261001_maps_onto_the_roster() -> None:
    agents, store = service()
    helper = await agents.create(CreateAgent(name="helper", model="m"))
    value = {
        "type": "multiagent_20261001",
        "subagents": {
            "type": "enabled",
            "inline_agents": {"type": "disabled"},
            "predefined_agents": [helper.id],
        },
        "advisor": {"type": "enabled", "model": "claude-opus-4-8"},
    }
    lead = await agents.create(CreateAgent(name="lead", model="m", multiagent=value))
    assert lead.body["multiagent"] == {
        "type": "multiagent_20261001",
        "advisor": {"type": "enabled", "model": "claude-opus-4-8"},
        "subagents": {
            "type": "enabled",
            "inline_agents": {"type": "disabled"},
            "predefined_agents": [{"type": "agent", "id": helper.id, "version": 1}],
        },
        "workflows": {"type": "disabled"},
    }
    copy = await session_multiagent(lead.body["multiagent"], store)
    assert copy is not None and copy["subagents"]["predefined_agents"][0]["name"] == "helper"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"type": "multiagent_20261001", "workflows": {"type": "enabled"}}, "workflows are not supported"),
        (
            {"type": "multiagent_20261001", "subagents": {"type": "enabled"}},
            "inline agents are not supported",
        ),
        (
            {
                "type": "multiagent_20261001",
                "subagents": {"type": "enabled", "inline_agents": {"type": "disabled"}},
            },
            "predefined_agents must list",
        ),
        ({"type": "multiagent_20261001", "advisor": {"type": "enabled"}}, "advisor.model"),
        ({"type": "swarm"}, "unknown type 'swarm'"),
    ],
)
async def test_multiagent_20261001_refusals(value: dict[str, Any], message: str) -> None:
    agents, _ = service()
    with pytest.raises(InvalidRequest, match=message):
        await agents.create(CreateAgent(name="x", model="m", multiagent=value))
