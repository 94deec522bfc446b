"""``/v1/deployments`` and ``/v1/deployment_runs`` — HTTP only.

Each route translates the request into a typed command (:mod:`control_plane.deployments.commands`),
calls one method of :class:`~control_plane.deployments.service.DeploymentService` (which holds the
rules: validation, schedules, runs) and shows the result as the SDK's
``BetaManagedAgentsDeployment`` and ``BetaManagedAgentsDeploymentRun``. A deployment belongs to its
environment: a key limited to environments sees, makes and runs only the deployments (and runs) of
its environments; anything else is a 404 as if unknown.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict

from control_plane.api.caller import CallerDep
from control_plane.api.query import check_limit, page_body, time_bounds
from control_plane.api.sessions import viewer_of
from control_plane.deployments.commands import (
    CreateDeployment,
    DeploymentQuery,
    DeploymentView,
    RunQuery,
    UpdateDeployment,
)
from control_plane.deployments.service import MAX_PAGE, MAX_RUN_PAGE, DeploymentService
from control_plane.errors import InvalidRequest
from control_plane.patch import KEEP
from control_plane.store.base import Resource
from control_plane.timestamps import timestamp

__all__ = ["deployment_json", "deployment_run_json", "deployments_router"]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DeploymentCreate(_Body):
    agent: str | dict[str, Any]
    environment_id: str
    initial_events: list[Any]
    name: str
    budget: dict[str, Any] | None = None
    description: str | None = None
    metadata: dict[str, str] | None = None
    resources: list[Any] | None = None
    schedule: dict[str, Any] | None = None
    vault_ids: list[str] | None = None


class DeploymentUpdate(_Body):
    agent: str | dict[str, Any] | None = None
    environment_id: str | None = None
    initial_events: list[Any] | None = None
    name: str | None = None
    budget: dict[str, Any] | None = None
    description: str | None = None
    metadata: dict[str, str | None] | None = None
    resources: list[Any] | None = None
    schedule: dict[str, Any] | None = None
    vault_ids: list[str] | None = None


def _resource_json(item: dict[str, Any]) -> dict[str, Any]:
    """A resource as configured, minus write-only credentials."""
    return {k: v for k, v in item.items() if k != "authorization_token"}


def deployment_json(view: DeploymentView) -> dict[str, Any]:
    res, body = view.deployment, view.deployment.body
    schedule = body.get("schedule")
    if schedule is not None:
        schedule = {
            **schedule,
            "last_run_at": body.get("last_run_at"),
            "upcoming_runs_at": [timestamp(t) for t in view.upcoming_runs_at],
        }
    return {
        "type": "deployment",
        "id": res.id,
        "agent": body["agent"],
        "environment_id": body["environment_id"],
        "initial_events": body["initial_events"],
        "name": body["name"],
        "description": body.get("description"),
        "metadata": body.get("metadata", {}),
        "resources": [_resource_json(r) for r in body.get("resources", [])],
        "schedule": schedule,
        "status": body["status"],
        "paused_reason": body.get("paused_reason"),
        "vault_ids": body.get("vault_ids", []),
        "budget": body.get("budget"),
        "created_at": timestamp(res.created_at),
        "updated_at": timestamp(res.updated_at),
        "archived_at": timestamp(res.archived_at) if res.archived_at else None,
    }


def deployment_run_json(res: Resource) -> dict[str, Any]:
    body = res.body
    return {
        "type": "deployment_run",
        "id": res.id,
        "deployment_id": body["deployment_id"],
        "agent": body["agent"],
        "session_id": body.get("session_id"),
        "error": body.get("error"),
        "trigger_context": body["trigger_context"],
        "created_at": timestamp(res.created_at),
    }


def _create_command(body: DeploymentCreate) -> CreateDeployment:
    return CreateDeployment(
        agent=body.agent,
        environment_id=body.environment_id,
        initial_events=body.initial_events,
        name=body.name,
        description=body.description,
        metadata=body.metadata or {},
        resources=body.resources or [],
        schedule=body.schedule,
        vault_ids=body.vault_ids or [],
        budget=body.budget,
    )


def _update_command(body: DeploymentUpdate) -> UpdateDeployment:
    sent = body.model_fields_set

    def given(name: str) -> Any:
        return getattr(body, name) if name in sent else KEEP

    for name in ("agent", "environment_id", "initial_events", "name"):
        if name in sent and getattr(body, name) is None:
            raise InvalidRequest(f"{name} cannot be cleared", param=name)
    return UpdateDeployment(
        **{name: given(name) for name in UpdateDeployment.__dataclass_fields__}  # every field: sent or KEEP
    )


class _DeploymentRoutes:
    """The routes, one service call each."""

    def __init__(self, service: DeploymentService) -> None:
        self._service = service

    async def create(self, body: DeploymentCreate, caller: CallerDep) -> dict[str, Any]:
        return deployment_json(await self._service.create(_create_command(body), viewer_of(caller)))

    async def retrieve(self, deployment_id: str, caller: CallerDep) -> dict[str, Any]:
        return deployment_json(await self._service.get(deployment_id, viewer_of(caller)))

    async def update(self, deployment_id: str, body: DeploymentUpdate, caller: CallerDep) -> dict[str, Any]:
        updated = await self._service.update(deployment_id, _update_command(body), viewer_of(caller))
        return deployment_json(updated)

    async def list(
        self,
        request: Request,
        caller: CallerDep,
        limit: int = 20,
        page: str | None = None,
        agent_id: str | None = None,
        include_archived: bool = False,
        status: Literal["active", "paused"] | None = None,
    ) -> dict[str, Any]:
        bounds = time_bounds(request.query_params, exclusive=False)
        query = DeploymentQuery(
            check_limit(limit, MAX_PAGE),
            page,
            agent_id,
            status,
            include_archived,
            bounds.after,
            bounds.before,
        )
        items, next_cursor = await self._service.list_deployments(query, viewer_of(caller))
        return page_body([deployment_json(v) for v in items], next_cursor)

    async def archive(self, deployment_id: str, caller: CallerDep) -> dict[str, Any]:
        return deployment_json(await self._service.archive(deployment_id, viewer_of(caller)))

    async def pause(self, deployment_id: str, caller: CallerDep) -> dict[str, Any]:
        return deployment_json(await self._service.pause(deployment_id, viewer_of(caller)))

    async def unpause(self, deployment_id: str, caller: CallerDep) -> dict[str, Any]:
        return deployment_json(await self._service.unpause(deployment_id, viewer_of(caller)))

    async def run(self, deployment_id: str, caller: CallerDep) -> dict[str, Any]:
        return deployment_run_json(await self._service.run_now(deployment_id, viewer_of(caller)))

    async def retrieve_run(self, deployment_run_id: str, caller: CallerDep) -> dict[str, Any]:
        return deployment_run_json(await self._service.get_run(deployment_run_id, viewer_of(caller)))

    async def list_runs(
        self,
        request: Request,
        caller: CallerDep,
        limit: int = 20,
        page: str | None = None,
        deployment_id: str | None = None,
        has_error: bool | None = None,
        trigger_type: Literal["schedule", "manual"] | None = None,
    ) -> dict[str, Any]:
        bounds = time_bounds(request.query_params)
        query = RunQuery(
            check_limit(limit, MAX_RUN_PAGE), page, deployment_id, has_error, trigger_type,
            bounds.after, bounds.before,
        )  # fmt: skip
        found = await self._service.list_runs(query, viewer_of(caller))
        return page_body([deployment_run_json(r) for r in found.items], found.next_cursor)


def deployments_router(service: DeploymentService) -> APIRouter:
    routes = _DeploymentRoutes(service)
    router = APIRouter()
    deployments, deployment = "/v1/deployments", "/v1/deployments/{deployment_id}"
    router.add_api_route(deployments, routes.create, methods=["POST"])
    router.add_api_route(deployments, routes.list, methods=["GET"])
    router.add_api_route(deployment, routes.retrieve, methods=["GET"])
    router.add_api_route(deployment, routes.update, methods=["POST"])
    for action in ("archive", "pause", "unpause", "run"):
        router.add_api_route(f"{deployment}/{action}", getattr(routes, action), methods=["POST"])
    router.add_api_route("/v1/deployment_runs", routes.list_runs, methods=["GET"])
    router.add_api_route("/v1/deployment_runs/{deployment_run_id}", routes.retrieve_run, methods=["GET"])
    return router
