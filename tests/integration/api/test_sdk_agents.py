"""``client.beta.agents`` end to end: create, retrieve (and by version), update with optimistic
concurrency, list, archive, versions — every response parsed into the SDK's typed model."""

from __future__ import annotations

from datetime import timedelta

import anthropic
import pytest
from anthropic.types.beta.beta_managed_agents_agent import BetaManagedAgentsAgent

from tests.support.api_app import Api, assert_complete


async def test_create_resolves_configuration(api: Api) -> None:
    skill_md = b"---\nname: sheets\ndescription: Spreadsheets.\n---\n"
    skill = await api.client.beta.skills.create(files=[("sheets/SKILL.md", skill_md)])
    agent = await api.client.beta.agents.create(
        name="coder",
        model="claude-opus-4-8",
        description="writes code",
        system="You are careful.",
        tools=[
            {
                "type": "agent_toolset_20260401",
                "default_config": {"permission_policy": {"type": "always_ask"}},
                "configs": [
                    {"name": "read", "permission_policy": {"type": "always_allow"}},
                    {"name": "web_search", "enabled": False},
                    {"name": "web_fetch", "allowed_domains": ["docs.example.com"]},
                ],
            },
            {"type": "mcp_toolset", "mcp_server_name": "github"},
            {
                "type": "custom",
                "name": "lookup_order",
                "description": "Find an order",
                "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}},
            },
        ],
        mcp_servers=[{"type": "url", "name": "github", "url": "https://mcp.example.com/github"}],
        skills=[{"type": "custom", "skill_id": skill.id}],
        metadata={"team": "platform"},
    )
    assert isinstance(agent, BetaManagedAgentsAgent)
    assert_complete(agent)
    assert agent.type == "agent"
    assert agent.id.startswith("agent_")
    assert agent.version == 1
    assert agent.model.id == "claude-opus-4-8"
    assert agent.model.speed == "standard"
    assert agent.execution_identity.type == "service_account"
    assert agent.multiagent is None
    assert agent.archived_at is None
    assert agent.metadata == {"team": "platform"}
    assert agent.skills[0].version == "latest"

    toolset, mcp, custom = agent.tools
    assert toolset.type == "agent_toolset_20260401"
    assert toolset.default_config.enabled is True
    assert toolset.default_config.permission_policy.type == "always_ask"
    by_name = {c.name: c for c in toolset.configs}
    assert list(by_name) == ["bash", "edit", "read", "write", "glob", "grep", "web_fetch", "web_search"]
    assert by_name["bash"].permission_policy.type == "always_ask"
    assert by_name["read"].permission_policy.type == "always_allow"
    assert by_name["web_search"].enabled is False
    assert by_name["web_fetch"].allowed_domains == ["docs.example.com"]
    assert mcp.type == "mcp_toolset"
    assert mcp.default_config.permission_policy.type == "always_ask"  # MCP tools ask by default
    assert custom.type == "custom"
    assert custom.name == "lookup_order"


async def test_model_object_and_retrieve(api: Api) -> None:
    agent = await api.client.beta.agents.create(
        name="fast", model={"id": "claude-sonnet-5-5", "speed": "fast", "effort": "high"}
    )
    assert agent.model.speed == "fast"
    assert agent.model.effort is not None
    assert agent.model.effort.type == "high"
    again = await api.client.beta.agents.retrieve(agent.id)
    assert_complete(again)
    assert again == agent


async def test_update_versions_and_conflict(api: Api) -> None:
    agent = await api.agent(metadata={"a": "1", "b": "2"})
    v2 = await api.client.beta.agents.update(
        agent.id, version=1, system="new prompt", metadata={"a": None, "c": "3"}
    )
    assert_complete(v2)
    assert v2.version == 2
    assert v2.system == "new prompt"
    assert v2.metadata == {"b": "2", "c": "3"}
    assert v2.updated_at >= agent.updated_at
    assert v2.created_at == agent.created_at

    # A stale version is a 409 conflict_error (not retried: the server says x-should-retry false).
    with pytest.raises(anthropic.ConflictError) as caught:
        await api.client.beta.agents.update(agent.id, version=1, name="clobber")
    assert caught.value.status_code == 409
    assert caught.value.type == "conflict_error"
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert caught.value.request_id
    current = await api.client.beta.agents.retrieve(agent.id)
    assert current.version == 2
    assert current.name == "coder"

    # Without a version the update applies to whatever is current.
    v3 = await api.client.beta.agents.update(agent.id, model="claude-haiku-5-5")
    assert v3.version == 3
    assert v3.model.id == "claude-haiku-5-5"

    # An update that changes nothing makes no version.
    same = await api.client.beta.agents.update(agent.id, system="new prompt")
    assert same.version == 3

    # Old versions stay readable.
    old = await api.client.beta.agents.retrieve(agent.id, version=1)
    assert_complete(old)
    assert old.version == 1
    assert old.system is None
    assert old.metadata == {"a": "1", "b": "2"}
    with pytest.raises(anthropic.NotFoundError):
        await api.client.beta.agents.retrieve(agent.id, version=9)

    versions = [v async for v in api.client.beta.agents.versions.list(agent.id, limit=2)]
    assert [v.version for v in versions] == [3, 2, 1]
    for version in versions:
        assert_complete(version)


