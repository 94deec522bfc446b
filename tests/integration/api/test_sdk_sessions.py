"""``client.beta.sessions`` end to end: create (three ways to name the agent), retrieve, list with
filters and both page directions, update, archive and delete — and the runner calls they make."""

from __future__ import annotations

from datetime import UTC, datetime

import anthropic
import pytest
from anthropic.types.beta.beta_managed_agents_session import BetaManagedAgentsSession
from anthropic.types.beta.beta_managed_agents_session_updated_event import (
    BetaManagedAgentsSessionUpdatedEvent,
)

from control_plane.sessions.events import new_event_id
from control_plane.store.base import NewEvent
from tests.support.api_app import Api, assert_complete, assert_valid


async def _set_status(api: Api, session_id: str, event_type: str) -> None:
    """Append a status event as the harness would."""
    stored = await api.store.append(session_id, [NewEvent(new_event_id(), event_type)], datetime.now(UTC))
    api.bus.publish_persisted(session_id, stored[-1].seq)


async def test_create_with_agent_id_and_initial_events(api: Api) -> None:
    agent = await api.agent(tools=[{"type": "agent_toolset_20260401"}])
    await api.client.beta.agents.update(agent.id, system="v2")  # the session pins the latest
    env_id = await api.environment()
    session = await api.client.beta.sessions.create(
        agent=agent.id,
        environment_id=env_id,
        title="first",
        metadata={"ticket": "T-1"},
        initial_events=[{"type": "user.message", "content": [{"type": "text", "text": "hello"}]}],
    )
    assert isinstance(session, BetaManagedAgentsSession)
    assert_complete(session)
    assert_complete(session.agent)
    assert session.id.startswith("sesn_")
    assert session.status == "idle"
    assert session.agent.id == agent.id
    assert session.agent.version == 2
    assert session.agent.system == "v2"
    assert session.agent.tools[0].type == "agent_toolset_20260401"
    assert session.environment_id == env_id
    assert session.vault_ids == []
    assert session.resources == []
    assert session.outcome_evaluations == []
    assert session.metadata == {"ticket": "T-1"}
    assert session.title == "first"
    assert session.usage.input_tokens == 0
    assert session.usage.output_tokens == 0
    assert session.stats.duration_seconds is not None
    assert session.archived_at is None

    events = [e async for e in api.client.beta.sessions.events.list(session.id)]
    assert [e.type for e in events] == ["user.message"]
    assert api.runner.wakes(session.id) == 1
    again = await api.client.beta.sessions.retrieve(session.id)
    assert_complete(again)
    assert again.model_dump(exclude={"stats"}) == session.model_dump(exclude={"stats"})


async def test_create_with_pinned_version_and_overrides(api: Api) -> None:
    agent = await api.agent(system="v1")
    await api.client.beta.agents.update(agent.id, system="v2")
    env_id = await api.environment()
    pinned = await api.client.beta.sessions.create(
        agent={"type": "agent", "id": agent.id, "version": 1}, environment_id=env_id
    )
    assert pinned.agent.version == 1
    assert pinned.agent.system == "v1"
    assert api.runner.wakes(pinned.id) == 0  # nothing to do yet

    overridden = await api.client.beta.sessions.create(
        agent={
            "type": "agent_with_overrides",
            "id": agent.id,
            "model": {"id": "claude-haiku-5-5", "speed": "fast"},
            "system": None,
            "tools": [{"type": "mcp_toolset", "mcp_server_name": "kb"}],
            "mcp_servers": [{"type": "url", "name": "kb", "url": "https://kb.example.com/mcp"}],
        },
        environment_id=env_id,
    )
    assert_complete(overridden)
    assert overridden.agent.version == 2
    assert overridden.agent.model.id == "claude-haiku-5-5"
    assert overridden.agent.system is None
    assert overridden.agent.mcp_servers[0].name == "kb"
    unchanged = await api.client.beta.agents.retrieve(agent.id)
    assert unchanged.version == 2
    assert unchanged.tools == []


