"""The MCP tools offered to the model for one request (pure: the listings come in as data).

Before a model request the driver lists the tools of the agent's MCP servers
(:func:`servers_to_list`, then the router) and hands the listings to :func:`build_offer`, which
keeps the tools each ``mcp_toolset`` enables, sorted by name within each server (servers in the
agent's ``mcp_servers`` order), and names them for the model
(:mod:`control_plane.mcp.names`). The resulting :class:`McpOffer` travels with the
:class:`~control_plane.harness.step.CallModel` it was built for: it is the reverse map from the
names in that request's ``tool_use`` blocks back to ``(server, tool)``.

A server whose tools cannot be listed is left out of the offer and reported once per turn by a
non-fatal ``session.error`` (``mcp_connection_failed_error`` / ``mcp_authentication_failed_error``
with ``mcp_server_name``, ``retry_status: retrying``); it is not listed again in that turn, so its
tools stay away for the rest of the turn and a hung server costs one listing timeout per turn.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from control_plane.harness import event_drafts as ev
from control_plane.harness.agent import AgentSpec, McpServerSpec, permission_of
from control_plane.mcp.models import ServerTools
from control_plane.mcp.names import ToolNameMap

__all__ = ["McpOffer", "OfferedTool", "build_offer", "servers_to_list", "unavailable_server_events"]


@dataclass(frozen=True, slots=True)
class OfferedTool:
    """An MCP tool as offered: ``name`` is what the model sees, ``tool`` the server's own name."""

    name: str
    server: str
    tool: str
    policy: str  # always_allow | always_ask | auto
    description: str
    input_schema: dict[str, Any]

    @property
    def permission(self) -> str:
        return permission_of(self.policy)

    def param(self) -> dict[str, Any]:
        """The Messages API tool definition."""
        schema = copy.deepcopy(self.input_schema)
        schema.setdefault("type", "object")
        tool: dict[str, Any] = {"name": self.name, "input_schema": schema}
        if self.description:
            tool["description"] = self.description
        return tool


@dataclass(frozen=True)
class McpOffer:
    """The MCP tools of one model request, and the servers whose tools could not be listed."""

    tools: tuple[OfferedTool, ...] = ()
    unavailable: tuple[ServerTools, ...] = ()
    _by_name: dict[str, OfferedTool] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._by_name.update((t.name, t) for t in self.tools)

    def lookup(self, name: str) -> OfferedTool | None:
        """The offered tool the model calls ``name``, or ``None``."""
        return self._by_name.get(name)

    def tools_param(self) -> list[dict[str, Any]]:
        return [t.param() for t in self.tools]


def servers_to_list(agent: AgentSpec, down_this_turn: Iterable[str]) -> tuple[McpServerSpec, ...]:
    """The agent's servers worth listing: those not already reported unavailable this turn."""
    down = frozenset(down_this_turn)
    return tuple(s for s in agent.mcp_servers if s.name not in down)


def build_offer(agent: AgentSpec, listings: Sequence[ServerTools]) -> McpOffer:
    """The offer from ``listings`` (one per listed server; servers without one are left out)."""
    by_server = {listing.server: listing for listing in listings}
    names = ToolNameMap(agent.reserved_tool_names)
    tools: list[OfferedTool] = []
    unavailable: list[ServerTools] = []
    for spec in agent.mcp_servers:
        listing = by_server.get(spec.name)
        if listing is None:
            continue
        if not listing.ok:
            unavailable.append(listing)
            continue
        seen: set[str] = set()
        for info in sorted(listing.tools, key=lambda t: t.name):
            enabled, policy = spec.setting(info.name)
            if info.name in seen or not enabled:
                continue
            seen.add(info.name)
            name = names.add(spec.name, info.name)
            if name is not None:
                tools.append(
                    OfferedTool(name, spec.name, info.name, policy, info.description, dict(info.input_schema))
                )
    return McpOffer(tuple(tools), tuple(unavailable))


def unavailable_server_events(offer: McpOffer | None, reported: Iterable[str]) -> tuple[ev.Draft, ...]:
    """One ``session.error`` per unavailable server not yet ``reported`` in this turn."""
    if offer is None:
        return ()
    done = frozenset(reported)
    return tuple(
        ev.mcp_server_error(s.error_type or "mcp_connection_failed_error", s.server, s.message)
        for s in offer.unavailable
        if s.server not in done
    )
