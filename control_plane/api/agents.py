"""``/v1/agents``: versioned agent configurations — HTTP only.

Each route translates the request into a typed command (:mod:`control_plane.agents.commands`),
calls one method of :class:`~control_plane.agents.service.AgentService` (which holds the rules:
versions, the ``version`` precondition of an update, resolution of the configuration) and shows the
result as the SDK's ``BetaManagedAgentsAgent`` (:func:`~control_plane.api.resources_json.agent_json`).
An update's optional fields are sent or not (``model_fields_set``): not sent is :data:`KEEP`.
Any key may read agents; changing them needs an unscoped key (the router's dependency, in ``app.py``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request

from control_plane.agents.commands import AgentQuery, CreateAgent, UpdateAgent
from control_plane.agents.service import AgentService
from control_plane.api.models import MAX_INT, AgentCreate, AgentUpdate
from control_plane.api.query import check_limit, page_body, time_bounds
from control_plane.api.resources_json import agent_json
from control_plane.patch import KEEP
from control_plane.store.base import Page

__all__ = ["agents_router"]

MAX_PAGE = 100


def _create_command(body: AgentCreate) -> CreateAgent:
    return CreateAgent(
        name=body.name,
        model=body.model,
        description=body.description,
        system=body.system,
        tools=body.tools,
        mcp_servers=body.mcp_servers,
        skills=body.skills,
        metadata=body.metadata,
        execution_identity=body.execution_identity,
        multiagent=body.multiagent,
    )


def _update_command(body: AgentUpdate) -> UpdateAgent:
    """Every field sent (``null`` included) is given; the others are :data:`KEEP`."""
    sent = body.model_fields_set
    return UpdateAgent(
        version=body.version,
        name=body.name if "name" in sent else KEEP,
        model=body.model if "model" in sent else KEEP,
        description=body.description if "description" in sent else KEEP,
        system=body.system if "system" in sent else KEEP,
        tools=body.tools if "tools" in sent else KEEP,
        mcp_servers=body.mcp_servers if "mcp_servers" in sent else KEEP,
        skills=body.skills if "skills" in sent else KEEP,
        metadata=body.metadata if "metadata" in sent else KEEP,
        execution_identity=body.execution_identity if "execution_identity" in sent else KEEP,
        multiagent=body.multiagent if "multiagent" in sent else KEEP,
    )


def _page_json(page: Page) -> dict[str, Any]:
    return page_body([agent_json(r) for r in page.items], page.next_cursor)


class _AgentRoutes:
    """The routes, one service call each."""

    def __init__(self, service: AgentService) -> None:
        self._service = service

    async def create(self, body: AgentCreate) -> dict[str, Any]:
        return agent_json(await self._service.create(_create_command(body)))

    async def retrieve(
        self, agent_id: str, version: int | None = Query(None, ge=1, le=MAX_INT)
    ) -> dict[str, Any]:
        return agent_json(await self._service.get(agent_id, version))

    async def update(self, agent_id: str, body: AgentUpdate) -> dict[str, Any]:
        return agent_json(await self._service.update(agent_id, _update_command(body)))

    async def list_(
        self, request: Request, limit: int = 20, page: str | None = None, include_archived: bool = False
    ) -> dict[str, Any]:
        bounds = time_bounds(request.query_params)
        query = AgentQuery(
            limit=check_limit(limit, MAX_PAGE),
            cursor=page,
            include_archived=include_archived,
            created_after=bounds.after,
            created_before=bounds.before,
        )
        return _page_json(await self._service.list_agents(query))

    async def archive(self, agent_id: str) -> dict[str, Any]:
        return agent_json(await self._service.archive(agent_id))

    async def versions(self, agent_id: str, limit: int = 20, page: str | None = None) -> dict[str, Any]:
        found = await self._service.versions(agent_id, limit=check_limit(limit, MAX_PAGE), cursor=page)
        return _page_json(found)


def agents_router(service: AgentService) -> APIRouter:
    routes = _AgentRoutes(service)
    router = APIRouter()
    router.add_api_route("/v1/agents", routes.create, methods=["POST"])
    router.add_api_route("/v1/agents/{agent_id}", routes.retrieve, methods=["GET"])
    router.add_api_route("/v1/agents/{agent_id}", routes.update, methods=["POST"])
    router.add_api_route("/v1/agents", routes.list_, methods=["GET"])
    router.add_api_route("/v1/agents/{agent_id}/archive", routes.archive, methods=["POST"])
    router.add_api_route("/v1/agents/{agent_id}/versions", routes.versions, methods=["GET"])
    return router