async def test_create_refusals(api: Api) -> None:
    agent = await api.agent()
    env_id = await api.environment()
    sessions = api.client.beta.sessions
    with pytest.raises(anthropic.NotFoundError):
        await sessions.create(agent="agent_nope", environment_id=env_id)
    with pytest.raises(anthropic.NotFoundError):
        await sessions.create(agent={"type": "agent", "id": agent.id, "version": 5}, environment_id=env_id)
    with pytest.raises(anthropic.NotFoundError) as missing_env:
        await sessions.create(agent=agent.id, environment_id="env_nope")
    assert missing_env.value.error_code == "environment_not_found"
    with pytest.raises(anthropic.NotFoundError, match="vault"):
        await sessions.create(agent=agent.id, environment_id=env_id, vault_ids=["vlt_nope"])
    with pytest.raises(anthropic.BadRequestError, match="budget"):
        await sessions.create(
            agent=agent.id,
            environment_id=env_id,
            budget={"type": "limit", "max_list_cost": {"amount": "0100", "currency": "USD"}},
        )
    unpriced = await api.agent(model="claude-haiku-5-5")  # priced by prompt size: not in the table
    with pytest.raises(anthropic.BadRequestError, match="no list price") as not_budgetable:
        await sessions.create(
            agent=unpriced.id,
            environment_id=env_id,
            budget={"type": "limit", "max_list_cost": {"amount": "100", "currency": "USD"}},
        )
    assert not_budgetable.value.body["error"]["details"]["error_code"] == "model_not_budgetable"  # type: ignore[index]
    with pytest.raises(anthropic.NotFoundError, match="file_1"):  # no such file
        await sessions.create(
            agent=agent.id, environment_id=env_id, resources=[{"type": "file", "file_id": "file_1"}]
        )
    with pytest.raises(anthropic.BadRequestError, match=r"initial_events\[0\]\.max_iterations"):
        await sessions.create(
            agent=agent.id,
            environment_id=env_id,
            initial_events=[
                {
                    "type": "user.define_outcome",
                    "description": "a report",
                    "rubric": {"type": "text", "content": "complete"},
                    "max_iterations": 21,
                }
            ],
        )
    with pytest.raises(anthropic.BadRequestError, match=r"initial_events\[0\]"):
        await sessions.create(
            agent=agent.id,
            environment_id=env_id,
            initial_events=[{"type": "user.message", "content": []}],
        )
    await api.client.beta.environments.archive(env_id)
    with pytest.raises(anthropic.BadRequestError) as archived_env:
        await sessions.create(agent=agent.id, environment_id=env_id)
    assert archived_env.value.error_code == "environment_archived"
    other_env = await api.environment()
    await api.client.beta.agents.archive(agent.id)
    with pytest.raises(anthropic.BadRequestError, match="archived"):
        await sessions.create(agent=agent.id, environment_id=other_env)
    assert [s async for s in sessions.list(include_archived=True)] == []
    assert api.runner.calls == []


async def test_list_filters_and_pages(api: Api) -> None:
    agent_a = await api.agent(name="a")
    agent_b = await api.agent(name="b")
    env_id = await api.environment()
    ids = []
    for agent in (agent_a, agent_b, agent_a, agent_a, agent_b):
        ids.append((await api.client.beta.sessions.create(agent=agent.id, environment_id=env_id)).id)
    await api.client.beta.agents.update(agent_a.id, system="v2")
    newest = await api.client.beta.sessions.create(agent=agent_a.id, environment_id=env_id)
    ids.append(newest.id)
    sessions = api.client.beta.sessions

    assert [s.id async for s in sessions.list(limit=2)] == ids[::-1]
    assert [s.id async for s in sessions.list(limit=4, order="asc")] == ids
    first = await sessions.list(limit=2)
    assert first.prev_page is None
    assert first.next_page
    for session in first.data:
        assert_complete(session)
    second = await sessions.list(limit=2, page=first.next_page)
    assert [s.id for s in second.data] == ids[3:1:-1]
    assert second.prev_page
    back = await sessions.list(limit=2, page=second.prev_page)
    assert [s.id for s in back.data] == [s.id for s in first.data]

    by_agent = [s.id async for s in sessions.list(agent_id=agent_a.id, order="asc")]
    assert by_agent == [ids[0], ids[2], ids[3], ids[5]]
    by_version = [s.id async for s in sessions.list(agent_id=agent_a.id, agent_version=2)]
    assert by_version == [newest.id]
    window = [
        s.id
        async for s in sessions.list(
            created_at_gt=(await sessions.retrieve(ids[1])).created_at,
            created_at_lte=(await sessions.retrieve(ids[3])).created_at,
            order="asc",
        )
    ]
    assert window == ids[2:4]

    # Statuses come from the log; several statuses select any of them, across pages.
    await _set_status(api, ids[1], "session.status_running")
    await _set_status(api, ids[3], "session.status_running")
    await _set_status(api, ids[4], "session.status_rescheduled")
    running = [s.id async for s in sessions.list(statuses=["running"], order="asc")]
    assert running == [ids[1], ids[3]]
    busy_page = await sessions.list(statuses=["running", "rescheduling"], limit=2, order="asc")
    assert [s.id for s in busy_page.data] == [ids[1], ids[3]]
    busy = [s.id async for s in sessions.list(statuses=["running", "rescheduling"], limit=2, order="asc")]
    assert busy == [ids[1], ids[3], ids[4]]
    idle = [s.id async for s in sessions.list(statuses=["idle"], limit=1, order="asc")]
    assert idle == [ids[0], ids[2], ids[5]]
    with pytest.raises(anthropic.BadRequestError, match="statuses"):
        await sessions.list(statuses=["sleeping"])

    await sessions.archive(ids[0])
    assert ids[0] not in [s.id async for s in sessions.list()]
    assert ids[0] in [s.id async for s in sessions.list(include_archived=True, statuses=["terminated"])]


