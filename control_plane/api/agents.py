"""``/v1/agents``: versioned agent configurations.

Every change to an agent makes a new version (the store keeps the old ones, readable with
``?version=`` and listed by ``/versions``). An update carrying ``version`` only applies if that is
still the current version (else 409 ``conflict_error``); without one it applies to whatever is
current. Arrays are replaced whole, ``metadata`` is patched, and an update that changes nothing
makes no new version.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Query, Request

from control_plane.api.errors import ApiError
from control_plane.api.models import (
    MAX_INT,
    AgentCreate,
    AgentUpdate,
    apply_metadata_patch,
    check_metadata,
)
from control_plane.api.query import check_limit, time_bounds
from control_plane.api.resources_json import agent_json
from control_plane.api.wire import page_body
from control_plane.errors import InvalidRequest, VersionConflict
from control_plane.outbound import OutboundGuard
from control_plane.sessions.agent_config import (
    resolve_execution_identity,
    resolve_mcp_servers,
    resolve_model,
    resolve_skills,
    resolve_tools,
    stored_tool_params,  # re-exported
)
from control_plane.store.base import Resources

__all__ = ["agents_router", "new_agent_id", "stored_tool_params"]

MAX_PAGE = 100
_UPDATE_ATTEMPTS = 5


def new_agent_id() -> str:
    return "agent_" + secrets.token_hex(12)


def _refuse_multiagent(value: object) -> None:
    if value is not None:
        raise InvalidRequest(
            "multiagent: multiagent orchestration is not supported by Outpost yet", param="multiagent"
        )


def _updated_body(current: dict[str, Any], body: AgentUpdate, outbound: OutboundGuard) -> dict[str, Any]:
    """The new agent body: ``current`` with the fields ``body`` sets."""
    sent = body.model_fields_set
    new = dict(current)
    if "name" in sent:
        if body.name is None:
            raise InvalidRequest("name cannot be cleared", param="name")
        new["name"] = body.name
    if "model" in sent:
        if body.model is None:
            raise InvalidRequest("model cannot be cleared", param="model")
        model = resolve_model(body.model)
        effort_sent = not isinstance(body.model, str) and "effort" in body.model.model_fields_set
        if model["effort"] is None and not effort_sent:
            model["effort"] = current.get("model", {}).get("effort")  # omitted effort is preserved
        new["model"] = model
    if "description" in sent:
        new["description"] = body.description or None
    if "system" in sent:
        new["system"] = body.system or None
    servers = (
        resolve_mcp_servers(body.mcp_servers or [], outbound)
        if "mcp_servers" in sent
        else current.get("mcp_servers", [])
    )
    tools = (body.tools or []) if "tools" in sent else stored_tool_params(current.get("tools"))
    new["mcp_servers"] = servers
    new["tools"] = resolve_tools(tools, servers)
    if "skills" in sent:
        new["skills"] = resolve_skills(body.skills or [])
    if "metadata" in sent:
        new["metadata"] = apply_metadata_patch(current.get("metadata", {}), body.metadata)
    if "execution_identity" in sent:
        new["execution_identity"] = resolve_execution_identity(body.execution_identity)
    if "multiagent" in sent:
        _refuse_multiagent(body.multiagent)
        new["multiagent"] = None
    return new


def agents_router(
    store: Resources, clock: Callable[[], datetime], outbound: OutboundGuard | None = None
) -> APIRouter:
    """``outbound``: the check of direct MCP server URLs (default: no private networks)."""
    router = APIRouter()
    guard = outbound or OutboundGuard()

    @router.post("/v1/agents")
    async def create(body: AgentCreate) -> dict[str, Any]:
        _refuse_multiagent(body.multiagent)
        servers = resolve_mcp_servers(body.mcp_servers, guard)
        stored = {
            "name": body.name,
            "description": body.description or None,
            "model": resolve_model(body.model),
            "system": body.system or None,
            "tools": resolve_tools(body.tools, servers),
            "mcp_servers": servers,
            "skills": resolve_skills(body.skills),
            "metadata": check_metadata(body.metadata),
            "execution_identity": resolve_execution_identity(body.execution_identity),
            "multiagent": None,
        }
        return agent_json(await store.create_resource("agent", new_agent_id(), stored, clock()))

    @router.get("/v1/agents/{agent_id}")
    async def retrieve(agent_id: str, version: int | None = Query(None, ge=1, le=MAX_INT)) -> dict[str, Any]:
        return agent_json(await store.get_resource("agent", agent_id, version))

    @router.post("/v1/agents/{agent_id}")
    async def update(agent_id: str, body: AgentUpdate) -> dict[str, Any]:
        for _ in range(_UPDATE_ATTEMPTS):
            current = await store.get_resource("agent", agent_id)
            if current.archived_at is not None:
                raise InvalidRequest(
                    f"agent {agent_id!r} is archived and cannot be updated", param="agent_id"
                )
            if body.version is not None and body.version != current.version:
                raise VersionConflict("agent", agent_id, body.version, current.version)
            new = _updated_body(current.body, body, guard)
            if new == current.body:
                return agent_json(current)
            try:
                res = await store.update_resource(
                    "agent", agent_id, new, clock(), expected_version=current.version, keep_history=True
                )
            except VersionConflict:
                if body.version is not None:
                    raise
                continue  # someone else updated it meanwhile: apply ours on top of theirs
            return agent_json(res)
        raise ApiError(409, f"agent {agent_id!r} kept changing during the update; retry")

    @router.get("/v1/agents")
    async def list_(
        request: Request, limit: int = 20, page: str | None = None, include_archived: bool = False
    ) -> dict[str, Any]:
        bounds = time_bounds(request.query_params)
        result = await store.list_resources(
            "agent",
            created_after=bounds.after,
            created_before=bounds.before,
            include_archived=include_archived,
            limit=check_limit(limit, MAX_PAGE),
            cursor=page,
        )
        return page_body([agent_json(r) for r in result.items], result.next_cursor)

    @router.post("/v1/agents/{agent_id}/archive")
    async def archive(agent_id: str) -> dict[str, Any]:
        return agent_json(await store.archive_resource("agent", agent_id, clock()))

    @router.get("/v1/agents/{agent_id}/versions")
    async def versions(agent_id: str, limit: int = 20, page: str | None = None) -> dict[str, Any]:
        result = await store.list_resource_versions(
            "agent", agent_id, limit=check_limit(limit, MAX_PAGE), cursor=page
        )
        return page_body([agent_json(r) for r in result.items], result.next_cursor)

    return router