async def test_update_clears_and_replaces(api: Api) -> None:
    agent = await api.agent(
        description="d",
        system="s",
        tools=[{"type": "mcp_toolset", "mcp_server_name": "kb"}],
        mcp_servers=[{"type": "url", "name": "kb", "url": "https://kb.example.com/mcp"}],
    )
    # Removing the server while a toolset still uses it is refused as a whole.
    with pytest.raises(anthropic.BadRequestError, match="not in mcp_servers"):
        await api.client.beta.agents.update(agent.id, mcp_servers=[])
    updated = await api.client.beta.agents.update(
        agent.id, description=None, system="", tools=None, mcp_servers=None
    )
    assert updated.description is None
    assert updated.system is None
    assert updated.tools == []
    assert updated.mcp_servers == []
    with pytest.raises(anthropic.BadRequestError, match="name cannot be cleared"):
        await api.client.beta.agents.update(agent.id, extra_body={"name": None})


async def test_list_archive_and_filters(api: Api) -> None:
    first = await api.agent(name="one")
    second = await api.agent(name="two")
    third = await api.agent(name="three")
    page = await api.client.beta.agents.list(limit=2)
    assert [a.name for a in page.data] == ["three", "two"]
    assert page.next_page
    everything = [a.name async for a in api.client.beta.agents.list(limit=2)]
    assert everything == ["three", "two", "one"]

    archived = await api.client.beta.agents.archive(second.id)
    assert_complete(archived)
    assert archived.archived_at is not None
    assert [a.id async for a in api.client.beta.agents.list()] == [third.id, first.id]
    with_archived = [a.id async for a in api.client.beta.agents.list(include_archived=True)]
    assert with_archived == [third.id, second.id, first.id]
    with pytest.raises(anthropic.BadRequestError, match="archived"):
        await api.client.beta.agents.update(second.id, name="again")

    since = [
        a.id
        async for a in api.client.beta.agents.list(
            created_at_gte=second.created_at, created_at_lte=third.created_at, include_archived=True
        )
    ]
    assert since == [third.id, second.id]
    later = await api.client.beta.agents.list(created_at_gte=third.created_at + timedelta(seconds=60))
    assert later.data == []
    assert not later.next_page


async def test_invalid_agents_are_refused(api: Api) -> None:
    beta = api.client.beta.agents
    with pytest.raises(anthropic.BadRequestError, match="mcp_servers"):
        await beta.create(
            name="x",
            model="m",
            mcp_servers=[{"type": "url", "name": "unused", "url": "https://x.example.com"}],
        )
    with pytest.raises(anthropic.BadRequestError, match="tools"):
        await beta.create(name="x", model="m", tools=[{"type": "computer_20990101"}])
    with pytest.raises(anthropic.BadRequestError, match="agent_nope"):
        await beta.create(name="x", model="m", multiagent={"type": "coordinator", "agents": ["agent_nope"]})
    with pytest.raises(anthropic.BadRequestError, match="metadata"):
        await beta.create(name="x", model="m", metadata={f"k{i}": "v" for i in range(17)})
    with pytest.raises(anthropic.BadRequestError, match="surprise"):
        await beta.create(name="x", model="m", extra_body={"surprise": 1})
    with pytest.raises(anthropic.BadRequestError, match="already in use"):
        schema = {"type": "object"}
        await beta.create(
            name="x",
            model="m",
            tools=[
                {"type": "custom", "name": "t", "description": "", "input_schema": schema},
                {"type": "custom", "name": "t", "description": "", "input_schema": schema},
            ],
        )
    with pytest.raises(anthropic.NotFoundError):
        await beta.retrieve("agent_missing")
    with pytest.raises(anthropic.NotFoundError):
        await beta.update("agent_missing", name="x")
    assert [a async for a in beta.list(include_archived=True)] == []
