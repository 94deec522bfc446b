"""``/v1/sessions``: create, read, list, update, archive and delete sessions — HTTP only.

Each route translates the request into a typed command (:mod:`control_plane.sessions.commands`),
calls one method of :class:`~control_plane.sessions.service.SessionService` (which holds the rules:
agent snapshots, environments, vaults, repositories, events, the runner) and shows the result as
the SDK's ``BetaManagedAgentsSession`` (:func:`~control_plane.api.resources_json.session_view_json`).
Page tokens are the store's cursors wrapped with their direction (``{"d": "next"|"prev", "c"}``).

An environment-scoped API key lists only its environments' sessions, and any other session is a
404 as if it did not exist (:func:`viewer_of`).
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request

from control_plane.api.caller import Caller, CallerDep
from control_plane.api.models import AgentRef, AgentWithOverrides, SessionCreate, SessionUpdate
from control_plane.api.query import check_limit, decode_cursor, encode_cursor, query_list, time_bounds
from control_plane.api.resources_json import session_view_json
from control_plane.errors import InvalidRequest
from control_plane.sessions.agent_snapshot import KEEP, AgentChange, AgentOverrides
from control_plane.sessions.commands import (
    AgentChoice,
    CreateSession,
    SessionPage,
    SessionQuery,
    UpdateSession,
    Viewer,
)
from control_plane.sessions.events import SessionStatus
from control_plane.sessions.service import SessionService
from control_plane.store.base import Order

__all__ = ["sessions_router", "viewer_of"]

MAX_PAGE = 100
_STATUSES = frozenset(s.value for s in SessionStatus)


def viewer_of(caller: Caller) -> Viewer:
    """What the caller's key may see of sessions (the environments it is limited to)."""
    return Viewer(caller.environment_ids)


def _agent_choice(agent: str | AgentRef | AgentWithOverrides) -> AgentChoice:
    if isinstance(agent, str):
        return AgentChoice(agent)
    if isinstance(agent, AgentRef):
        return AgentChoice(agent.id, agent.version)
    overrides = AgentOverrides(
        model=agent.model,
        system=agent.system if "system" in agent.model_fields_set else KEEP,
        tools=agent.tools,
        mcp_servers=agent.mcp_servers,
        skills=agent.skills,
    )
    return AgentChoice(agent.id, agent.version, overrides)


def _create_command(body: SessionCreate) -> CreateSession:
    return CreateSession(
        agent=_agent_choice(body.agent),
        environment_id=body.environment_id,
        title=body.title,
        metadata=body.metadata,
        initial_events=body.initial_events,
        vault_ids=body.vault_ids,
        resources=body.resources,
        budget=body.budget,
    )


def _update_command(body: SessionUpdate) -> UpdateSession:
    sent = body.model_fields_set
    agent = None
    if body.agent is not None:
        given = body.agent.model_fields_set
        agent = AgentChange(
            tools=(body.agent.tools or []) if "tools" in given else None,
            mcp_servers=(body.agent.mcp_servers or []) if "mcp_servers" in given else None,
        )
    return UpdateSession(
        agent=agent,
        title=body.title if "title" in sent else KEEP,
        metadata=body.metadata,
        budget=body.budget if "budget" in sent else KEEP,
        vault_ids=body.vault_ids if "vault_ids" in sent else KEEP,
    )


def _page_position(page: str | None) -> tuple[bool, str | None]:
    """``(forward, store cursor)`` of a page token (none: the first page, forward)."""
    if not page:
        return True, None
    obj = decode_cursor(page)
    if obj.get("d") not in ("next", "prev") or not isinstance(obj.get("c"), str):
        raise InvalidRequest("page: invalid page cursor", param="page")
    return obj["d"] == "next", str(obj["c"])


def _page_json(page: SessionPage) -> dict[str, Any]:
    return {
        "data": [session_view_json(v) for v in page.items],
        "next_page": encode_cursor({"d": "next", "c": page.next_cursor}) if page.next_cursor else None,
        "prev_page": encode_cursor({"d": "prev", "c": page.prev_cursor}) if page.prev_cursor else None,
    }


class _SessionRoutes:
    """The routes, one service call each."""

    def __init__(self, service: SessionService) -> None:
        self._service = service

    async def create(self, body: SessionCreate, caller: CallerDep) -> dict[str, Any]:
        view = await self._service.create(_create_command(body), viewer_of(caller))
        return session_view_json(view)

    async def retrieve(self, session_id: str, caller: CallerDep) -> dict[str, Any]:
        return session_view_json(await self._service.get(session_id, viewer_of(caller)))

    async def list_(
        self,
        request: Request,
        caller: CallerDep,
        limit: int = 20,
        page: str | None = None,
        order: Literal["asc", "desc"] = "desc",
        include_archived: bool = False,
        agent_id: str | None = None,
        agent_version: int | None = None,
        deployment_id: str | None = None,
        memory_store_id: str | None = None,
    ) -> dict[str, Any]:
        limit = check_limit(limit, MAX_PAGE)
        statuses = query_list(request.query_params, "statuses", allowed=_STATUSES)
        bounds = time_bounds(request.query_params)
        forward, cursor = _page_position(page)
        query = SessionQuery(
            limit=limit,
            cursor=cursor,
            forward=forward,
            order=Order(order),
            include_archived=include_archived,
            statuses=frozenset(SessionStatus(s) for s in statuses),
            agent_id=agent_id,
            agent_version=agent_version,
            deployment_id=deployment_id,
            memory_store_id=memory_store_id,
            created_after=bounds.after,
            created_before=bounds.before,
        )
        return _page_json(await self._service.list_sessions(query, viewer_of(caller)))

    async def update(self, session_id: str, body: SessionUpdate, caller: CallerDep) -> dict[str, Any]:
        view = await self._service.update(session_id, _update_command(body), viewer_of(caller))
        return session_view_json(view)

    async def archive(self, session_id: str, caller: CallerDep) -> dict[str, Any]:
        return session_view_json(await self._service.archive(session_id, viewer_of(caller)))

    async def delete(self, session_id: str, caller: CallerDep) -> dict[str, Any]:
        await self._service.delete(session_id, viewer_of(caller))
        return {"id": session_id, "type": "session_deleted"}


def sessions_router(service: SessionService) -> APIRouter:
    routes = _SessionRoutes(service)
    router = APIRouter()
    router.add_api_route("/v1/sessions", routes.create, methods=["POST"])
    router.add_api_route("/v1/sessions/{session_id}", routes.retrieve, methods=["GET"])
    router.add_api_route("/v1/sessions", routes.list_, methods=["GET"])
    router.add_api_route("/v1/sessions/{session_id}", routes.update, methods=["POST"])
    router.add_api_route("/v1/sessions/{session_id}/archive", routes.archive, methods=["POST"])
    router.add_api_route("/v1/sessions/{session_id}", routes.delete, methods=["DELETE"])
    return router
