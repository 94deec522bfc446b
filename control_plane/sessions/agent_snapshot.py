"""A session's copy of its agent: taken at creation (optionally with overrides), changed by updates.

The snapshot is the agent's configuration (:data:`AGENT_CONFIG_FIELDS`, with the defaults the
agent's view shows) plus ``{"type": "agent", "id", "version"}``, in the shape of the SDK's
``BetaManagedAgentsSessionAgent``. Overrides and updates are resolved exactly as an agent's own
fields are (:mod:`control_plane.agents.configuration`): tools again against the servers they use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from control_plane.agents.configuration import (
    McpServerParams,
    ModelConfigParams,
    SkillParams,
    ToolParams,
    resolve_mcp_servers,
    resolve_model,
    resolve_skills,
    resolve_tools,
    stored_tool_params,
)
from control_plane.outbound import OutboundGuard
from control_plane.patch import KEEP, Keep  # re-exported: the sessions' name for them
from control_plane.store.base import Resource

__all__ = [
    "AGENT_CONFIG_FIELDS",
    "KEEP",
    "AgentChange",
    "AgentOverrides",
    "Keep",
    "agent_config",
    "changed_snapshot",
    "overridden_snapshot",
    "session_agent_snapshot",
]

AGENT_CONFIG_FIELDS: tuple[str, ...] = (
    "name",
    "description",
    "model",
    "system",
    "tools",
    "mcp_servers",
    "skills",
    "execution_identity",
    "multiagent",
)
"""The agent body fields a session snapshots (everything but ``metadata``)."""


@dataclass(frozen=True, slots=True)
class AgentOverrides:
    """``agent_with_overrides`` of a session create; ``None``: the agent's own value."""

    model: str | ModelConfigParams | None = None
    system: str | Keep | None = KEEP  # None or "": no system prompt
    tools: Sequence[ToolParams] | None = None
    mcp_servers: Sequence[McpServerParams] | None = None
    skills: Sequence[SkillParams] | None = None


@dataclass(frozen=True, slots=True)
class AgentChange:
    """``agent`` of a session update: the lists given replace the snapshot's (``None``: kept)."""

    tools: Sequence[ToolParams] | None = None
    mcp_servers: Sequence[McpServerParams] | None = None


def agent_config(body: Mapping[str, Any]) -> dict[str, Any]:
    """The agent's configuration fields from its stored body, with the defaults its view shows."""
    return {
        "name": body["name"],
        "description": body.get("description"),
        "model": body["model"],
        "system": body.get("system"),
        "tools": body.get("tools", []),
        "mcp_servers": body.get("mcp_servers", []),
        "skills": body.get("skills", []),
        "execution_identity": body.get("execution_identity") or {"type": "service_account"},
        "multiagent": body.get("multiagent"),
    }


def session_agent_snapshot(agent: Resource) -> dict[str, Any]:
    """The session's copy of the agent (``BetaManagedAgentsSessionAgent``)."""
    return {"type": "agent", "id": agent.id, "version": agent.version, **agent_config(agent.body)}


def overridden_snapshot(
    agent: Resource, overrides: AgentOverrides | None, outbound: OutboundGuard
) -> dict[str, Any]:
    """The snapshot of ``agent`` with ``overrides`` applied (tools resolved again whenever there
    are overrides, against the servers in force)."""
    snapshot = session_agent_snapshot(agent)
    if overrides is None:
        return snapshot
    if overrides.model is not None:
        snapshot["model"] = resolve_model(overrides.model)
    if not isinstance(overrides.system, Keep):
        snapshot["system"] = overrides.system or None
    servers = (
        resolve_mcp_servers(overrides.mcp_servers, outbound)
        if overrides.mcp_servers is not None
        else snapshot["mcp_servers"]
    )
    tools = overrides.tools if overrides.tools is not None else stored_tool_params(snapshot["tools"])
    snapshot["mcp_servers"] = servers
    snapshot["tools"] = resolve_tools(tools, servers)
    if overrides.skills is not None:
        snapshot["skills"] = resolve_skills(overrides.skills)
    return snapshot


def changed_snapshot(old: Mapping[str, Any], change: AgentChange, outbound: OutboundGuard) -> dict[str, Any]:
    """``old`` with the tools and servers of ``change`` (tools resolved again in any case)."""
    servers = (
        resolve_mcp_servers(change.mcp_servers, outbound)
        if change.mcp_servers is not None
        else old["mcp_servers"]
    )
    tools = change.tools if change.tools is not None else stored_tool_params(old["tools"])
    return {**old, "mcp_servers": servers, "tools": resolve_tools(tools, servers)}
