"""``/v1/dreams`` (create, retrieve, list, archive, cancel) — HTTP only.

Each route translates the request into a :mod:`control_plane.dreams.commands` value, calls one
method of :class:`~control_plane.dreams.service.DreamService` and shows the result as the SDK's
``BetaDream``. A key limited to environments sees the dreams whose sessions are all in its
environments, and may dream over those sessions (``create_new`` only: ``update_existing`` writes a
memory store, which needs an unscoped ``read_write`` or ``admin`` key, as the memory-store routes do).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from control_plane.api.caller import CallerDep
from control_plane.api.query import page_body, query_list, time_bounds
from control_plane.dreams.commands import CreateDream, DreamQuery
from control_plane.dreams.service import STATUSES, DreamService, dream_usage
from control_plane.environments.commands import Viewer
from control_plane.errors import InvalidRequest
from control_plane.store.base import Resource
from control_plane.timestamps import timestamp

__all__ = ["dream_json", "dreams_router"]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MemoryStoreInput(_Body):
    type: Literal["memory_store"]
    memory_store_id: str


class SessionsInput(_Body):
    type: Literal["sessions"]
    session_ids: list[str]


class ModelConfig(_Body):
    id: str
    speed: Literal["standard", "fast"] | None = None


class CreateNew(_Body):
    type: Literal["create_new"]


class UpdateExisting(_Body):
    type: Literal["update_existing"]
    memory_store_id: str


DreamInput = Annotated[MemoryStoreInput | SessionsInput, Field(discriminator="type")]
OutputBehavior = Annotated[CreateNew | UpdateExisting, Field(discriminator="type")]


class DreamCreate(_Body):
    inputs: list[DreamInput]
    model: str | ModelConfig
    instructions: str | None = None
    output_behavior: OutputBehavior | None = None


def _ended_at(value: Any) -> str | None:
    return timestamp(datetime.fromisoformat(value)) if isinstance(value, str) else None


def dream_json(res: Resource) -> dict[str, Any]:
    body = res.body
    return {
        "type": "dream",
        "id": res.id,
        "status": body["status"],
        "inputs": body["inputs"],
        "model": body["model"],
        "instructions": body.get("instructions"),
        "output_behavior": body["output_behavior"],
        "outputs": body.get("outputs") or [],
        "session_id": body.get("session_id"),
        "error": body.get("error"),
        "usage": dream_usage(body),
        "created_at": timestamp(res.created_at),
        "ended_at": _ended_at(body.get("ended_at")),
        "archived_at": timestamp(res.archived_at) if res.archived_at else None,
    }


def _create_command(body: DreamCreate) -> CreateDream:
    stores = [i for i in body.inputs if isinstance(i, MemoryStoreInput)]
    sessions = [i for i in body.inputs if isinstance(i, SessionsInput)]
    if len(stores) != 1 or len(sessions) != 1 or len(body.inputs) != 2:
        raise InvalidRequest(
            "inputs: give exactly one memory_store entry and exactly one sessions entry", param="inputs"
        )
    model = body.model if isinstance(body.model, ModelConfig) else ModelConfig(id=body.model)
    if model.speed not in (None, "standard"):
        raise InvalidRequest("model.speed: dreams accept only `standard`", param="model")
    behavior = body.output_behavior
    update = isinstance(behavior, UpdateExisting)
    if isinstance(behavior, UpdateExisting) and behavior.memory_store_id != stores[0].memory_store_id:
        raise InvalidRequest(
            "output_behavior.memory_store_id must be the memory store of the memory_store input",
            param="output_behavior",
        )
    return CreateDream(
        session_ids=sessions[0].session_ids,
        memory_store_id=stores[0].memory_store_id,
        model_id=model.id,
        instructions=body.instructions,
        update_existing=update,
    )


class _DreamRoutes:
    def __init__(self, service: DreamService) -> None:
        self._service = service

    async def create(self, body: DreamCreate, caller: CallerDep) -> dict[str, Any]:
        command = _create_command(body)
        can_write = caller.can_write() and caller.environment_ids is None
        created = await self._service.create(
            command, Viewer(caller.environment_ids), can_write_stores=can_write
        )
        return dream_json(created)

    async def retrieve(self, dream_id: str, caller: CallerDep) -> dict[str, Any]:
        return dream_json(await self._service.get(dream_id, Viewer(caller.environment_ids)))

    async def list_dreams(
        self,
        request: Request,
        caller: CallerDep,
        limit: int = 20,
        page: str | None = None,
        include_archived: bool = False,
    ) -> dict[str, Any]:
        bounds = time_bounds(request.query_params)
        query = DreamQuery(
            limit=limit,
            cursor=page,
            include_archived=include_archived,
            statuses=query_list(request.query_params, "statuses", allowed=STATUSES),
            created_after=bounds.after,
            created_before=bounds.before,
        )
        found = await self._service.list_dreams(query, Viewer(caller.environment_ids))
        return page_body([dream_json(d) for d in found.items], found.next_cursor)

    async def archive(self, dream_id: str, caller: CallerDep) -> dict[str, Any]:
        return dream_json(await self._service.archive(dream_id, Viewer(caller.environment_ids)))

    async def cancel(self, dream_id: str, caller: CallerDep) -> dict[str, Any]:
        return dream_json(await self._service.cancel(dream_id, Viewer(caller.environment_ids)))


def dreams_router(service: DreamService) -> APIRouter:
    routes = _DreamRoutes(service)
    router = APIRouter()
    router.add_api_route("/v1/dreams", routes.create, methods=["POST"])
    router.add_api_route("/v1/dreams", routes.list_dreams, methods=["GET"])
    router.add_api_route("/v1/dreams/{dream_id}", routes.retrieve, methods=["GET"])
    router.add_api_route("/v1/dreams/{dream_id}/archive", routes.archive, methods=["POST"])
    router.add_api_route("/v1/dreams/{dream_id}/cancel", routes.cancel, methods=["POST"])
    return router
