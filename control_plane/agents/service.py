"""Agents: versioned configurations, and the rules, whoever asks (the HTTP API today).

Every change to an agent makes a new version (the store keeps the old ones: :meth:`AgentService.get`
with a version, :meth:`AgentService.versions`). An update carrying ``version`` only applies if
that is still the current version (else :class:`VersionConflict`); without one it applies on top
of whatever is current (retried a few times, then :class:`Conflict`). Lists are replaced whole,
``metadata`` is patched, tools are resolved again against the servers in force, and an update that
changes nothing makes no new version. An archived agent takes no update (nor new sessions, which
:class:`~control_plane.sessions.service.SessionService` checks).

``skills`` are checked against the skill store (:class:`~control_plane.skills.SkillCatalog`) on
create and update: a custom skill that does not exist at the version named is a 400 naming it,
and Anthropic's own skills are refused (Outpost has none). :meth:`AgentService.pin_skills` pins
``latest`` to a version id when a session starts.

A package of its own, not a module of ``sessions/``: agents are a resource family with their own
routes, and ``sessions/`` only reads them (a session snapshots its agent). The configuration's
parts and their resolution stay in :mod:`control_plane.agents.configuration`, which both use.
The service depends on the store's :class:`Resources` role, a clock and the outbound rules (the
check of direct MCP server URLs), never on a store backend nor on the HTTP layer.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import datetime
from typing import Any

from control_plane.agents.commands import AgentQuery, CreateAgent, Model, UpdateAgent
from control_plane.agents.configuration import (
    resolve_execution_identity,
    resolve_mcp_servers,
    resolve_model,
    resolve_skills,
    resolve_tools,
    stored_tool_params,
)
from control_plane.agents.multiagent import resolve_multiagent
from control_plane.errors import Conflict, InvalidRequest, NotFound, VersionConflict
from control_plane.metadata import apply_metadata_patch, check_metadata
from control_plane.outbound import OutboundGuard
from control_plane.patch import Keep
from control_plane.skills import LATEST, SkillCatalog
from control_plane.store.base import Page, Resource, Resources

__all__ = ["AgentService", "new_agent_id"]

_UPDATE_ATTEMPTS = 5


def new_agent_id() -> str:
    return "agent_" + secrets.token_hex(12)


class AgentService:
    """``outbound``: the check of direct MCP server URLs (default: no private networks).
    ``skills``: where the skills agents name are looked up (default: the skills in ``store``)."""

    def __init__(
        self,
        store: Resources,
        clock: Callable[[], datetime],
        *,
        outbound: OutboundGuard | None = None,
        skills: SkillCatalog | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._outbound = outbound or OutboundGuard()
        self._skills = skills or SkillCatalog(store)

    async def create(self, command: CreateAgent) -> Resource:
        agent_id = new_agent_id()
        multiagent = await resolve_multiagent(
            command.multiagent, self._store, self_id=agent_id, self_version=1
        )
        servers = resolve_mcp_servers(command.mcp_servers, self._outbound)
        body = {
            "name": command.name,
            "description": command.description or None,
            "model": resolve_model(command.model),
            "system": command.system or None,
            "tools": resolve_tools(command.tools, servers),
            "mcp_servers": servers,
            "skills": await self._checked_skills(resolve_skills(command.skills)),
            "metadata": check_metadata(dict(command.metadata)),
            "execution_identity": resolve_execution_identity(command.execution_identity),
            "multiagent": multiagent,
        }
        return await self._store.create_resource("agent", agent_id, body, self._clock())

    async def get(self, agent_id: str, version: int | None = None) -> Resource:
        """The agent at ``version`` (``None``: the latest)."""
        return await self._store.get_resource("agent", agent_id, version)

    async def for_new_session(self, agent_id: str, version: int | None) -> Resource:
        """The agent version a new session snapshots (``None``: the latest); an archived agent
        starts no session."""
        latest = await self._store.get_resource("agent", agent_id)
        if latest.archived_at is not None:
            raise InvalidRequest(f"agent {agent_id!r} is archived", param="agent")
        if version is None:
            return latest
        return await self._store.get_resource("agent", agent_id, version)

    async def list_agents(self, query: AgentQuery) -> Page:
        return await self._store.list_resources(
            "agent",
            created_after=query.created_after,
            created_before=query.created_before,
            include_archived=query.include_archived,
            limit=query.limit,
            cursor=query.cursor,
        )

    async def update(self, agent_id: str, command: UpdateAgent) -> Resource:
        for _ in range(_UPDATE_ATTEMPTS):
            current = await self._store.get_resource("agent", agent_id)
            if current.archived_at is not None:
                raise InvalidRequest(
                    f"agent {agent_id!r} is archived and cannot be updated", param="agent_id"
                )
            if command.version is not None and command.version != current.version:
                raise VersionConflict("agent", agent_id, command.version, current.version)
            new = self._updated_body(current.body, command)
            if not isinstance(command.multiagent, Keep):
                new["multiagent"] = await resolve_multiagent(
                    command.multiagent, self._store, self_id=agent_id, self_version=current.version + 1
                )
            if not isinstance(command.skills, Keep):
                await self._checked_skills(new["skills"])
            if new == current.body:
                return current
            try:
                return await self._store.update_resource(
                    "agent", agent_id, new, self._clock(), expected_version=current.version, keep_history=True
                )
            except VersionConflict:
                if command.version is not None:
                    raise
                continue  # someone else updated it meanwhile: apply ours on top of theirs
        raise Conflict(f"agent {agent_id!r} kept changing during the update; retry")

    async def archive(self, agent_id: str) -> Resource:
        return await self._store.archive_resource("agent", agent_id, self._clock())

    async def versions(self, agent_id: str, *, limit: int, cursor: str | None) -> Page:
        """The agent's versions, a page at a time."""
        return await self._store.list_resource_versions("agent", agent_id, limit=limit, cursor=cursor)

    async def _checked_skills(self, skills: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``skills`` (resolved) if every one exists at the version it names; else a 400 naming it."""
        await self.pin_skills(skills)
        return skills

    async def pin_skills(
        self, skills: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The skills (resolved) with each version pinned (``latest`` made the version id it is
        now), and what the model is offered of each: ``{skill_id, version, name, description}``.
        A skill or version that does not exist, or one of Anthropic's own skills (Outpost has
        none), is a 400 naming it."""
        pinned: list[dict[str, Any]] = []
        offers: list[dict[str, Any]] = []
        for index, skill in enumerate(skills):
            where = f"skills[{index}]"
            if skill["type"] == "anthropic":
                raise InvalidRequest(
                    f"{where}: Anthropic's own skills ({skill['skill_id']!r}) are not available in Outpost; "
                    "upload the skill's directory (client.beta.skills.create) and name it with type 'custom'",
                    param="skills",
                )
            try:
                version = await self._skills.version(skill["skill_id"], skill.get("version") or LATEST)
            except NotFound as exc:
                raise InvalidRequest(f"{where}: {exc}", param="skills") from None
            pinned.append({**skill, "version": version.id})
            offers.append(
                {
                    "skill_id": skill["skill_id"],
                    "version": version.id,
                    "name": version.body["name"],
                    "description": version.body["description"],
                }
            )
        return pinned, offers

    def _updated_body(self, current: dict[str, Any], command: UpdateAgent) -> dict[str, Any]:
        """``current`` with the fields ``command`` sets (tools resolved again in any case)."""
        new = dict(current)
        if not isinstance(command.name, Keep):
            if command.name is None:
                raise InvalidRequest("name cannot be cleared", param="name")
            new["name"] = command.name
        if not isinstance(command.model, Keep):
            new["model"] = _updated_model(current, command.model)
        if not isinstance(command.description, Keep):
            new["description"] = command.description or None
        if not isinstance(command.system, Keep):
            new["system"] = command.system or None
        servers = (
            current.get("mcp_servers", [])
            if isinstance(command.mcp_servers, Keep)
            else resolve_mcp_servers(command.mcp_servers or [], self._outbound)
        )
        tools = stored_tool_params(current.get("tools")) if isinstance(command.tools, Keep) else command.tools
        new["mcp_servers"] = servers
        new["tools"] = resolve_tools(tools or [], servers)
        if not isinstance(command.skills, Keep):
            new["skills"] = resolve_skills(command.skills or [])
        if not isinstance(command.metadata, Keep):
            patch = dict(command.metadata) if command.metadata is not None else None
            new["metadata"] = apply_metadata_patch(current.get("metadata", {}), patch)
        if not isinstance(command.execution_identity, Keep):
            new["execution_identity"] = resolve_execution_identity(command.execution_identity)
        return new


def _updated_model(current: dict[str, Any], model: Model | None) -> dict[str, Any]:
    """The resolved model; an object that leaves ``effort`` out keeps the current effort."""
    if model is None:
        raise InvalidRequest("model cannot be cleared", param="model")
    resolved = resolve_model(model)
    effort_sent = not isinstance(model, str) and "effort" in model.model_fields_set
    if resolved["effort"] is None and not effort_sent:
        resolved["effort"] = current.get("model", {}).get("effort")
    return resolved
