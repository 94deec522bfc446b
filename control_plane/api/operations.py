"""Operator endpoints to look at connected edges and drive a sandbox by hand.

``POST /v1/sandboxes/exec`` runs one tool call on an edge of an environment, exactly as the
harness would (same gateway, same idempotency), for ``outpost-control exec`` and for debugging.
"""

from __future__ import annotations

import dataclasses
import secrets
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from control_plane.store.base import Store
from control_plane.tunnel import EdgeGateway, EdgeRegistry

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


def operations_router(store: Store, registry: EdgeRegistry, gateway: EdgeGateway) -> APIRouter:
    router = APIRouter()

    @router.get("/v1/connected_edges")
    async def connected(environment_id: str | None = None) -> dict[str, Any]:
        items = [dataclasses.asdict(s) for s in registry.statuses()]
        if environment_id:
            items = [s for s in items if s["environment_id"] == environment_id]
        return {"data": items, "next_page": None}

    @router.post("/v1/sandboxes/exec")
    async def exec_(body: ExecBody) -> dict[str, Any]:
        await store.get_resource("environment", body.environment_id)  # 404 if unknown
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
    async def destroy(body: DestroyBody) -> dict[str, Any]:
        existed = await gateway.destroy(body.session_id, body.environment_id)
        return {"type": "sandbox_destroyed", "session_id": body.session_id, "existed": existed}

    return router