async def test_update_title_metadata_and_agent(api: Api) -> None:
    session = await api.session(metadata={"a": "1"})
    sessions = api.client.beta.sessions
    updated = await sessions.update(session.id, title="renamed", metadata={"a": None, "b": "2"})
    assert_complete(updated)
    assert updated.title == "renamed"
    assert updated.metadata == {"b": "2"}

    tools = [{"type": "custom", "name": "ping", "description": "ping", "input_schema": {"type": "object"}}]
    with_tools = await sessions.update(session.id, agent={"tools": tools})
    assert with_tools.agent.tools[0].type == "custom"
    assert with_tools.agent.version == session.agent.version

    updates = [e async for e in sessions.events.list(session.id, types=["session.updated"])]
    assert len(updates) == 2
    for event in updates:
        assert isinstance(event, BetaManagedAgentsSessionUpdatedEvent)
        assert_valid(event)
    assert updates[0].title == "renamed"
    assert updates[0].metadata == {"b": "2"}
    assert updates[0].agent is None
    assert updates[1].agent is not None
    assert updates[1].agent.tools[0].type == "custom"

    same = await sessions.update(session.id, title="renamed")
    assert same.title == "renamed"
    assert len([e async for e in sessions.events.list(session.id, types=["session.updated"])]) == 2

    with pytest.raises(anthropic.BadRequestError, match="vault_ids"):
        await sessions.update(session.id, vault_ids=["vlt_1"])
    await _set_status(api, session.id, "session.status_running")
    with pytest.raises(anthropic.BadRequestError, match="running"):
        await sessions.update(session.id, agent={"tools": []})
    with pytest.raises(anthropic.NotFoundError):
        await sessions.update("sesn_nope", title="x")


async def test_archive_terminates_and_ends(api: Api) -> None:
    session = await api.session()
    archived = await api.client.beta.sessions.archive(session.id)
    assert_complete(archived)
    assert archived.status == "terminated"
    assert archived.archived_at is not None
    assert api.runner.calls == [("session_ended", session.id)]
    events = [e async for e in api.client.beta.sessions.events.list(session.id)]
    assert [e.type for e in events] == ["session.status_terminated"]
    again = await api.client.beta.sessions.archive(session.id)
    assert again.status == "terminated"
    events = [e async for e in api.client.beta.sessions.events.list(session.id)]
    assert [e.type for e in events] == ["session.status_terminated"]  # not twice
    with pytest.raises(anthropic.BadRequestError, match="archived"):
        await api.client.beta.sessions.events.send(
            session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "hi"}]}]
        )


async def test_delete_ends_the_runner_first(api: Api) -> None:
    session = await api.session(
        initial_events=[{"type": "user.message", "content": [{"type": "text", "text": "hi"}]}]
    )
    deleted = await api.client.beta.sessions.delete(session.id)
    assert deleted.id == session.id
    assert deleted.type == "session_deleted"
    assert api.runner.calls[-1] == ("session_ended", session.id)
    assert api.runner.existed_at_end[session.id] is True  # the harness could still read the log
    with pytest.raises(anthropic.NotFoundError):
        await api.client.beta.sessions.retrieve(session.id)
    with pytest.raises(anthropic.NotFoundError):
        await api.client.beta.sessions.delete(session.id)
    with pytest.raises(anthropic.NotFoundError):
        await api.client.beta.sessions.events.list(session.id)
    assert await api.store.last_seq(session.id) == 0  # the log went with it, nothing appended
