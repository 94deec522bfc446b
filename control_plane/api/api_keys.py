"""``/v1/api_keys``: API keys as a resource (admin keys only; see :mod:`control_plane.api.caller`).

* ``POST /v1/api_keys`` — ``name``, ``scope`` (``admin`` | ``read_write`` | ``read_only``,
  default ``read_only``), ``environment_ids`` (omitted or null: every environment; not for admin
  keys), and ``ttl_s`` or ``expires_at`` (neither: until revoked). The answer carries the secret
  ``key``, once: only its sha256 is stored.
* ``GET /v1/api_keys`` (every key, oldest first, one page) and ``GET /v1/api_keys/{id}`` — never
  the secret nor its hash; ``status`` is ``active``, ``expired`` or ``revoked``.
* ``POST /v1/api_keys/{id}/revoke`` — the key is refused from the next request on, on every
  control-plane process (the gate reads the store per request). The last active admin key cannot
  be revoked (409): rotate it (``outpost-control api-keys rotate-admin``) instead.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from control_plane.api.caller import CallerDep, KeyScope
from control_plane.api.models import Name
from control_plane.keys import ApiKeyService, CreateApiKey, key_status
from control_plane.store.base import ApiKeyRecord
from control_plane.timestamps import timestamp

__all__ = ["MAX_ENVIRONMENTS", "MAX_TTL_S", "ApiKeyCreate", "api_key_json", "api_keys_router"]

MAX_ENVIRONMENTS = 100  # environments one key may be limited to
MAX_TTL_S = 10 * 366 * 86_400  # ten years


EnvironmentId = Annotated[str, Field(min_length=1, max_length=128)]


class ApiKeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Name
    scope: Literal["admin", "read_write", "read_only"] = "read_only"
    environment_ids: list[EnvironmentId] | None = Field(None, max_length=MAX_ENVIRONMENTS)
    ttl_s: int | None = Field(None, gt=0, le=MAX_TTL_S)
    expires_at: AwareDatetime | None = None


def api_key_json(record: ApiKeyRecord, now: datetime) -> dict[str, Any]:
    """A key as the API shows it: no secret, no hash."""

    def stamp(value: datetime | None) -> str | None:
        return None if value is None else timestamp(value)

    return {
        "type": "api_key",
        "id": record.id,
        "name": record.name,
        "scope": record.scope,
        "environment_ids": None if record.environment_ids is None else list(record.environment_ids),
        "status": key_status(record, now),
        "created_at": timestamp(record.created_at),
        "expires_at": stamp(record.expires_at),
        "last_used_at": stamp(record.last_used_at),
        "revoked_at": stamp(record.revoked_at),
    }


class _ApiKeyRoutes:
    """The routes, one service call each; every one needs an admin key."""

    def __init__(self, service: ApiKeyService) -> None:
        self._service = service

    async def create(self, body: ApiKeyCreate, caller: CallerDep) -> dict[str, Any]:
        caller.require_admin("creating API keys")
        command = CreateApiKey(
            name=body.name,
            scope=KeyScope(body.scope),
            environment_ids=body.environment_ids,
            ttl_s=body.ttl_s,
            expires_at=body.expires_at,
        )
        key, record = await self._service.create(command)
        return {**api_key_json(record, self._service.now()), "key": key}

    async def list_(self, caller: CallerDep) -> dict[str, Any]:
        caller.require_admin("listing API keys")
        now = self._service.now()
        data = [api_key_json(r, now) for r in await self._service.list_keys()]
        return {
            "data": data,
            "has_more": False,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        }

    async def retrieve(self, key_id: str, caller: CallerDep) -> dict[str, Any]:
        caller.require_admin("reading API keys")
        return api_key_json(await self._service.get(key_id), self._service.now())

    async def revoke(self, key_id: str, caller: CallerDep) -> dict[str, Any]:
        caller.require_admin("revoking API keys")
        return api_key_json(await self._service.revoke(key_id), self._service.now())


def api_keys_router(service: ApiKeyService) -> APIRouter:
    routes = _ApiKeyRoutes(service)
    router = APIRouter()
    router.add_api_route("/v1/api_keys", routes.create, methods=["POST"])
    router.add_api_route("/v1/api_keys", routes.list_, methods=["GET"])
    router.add_api_route("/v1/api_keys/{key_id}", routes.retrieve, methods=["GET"])
    router.add_api_route("/v1/api_keys/{key_id}/revoke", routes.revoke, methods=["POST"])
    return router
