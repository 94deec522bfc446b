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

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from control_plane.api.auth import ApiKeyCache, create_api_key
from control_plane.api.caller import CallerDep, KeyScope
from control_plane.api.models import Name
from control_plane.environments.service import get_environment
from control_plane.errors import Conflict, InvalidRequest
from control_plane.store.base import ApiKeyRecord, Store
from control_plane.timestamps import timestamp

__all__ = ["MAX_ENVIRONMENTS", "MAX_TTL_S", "ApiKeyCreate", "api_key_json", "api_keys_router", "key_status"]

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


def key_status(record: ApiKeyRecord, now: datetime) -> Literal["active", "expired", "revoked"]:
    if record.revoked_at is not None:
        return "revoked"
    if record.expires_at is not None and record.expires_at <= now:
        return "expired"
    return "active"


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


def api_keys_router(
    store: Store, clock: Callable[[], datetime], cache: ApiKeyCache | None = None
) -> APIRouter:
    """The key routes; a key revoked here is dropped from ``cache`` (the gate's) at once."""
    router = APIRouter()

    @router.post("/v1/api_keys")
    async def create(body: ApiKeyCreate, caller: CallerDep) -> dict[str, Any]:
        caller.require_admin("creating API keys")
        now = clock()
        scope = KeyScope(body.scope)
        if scope is KeyScope.ADMIN and body.environment_ids is not None:
            raise InvalidRequest(
                "environment_ids: admin keys see every environment; limit a read_write or read_only key",
                param="environment_ids",
            )
        if body.ttl_s is not None and body.expires_at is not None:
            raise InvalidRequest("give ttl_s or expires_at, not both", param="expires_at")
        expires_at = body.expires_at
        if body.ttl_s is not None:
            expires_at = now + timedelta(seconds=body.ttl_s)
        if expires_at is not None and expires_at <= now:
            raise InvalidRequest("expires_at: must be in the future", param="expires_at")
        if body.environment_ids is not None:
            for environment_id in body.environment_ids:
                await get_environment(store, environment_id)  # EnvironmentNotFound if unknown
        key, record = await create_api_key(
            store, body.name, now, scope=scope, environment_ids=body.environment_ids, expires_at=expires_at
        )
        return {**api_key_json(record, now), "key": key}

    @router.get("/v1/api_keys")
    async def list_(caller: CallerDep) -> dict[str, Any]:
        caller.require_admin("listing API keys")
        now = clock()
        data = [api_key_json(r, now) for r in await store.list_api_keys()]
        return {
            "data": data,
            "has_more": False,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        }

    @router.get("/v1/api_keys/{key_id}")
    async def retrieve(key_id: str, caller: CallerDep) -> dict[str, Any]:
        caller.require_admin("reading API keys")
        return api_key_json(await store.get_api_key(key_id), clock())

    @router.post("/v1/api_keys/{key_id}/revoke")
    async def revoke(key_id: str, caller: CallerDep) -> dict[str, Any]:
        caller.require_admin("revoking API keys")
        now = clock()
        target = await store.get_api_key(key_id)
        if target.scope == KeyScope.ADMIN and key_status(target, now) == "active":
            others = [
                k
                for k in await store.list_api_keys()
                if k.id != key_id and k.scope == KeyScope.ADMIN and key_status(k, now) == "active"
            ]
            if not others:
                raise Conflict(
                    f"API key {key_id} is the last active admin key; rotate it instead "
                    "(outpost-control api-keys rotate-admin)"
                )
        revoked = await store.revoke_api_key(key_id, now)
        if cache is not None:
            cache.forget(key_id)
        return api_key_json(revoked, now)

    return router
