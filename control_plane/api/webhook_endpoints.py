"""``/v1/outpost/webhook_endpoints`` — webhook endpoints, an Outpost extension (HTTP only).

The SDK has no methods for webhook endpoints (the hosted product manages them in its Console), so
Outpost serves its own, under ``/v1/outpost/`` where no SDK path can ever land (``/v1/webhooks``
stays the typed 404 of :mod:`control_plane.api.unrouted`)::

    POST   /v1/outpost/webhook_endpoints                      create (answer holds `secret`, once)
    GET    /v1/outpost/webhook_endpoints                      list (?limit=&page=)
    GET    /v1/outpost/webhook_endpoints/{id}                 retrieve
    POST   /v1/outpost/webhook_endpoints/{id}                 update (url, event_types, description,
                                                              enabled)
    POST   /v1/outpost/webhook_endpoints/{id}/rotate_secret   a new secret (answer holds it, once)
    DELETE /v1/outpost/webhook_endpoints/{id}                 delete

Any key reads the endpoints it sees (a key limited to environments: those scoped to one of its
environments); every change needs an unscoped ``read_write`` or ``admin`` key (the router's
dependency, in ``app.py``). The rules are :class:`~control_plane.webhooks.service.EndpointService`'s.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from control_plane.api.caller import CallerDep
from control_plane.api.query import check_limit, page_body
from control_plane.errors import NotConfigured
from control_plane.patch import KEEP
from control_plane.store.base import Resource
from control_plane.timestamps import timestamp
from control_plane.webhooks.commands import CreateEndpoint, EndpointView, UpdateEndpoint, Viewer
from control_plane.webhooks.service import MAX_PAGE, EndpointService

__all__ = ["WEBHOOK_ENDPOINTS_PATH", "endpoint_json", "webhook_endpoints_router"]

WEBHOOK_ENDPOINTS_PATH = "/v1/outpost/webhook_endpoints"


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EndpointCreate(_Body):
    url: str = Field(max_length=4096)
    event_types: list[str] = Field(default_factory=list, max_length=100)
    environment_id: str | None = None
    description: str = ""


class EndpointUpdate(_Body):
    url: str | None = Field(None, max_length=4096)
    event_types: list[str] | None = Field(None, max_length=100)
    description: str | None = None
    enabled: bool | None = None


def endpoint_json(res: Resource, secret: str | None = None) -> dict[str, Any]:
    body = res.body
    out: dict[str, Any] = {
        "type": "webhook_endpoint",
        "id": res.id,
        "url": body["url"],
        "event_types": list(body.get("event_types", [])),
        "environment_id": body.get("environment_id"),
        "description": body.get("description", ""),
        "enabled": bool(body.get("enabled")),
        "created_at": timestamp(res.created_at),
        "updated_at": timestamp(res.updated_at),
    }
    if secret is not None:
        out["secret"] = secret
    return out


def _shown(view: EndpointView) -> dict[str, Any]:
    return endpoint_json(view.resource, view.secret)


def _viewer(caller: CallerDep) -> Viewer:
    return Viewer(caller.environment_ids)


def _update_command(body: EndpointUpdate) -> UpdateEndpoint:
    sent = body.model_fields_set
    return UpdateEndpoint(
        url=body.url if "url" in sent and body.url is not None else KEEP,
        event_types=body.event_types if "event_types" in sent and body.event_types is not None else KEEP,
        description=body.description if "description" in sent and body.description is not None else KEEP,
        enabled=body.enabled if "enabled" in sent and body.enabled is not None else KEEP,
    )


class _EndpointRoutes:
    """``service`` ``None``: no vault to seal secrets with; every route answers 503."""

    def __init__(self, service: EndpointService | None) -> None:
        self._optional = service

    @property
    def _service(self) -> EndpointService:
        if self._optional is None:
            raise NotConfigured("webhook endpoints need the vault (which seals their secrets)")
        return self._optional

    async def create(self, body: EndpointCreate, caller: CallerDep) -> dict[str, Any]:
        command = CreateEndpoint(body.url, body.event_types, body.environment_id, body.description)
        return _shown(await self._service.create(command, _viewer(caller)))

    async def list_endpoints(
        self, caller: CallerDep, limit: int = 20, page: str | None = None
    ) -> dict[str, Any]:
        found = await self._service.list_endpoints(
            _viewer(caller), limit=check_limit(limit, MAX_PAGE), cursor=page
        )
        return page_body([endpoint_json(r) for r in found.items], found.next_cursor)

    async def retrieve(self, endpoint_id: str, caller: CallerDep) -> dict[str, Any]:
        return endpoint_json(await self._service.get(endpoint_id, _viewer(caller)))

    async def update(self, endpoint_id: str, body: EndpointUpdate, caller: CallerDep) -> dict[str, Any]:
        updated = await self._service.update(endpoint_id, _update_command(body), _viewer(caller))
        return endpoint_json(updated)

    async def rotate_secret(self, endpoint_id: str, caller: CallerDep) -> dict[str, Any]:
        return _shown(await self._service.rotate_secret(endpoint_id, _viewer(caller)))

    async def delete(self, endpoint_id: str, caller: CallerDep) -> dict[str, Any]:
        await self._service.delete(endpoint_id, _viewer(caller))
        return {"type": "webhook_endpoint_deleted", "id": endpoint_id}


def webhook_endpoints_router(service: EndpointService | None) -> APIRouter:
    routes = _EndpointRoutes(service)
    router = APIRouter()
    many, one = WEBHOOK_ENDPOINTS_PATH, WEBHOOK_ENDPOINTS_PATH + "/{endpoint_id}"
    router.add_api_route(many, routes.create, methods=["POST"])
    router.add_api_route(many, routes.list_endpoints, methods=["GET"])
    router.add_api_route(one, routes.retrieve, methods=["GET"])
    router.add_api_route(one, routes.update, methods=["POST"])
    router.add_api_route(one + "/rotate_secret", routes.rotate_secret, methods=["POST"])
    router.add_api_route(one, routes.delete, methods=["DELETE"])
    return router
