"""``/v1/environments``: where sessions run — HTTP only.

Each route translates the request into a typed command (:mod:`control_plane.environments.commands`),
calls one method of :class:`~control_plane.environments.service.EnvironmentService` (which holds the
rules: ``self_hosted`` only, networking, who may change what, archived environments) and shows the
result as the SDK's ``BetaEnvironment`` (:func:`environment_json`). An unknown environment is a 404
with ``details.error_code: environment_not_found``; changing an archived one a 400 with
``environment_archived`` (the domain errors' ``error_code``, mapped in :mod:`control_plane.api.errors`).

Every environment object carries an Outpost field, ``edges: {"enrolled": N, "connected": M}``: its
edges that are not revoked, and how many of them have a tunnel up to any control-plane process on
the store (:mod:`control_plane.edge_counts`). The SDK's ``BetaEnvironment`` keeps it as an extra
attribute.

An environment-scoped API key sees only its environments (another one is a 404
``environment_not_found``, as if unknown; its listing is one page); creating, changing,
archiving and deleting environments needs an unscoped ``read_write`` or ``admin`` key (403).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from control_plane.api.caller import CallerDep
from control_plane.api.models import EnvironmentCreate, EnvironmentUpdate
from control_plane.api.query import check_limit, page_body
from control_plane.api.sessions import viewer_of
from control_plane.environments.commands import (
    CreateEnvironment,
    EnvironmentQuery,
    EnvironmentView,
    UpdateEnvironment,
)
from control_plane.environments.service import SELF_HOSTED, EnvironmentService
from control_plane.patch import KEEP
from control_plane.timestamps import timestamp

__all__ = ["environment_json", "environments_router"]

MAX_PAGE = 100


def environment_json(view: EnvironmentView) -> dict[str, Any]:
    res, body = view.environment, view.environment.body
    return {
        "type": "environment",
        "id": res.id,
        "name": body["name"],
        "description": body.get("description"),
        "metadata": body.get("metadata", {}),
        "scope": body.get("scope"),
        "config": body.get("config") or dict(SELF_HOSTED),
        "created_at": timestamp(res.created_at),
        "updated_at": timestamp(res.updated_at),
        "archived_at": timestamp(res.archived_at) if res.archived_at else None,
        "edges": view.edges.to_json(),
    }


def _update_command(body: EnvironmentUpdate) -> UpdateEnvironment:
    sent = body.model_fields_set
    return UpdateEnvironment(
        name=body.name,
        description=body.description if "description" in sent else KEEP,
        config=body.config,
        metadata=body.metadata,
        scope=body.scope,
    )


class _EnvironmentRoutes:
    """The routes, one service call each; the caller's key is a ``Viewer`` to the service."""

    def __init__(self, service: EnvironmentService) -> None:
        self._service = service

    async def create(self, body: EnvironmentCreate, caller: CallerDep) -> dict[str, Any]:
        command = CreateEnvironment(body.name, body.description, body.config, body.metadata, body.scope)
        return environment_json(await self._service.create(command, viewer_of(caller)))

    async def retrieve(self, environment_id: str, caller: CallerDep) -> dict[str, Any]:
        return environment_json(await self._service.get(environment_id, viewer_of(caller)))

    async def update(self, environment_id: str, body: EnvironmentUpdate, caller: CallerDep) -> dict[str, Any]:
        viewer = viewer_of(caller)
        return environment_json(await self._service.update(environment_id, _update_command(body), viewer))

    async def list_(
        self, caller: CallerDep, limit: int = 20, page: str | None = None, include_archived: bool = False
    ) -> dict[str, Any]:
        query = EnvironmentQuery(check_limit(limit, MAX_PAGE), page, include_archived)
        found = await self._service.list_environments(query, viewer_of(caller))
        return page_body([environment_json(v) for v in found.items], found.next_cursor)

    async def archive(self, environment_id: str, caller: CallerDep) -> dict[str, Any]:
        return environment_json(await self._service.archive(environment_id, viewer_of(caller)))

    async def delete(self, environment_id: str, caller: CallerDep) -> dict[str, Any]:
        await self._service.delete(environment_id, viewer_of(caller))
        return {"id": environment_id, "type": "environment_deleted"}


def environments_router(service: EnvironmentService) -> APIRouter:
    routes = _EnvironmentRoutes(service)
    router = APIRouter()
    router.add_api_route("/v1/environments", routes.create, methods=["POST"])
    router.add_api_route("/v1/environments/{environment_id}", routes.retrieve, methods=["GET"])
    router.add_api_route("/v1/environments/{environment_id}", routes.update, methods=["POST"])
    router.add_api_route("/v1/environments", routes.list_, methods=["GET"])
    router.add_api_route("/v1/environments/{environment_id}/archive", routes.archive, methods=["POST"])
    router.add_api_route("/v1/environments/{environment_id}", routes.delete, methods=["DELETE"])
    return router
