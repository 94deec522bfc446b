"""Operator endpoints to look at connected edges and drive a sandbox by hand.

``GET /v1/connected_edges`` lists the edges whose tunnels this process holds (``connected_at`` in
RFC 3339); ``GET /v1/edges`` (:mod:`control_plane.api.fleet`) is the fleet-wide listing.

``POST /v1/sandboxes/exec`` runs one tool call on an edge of an environment, exactly as the
harness would (same gateway, same idempotency), for ``outpost-control exec`` and for debugging. It
does not wait for an edge: with none of the environment's edges connected to this process it
answers at once, 503 ``api_error`` with ``details.error_code: edge_unavailable`` and a message
naming the environment and its edge counts (see :mod:`control_plane.api.errors`).

An environment-scoped API key lists only its environments' edges and drives only their
sandboxes (another environment, or a session of one, is a 404). The rules are
:class:`~control_plane.sandboxes.SandboxService`'s; these routes translate HTTP.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from control_plane.api.caller import Caller, CallerDep
from control_plane.environments.commands import Viewer
from control_plane.sandboxes import ExecCall, SandboxService
from control_plane.timestamps import timestamp

__all__ = ["operations_router"]


class ExecBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    environment_id: str
    session_id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.-]+$")
    tool: str
    input: dict[str, Any] = Field(default_factory=dict)
    idempotency_key: str | None = Field(None, max_length=200)
    timeout_s: float | None = Field(None, gt=0, le=3600)


class DestroyBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    environment_id: str
    session_id: str


def _viewer(caller: Caller) -> Viewer:
    return Viewer(caller.environment_ids)


class _OperationRoutes:
    """The routes, one service call each."""

    def __init__(self, service: SandboxService) -> None:
        self._service = service

    async def connected(self, caller: CallerDep, environment_id: str | None = None) -> dict[str, Any]:
        statuses = self._service.connected_edges(_viewer(caller), environment_id)
        items = [dataclasses.asdict(s) | {"connected_at": timestamp(s.connected_at)} for s in statuses]
        return {"data": items, "next_page": None}

    async def exec_(self, body: ExecBody, caller: CallerDep) -> dict[str, Any]:
        call = ExecCall(
            environment_id=body.environment_id,
            session_id=body.session_id,
            tool=body.tool,
            input=body.input,
            idempotency_key=body.idempotency_key,
            timeout_s=body.timeout_s,
        )
        result, edge_id = await self._service.execute(call, _viewer(caller))
        return {
            "type": "tool_result",
            "content": result.to_json(),
            "is_error": result.is_error,
            "edge_id": edge_id,
        }

    async def destroy(self, body: DestroyBody, caller: CallerDep) -> dict[str, Any]:
        existed = await self._service.destroy(body.environment_id, body.session_id, _viewer(caller))
        return {"type": "sandbox_destroyed", "session_id": body.session_id, "existed": existed}


def operations_router(service: SandboxService) -> APIRouter:
    routes = _OperationRoutes(service)
    router = APIRouter()
    router.add_api_route("/v1/connected_edges", routes.connected, methods=["GET"])
    router.add_api_route("/v1/sandboxes/exec", routes.exec_, methods=["POST"])
    router.add_api_route("/v1/sandboxes/destroy", routes.destroy, methods=["POST"])
    return router
