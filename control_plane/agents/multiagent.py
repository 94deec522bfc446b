"""An agent's ``multiagent`` configuration: checked and resolved (versions pinned) on create/update.

Two forms are accepted (the SDK's ``BetaManagedAgentsMultiagent*Params``):

* ``{"type": "coordinator", "agents": [...]}`` — 1 to 20 roster entries, each an agent id string,
  ``{"type": "agent", "id", "version"?}``, ``{"type": "self"}`` or ``{"type": "advisor", "model"}``.
  Entries name distinct agents (after resolving ``self`` and string forms), at most one ``self``
  and one advisor; a referenced agent must exist (at the version named), must not be archived,
  and must not itself have ``multiagent`` (depth limit 1). Stored resolved: every agent entry is
  ``{"type": "agent", "id", "version"}`` (the latest version when none was named; ``self`` is the
  version being written).
* ``{"type": "multiagent_20261001", ...}`` — mapped onto the same roster: ``subagents`` with
  ``predefined_agents`` (checked and pinned as above) and ``advisor`` ``enabled`` are served;
  ``subagents.inline_agents`` enabled (the default) and ``workflows`` enabled are refused with a
  400 saying so (Outpost runs saved agents only, and no workflow runs).

The session copies the roster with each agent's full definition (``control_plane.sessions.roster``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from control_plane.errors import InvalidRequest, NotFound
from control_plane.store.base import Resource, Resources

__all__ = ["MAX_ROSTER", "resolve_multiagent"]

MAX_ROSTER = 20
_PARAM = "multiagent"


def _bad(message: str) -> InvalidRequest:
    return InvalidRequest(f"multiagent: {message}", param=_PARAM)


async def resolve_multiagent(
    value: Mapping[str, Any] | None, store: Resources, *, self_id: str, self_version: int
) -> dict[str, Any] | None:
    """``value`` checked and resolved for agent ``self_id`` at version ``self_version``."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _bad("must be an object")
    kind = value.get("type")
    if kind == "coordinator":
        agents = value.get("agents")
        if not isinstance(agents, list) or not 1 <= len(agents) <= MAX_ROSTER:
            raise _bad(f"agents must list 1 to {MAX_ROSTER} entries")
        roster = await _roster(agents, store, self_id, self_version, "agents")
        return {"type": "coordinator", "agents": roster}
    if kind == "multiagent_20261001":
        return await _resolve_20261001(value, store, self_id, self_version)
    raise _bad(f"unknown type {kind!r} (expected 'coordinator' or 'multiagent_20261001')")


async def _resolve_20261001(
    value: Mapping[str, Any], store: Resources, self_id: str, self_version: int
) -> dict[str, Any]:
    workflows = _member(value, "workflows")
    if workflows["type"] == "enabled":
        raise _bad("workflows are not supported by Outpost (set workflows to {'type': 'disabled'})")
    advisor = _member(value, "advisor")
    if advisor["type"] == "enabled" and not isinstance(advisor.get("model"), str):
        raise _bad("advisor.model must be a model id")
    subagents = _member(value, "subagents")
    resolved_subagents: dict[str, Any] = {"type": "disabled"}
    if subagents["type"] == "enabled":
        inline = subagents.get("inline_agents") or {"type": "enabled"}  # the API's default
        if not isinstance(inline, Mapping) or inline.get("type") != "disabled":
            raise _bad(
                "inline agents are not supported by Outpost: set subagents.inline_agents to "
                "{'type': 'disabled'} and name saved agents in subagents.predefined_agents"
            )
        predefined = subagents.get("predefined_agents") or []
        if not isinstance(predefined, list) or not 1 <= len(predefined) <= MAX_ROSTER:
            raise _bad(f"subagents.predefined_agents must list 1 to {MAX_ROSTER} agents")
        roster = await _roster(predefined, store, self_id, self_version, "subagents.predefined_agents")
        if any(e["type"] != "agent" for e in roster):
            raise _bad("subagents.predefined_agents takes agent references only")
        resolved_subagents = {
            "type": "enabled",
            "inline_agents": {"type": "disabled"},
            "predefined_agents": roster,
        }
    resolved_advisor: dict[str, Any] = {"type": "disabled"}
    if advisor["type"] == "enabled":
        resolved_advisor = {"type": "enabled", "model": advisor["model"]}
    return {
        "type": "multiagent_20261001",
        "advisor": resolved_advisor,
        "subagents": resolved_subagents,
        "workflows": {"type": "disabled"},
    }


def _member(value: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    member = value.get(name) or {"type": "disabled"}
    if not isinstance(member, Mapping) or member.get("type") not in ("enabled", "disabled"):
        raise _bad(f"{name} must be {{'type': 'enabled' | 'disabled', ...}}")
    return member


async def _roster(
    entries: list[Any], store: Resources, self_id: str, self_version: int, where: str
) -> list[dict[str, Any]]:
    resolved: list[dict[str, Any]] = []
    seen: set[str] = set()
    selves = advisors = 0
    for index, entry in enumerate(entries):
        at = f"{where}[{index}]"
        if isinstance(entry, str):
            entry = {"type": "agent", "id": entry}
        if not isinstance(entry, Mapping):
            raise _bad(f"{at} must be an agent id or an object")
        kind = entry.get("type")
        if kind == "advisor":
            advisors += 1
            if advisors > 1 or not isinstance(entry.get("model"), str) or not entry["model"]:
                raise _bad(f"{at}: at most one advisor, with a model id")
            resolved.append({"type": "advisor", "model": entry["model"]})
            continue
        if kind == "self":
            selves += 1
            if selves > 1:
                raise _bad(f"{at}: at most one 'self' entry")
            agent_id, version = self_id, self_version
        elif kind == "agent" and isinstance(entry.get("id"), str):
            agent_id = entry["id"]
            version = await _checked_version(store, agent_id, entry.get("version"), at, self_id)
        else:
            raise _bad(
                f"{at} must be an agent id, {{'type': 'agent', 'id'}}, {{'type': 'self'}} or an advisor"
            )
        if agent_id in seen:
            raise _bad(f"{at}: agent {agent_id!r} is in the roster twice")
        seen.add(agent_id)
        resolved.append({"type": "agent", "id": agent_id, "version": version})
    return resolved


async def _checked_version(store: Resources, agent_id: str, version: Any, at: str, self_id: str) -> int:
    if version is not None and (not isinstance(version, int) or isinstance(version, bool) or version < 1):
        raise _bad(f"{at}: version must be a positive integer")
    if agent_id == self_id:
        raise _bad(f"{at}: name this agent with {{'type': 'self'}}")
    try:
        latest = await store.get_resource("agent", agent_id)
        agent: Resource = latest if version is None else await store.get_resource("agent", agent_id, version)
    except NotFound:
        which = f"agent {agent_id!r}" + ("" if version is None else f" version {version}")
        raise _bad(f"{at}: {which} does not exist") from None
    if latest.archived_at is not None:
        raise _bad(f"{at}: agent {agent_id!r} is archived")
    if agent.body.get("multiagent") is not None:
        raise _bad(f"{at}: agent {agent_id!r} has a multiagent roster itself (rosters nest one level only)")
    return agent.version
