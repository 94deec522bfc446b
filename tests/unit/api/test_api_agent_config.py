"""Agent configuration: resolution of tools, models and skills to the stored form."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter

from control_plane.agents.configuration import (
    AGENT_TOOL_NAMES,
    McpServerParams,
    ModelConfigParams,
    SkillParams,
    ToolParams,
    agent_tool_settings,
    resolve_mcp_servers,
    resolve_model,
    resolve_skills,
    resolve_tools,
)
from control_plane.errors import InvalidRequest

TOOLS = TypeAdapter(list[ToolParams])
SERVERS = TypeAdapter(list[McpServerParams])


def resolve(tools: list[dict[str, Any]], servers: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    return resolve_tools(
        TOOLS.validate_python(tools), resolve_mcp_servers(SERVERS.validate_python(servers or []))
    )


def test_toolset_defaults_and_overrides() -> None:
    (toolset,) = resolve(
        [
            {
                "type": "agent_toolset_20260401",
                "default_config": {"enabled": False},
                "configs": [{"name": "bash", "enabled": True, "permission_policy": {"type": "always_ask"}}],
            }
        ]
    )
    assert toolset["default_config"] == {"enabled": False, "permission_policy": {"type": "always_allow"}}
    assert [c["name"] for c in toolset["configs"]] == list(AGENT_TOOL_NAMES)
    bash = toolset["configs"][0]
    assert bash == {
        "type": "bash",
        "name": "bash",
        "enabled": True,
        "permission_policy": {"type": "always_ask"},
    }
    assert all(c["enabled"] is False for c in toolset["configs"][1:])
    settings = {s.name: s for s in agent_tool_settings([toolset])}
    assert settings["bash"].enabled
    assert settings["bash"].permission_policy == "always_ask"
    assert not settings["read"].enabled


def test_resolved_form_round_trips() -> None:
    tools = [
        {"type": "agent_toolset_20260401", "configs": [{"name": "web_fetch", "blocked_domains": ["x.com"]}]},
        {"type": "mcp_toolset", "mcp_server_name": "kb", "configs": [{"name": "search", "enabled": False}]},
        {"type": "custom", "name": "t", "description": "d", "input_schema": {"type": "object", "x-extra": 1}},
    ]
    servers = [{"type": "url", "name": "kb", "url": "https://kb.example.com/mcp"}]
    once = resolve(tools, servers)
    assert resolve(once, servers) == once
    mcp = once[1]
    assert mcp["default_config"] == {"enabled": True, "permission_policy": {"type": "always_ask"}}
    assert mcp["configs"] == [
        {"name": "search", "enabled": False, "permission_policy": {"type": "always_ask"}}
    ]
    assert once[2]["input_schema"]["x-extra"] == 1
    kinds = {(s.kind, s.name) for s in agent_tool_settings(once)}
    assert ("mcp_toolset", "search") in kinds
    assert ("custom", "t") in kinds


@pytest.mark.parametrize(
    ("tools", "servers", "match"),
    [
        ([{"type": "agent_toolset_20260401"}] * 2, [], "only once"),
        ([{"type": "mcp_toolset", "mcp_server_name": "nope"}], [], "not in mcp_servers"),
        ([], [{"type": "url", "name": "kb", "url": "https://kb"}], "not referenced"),
        (
            [{"type": "custom", "name": "bash", "description": "", "input_schema": {"type": "object"}}],
            [],
            "already in use",
        ),
        (
            [{"type": "agent_toolset_20260401", "configs": [{"name": "read"}, {"name": "read"}]}],
            [],
            "configured twice",
        ),
    ],
)
def test_refusals(tools: list[dict[str, Any]], servers: list[dict[str, Any]], match: str) -> None:
    with pytest.raises(InvalidRequest, match=match):
        resolve(tools, servers)


def test_tool_config_checks() -> None:
    with pytest.raises(ValueError, match="not allowed for the bash tool"):
        TOOLS.validate_python(
            [{"type": "agent_toolset_20260401", "configs": [{"name": "bash", "allowed_domains": ["a"]}]}]
        )
    with pytest.raises(ValueError, match="does not match"):
        TOOLS.validate_python(
            [{"type": "agent_toolset_20260401", "configs": [{"name": "bash", "type": "read"}]}]
        )


def test_model_and_skills() -> None:
    assert resolve_model("claude-opus-4-8") == {
        "id": "claude-opus-4-8",
        "effort": None,
        "inference_geo": None,
        "speed": "standard",
    }
    resolved = resolve_model(ModelConfigParams(id="m", effort="max", speed="fast"))
    assert resolved["effort"] == {"type": "max"}
    assert resolved["speed"] == "fast"
    skills = resolve_skills(
        [
            SkillParams(type="anthropic", skill_id="xlsx"),
            SkillParams(type="custom", skill_id="skill_1", version="3"),
        ]
    )
    assert skills == [
        {"type": "anthropic", "skill_id": "xlsx", "version": "latest"},
        {"type": "custom", "skill_id": "skill_1", "version": "3"},
    ]
    with pytest.raises(InvalidRequest, match="twice"):
        resolve_skills([SkillParams(type="anthropic", skill_id="xlsx")] * 2)
