"""Operator endpoints to look at connected edges and drive a sandbox by hand.

``GET /v1/connected_edges`` lists the edges whose tunnels this process holds (``connected_at`` in
RFC 3339); ``GET /v1/edges`` (:mod:`control_plane.api.fleet`) is the fleet-wide listing.

``POST /v1/sandboxes/exec`` runs one tool call on an edge of an environment, exactly as the
harness would (same gateway, same idempotency), for ``outpost-control exec`` and for debugging. It
does not wait for an edge: with none of the environment's edges connected to this process it
answers at once, 503 ``api_error`` with ``details.error_code: edge_unavailable`` and a message
naming the environment and its edge counts (see :mod:`control_plane.api.errors`).

An environment-scoped API key lists only its environments' edges and drives only their
sandboxes (another environment, or a session of one, is a 404).
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from control_plane.api.caller import Caller, CallerDep
from control_plane.edge_counts import count_edges, no_edge_here
from control_plane.errors import EdgeUnavailable, NotFound
from control_plane.store.base import Store
from control_plane.timestamps import timestamp
from control_plane.tunnel import EdgeRegistry
from outpost_wire.results import ToolResult

__all__ = ["SandboxGateway", "operations_router"]


class SandboxGateway(Protocol):
    """What the sandbox routes need of the hands (``control_plane.tunnel.EdgeGateway`` and the
    metered one of ``control_plane.metering`` fit)."""

    async def execute(
        self,
        session_id: str,
        environment_id: str,
        tool: str,
        tool_input: Mapping[str, Any],
        *,
        idempotency_key: str,
        timeout_s: float | None = None,
    ) -> ToolResult: ...

    async def destroy(self, session_id: str, environment_id: str) -> bool: ...

    def edge_for_session(self, session_id: str) -> str | None: ...


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


def _utcnow() -> datetime:
    return datetime.now(UTC)


def operations_router(
    store: Store,
    registry: EdgeRegistry,
    gateway: SandboxGateway,
    clock: Callable[[], datetime] = _utcnow,
) -> APIRouter:
    router = APIRouter()

    async def sandbox_target(caller: Caller, environment_id: str, session_id: str) -> None:
        """404 unless the key sees the environment; for an environment-scoped key, the id of a
        session in another environment is a 404 too."""
        caller.check_environment(environment_id, NotFound("environment", environment_id))
        if caller.environment_ids is None:
            return
        try:
            session = await store.get_resource("session", session_id)
        except NotFound:
            return  # a sandbox by a name of the operator's own (``exec --session s1``)
        if session.body.get("environment_id") != environment_id:
            raise NotFound("session", session_id)

    @router.get("/v1/connected_edges")
    async def connected(caller: CallerDep, environment_id: str | None = None) -> dict[str, Any]:
        items = [
            dataclasses.asdict(s) | {"connected_at": timestamp(s.connected_at)}
            for s in registry.statuses()
            if caller.sees_environment(s.environment_id)
        ]
        if environment_id:
            items = [s for s in items if s["environment_id"] == environment_id]
        return {"data": items, "next_page": None}

    @router.post("/v1/sandboxes/exec")
    async def exec_(body: ExecBody, caller: CallerDep) -> dict[str, Any]:
        await sandbox_target(caller, body.environment_id, body.session_id)
        await store.get_resource("environment", body.environment_id)  # 404 if unknown
        if not registry.for_environment(body.environment_id):
            # An operator at a terminal: say so now instead of waiting edge_wait_s for an edge.
            env = body.environment_id
            counts = await count_edges(store, clock(), environment_id=env)
            raise EdgeUnavailable(no_edge_here(env, counts[env]), env)
        result = await gateway.execute(
            body.session_id,
            body.environment_id,
            body.tool,
            body.input,
            idempotency_key=body.idempotency_key or "opx_" + secrets.token_hex(12),
            timeout_s=body.timeout_s,
        )
        return {
            "type": "tool_result",
            "content": result.to_json(),
            "is_error": result.is_error,
            "edge_id": gateway.edge_for_session(body.session_id),
        }

    @router.post("/v1/sandboxes/destroy")
    async def destroy(body: DestroyBody, caller: CallerDep) -> dict[str, Any]:
        await sandbox_target(caller, body.environment_id, body.session_id)
        existed = await gateway.destroy(body.session_id, body.environment_id)
        return {"type": "sandbox_destroyed", "session_id": body.session_id, "existed": existed}

    return router
