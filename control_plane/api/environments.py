"""``/v1/environments``: where sessions run. Outpost serves ``self_hosted`` environments: their
sandboxes live on the edges enrolled into them. A ``cloud`` config is refused with a 400 saying so.

An archived environment cannot be updated (400 with ``details.error_code: environment_archived``)
nor used for new sessions; an unknown one is a 404 with ``environment_not_found``.

Every environment object carries an Outpost field, ``edges: {"enrolled": N, "connected": M}``: its
edges that are not revoked, and how many of them have a tunnel up to any control-plane process on
the store (:mod:`control_plane.edge_counts`). The SDK's ``BetaEnvironment`` keeps it as an extra
attribute.

An environment-scoped API key sees only its environments (another one is a 404
``environment_not_found``, as if unknown; its listing is one page); creating, changing,
archiving and deleting environments needs an unscoped ``read_write`` or ``admin`` key.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from fastapi import APIRouter

from control_plane.api.caller import Caller, CallerDep
from control_plane.api.coded_errors import CodedApiError
from control_plane.api.models import (
    EnvironmentCreate,
    EnvironmentUpdate,
    apply_metadata_patch,
    check_metadata,
)
from control_plane.api.query import check_limit
from control_plane.api.wire import page_body, timestamp
from control_plane.edge_counts import EdgeCounts, count_edges
from control_plane.errors import InvalidRequest, NotFound
from control_plane.sessions.networking import validate_networking
from control_plane.store.base import Resource, Resources, Store
from control_plane.tunnel import EdgeRegistry

__all__ = [
    "environment_json",
    "environment_not_found",
    "environments_router",
    "get_environment",
    "new_environment_id",
]

MAX_PAGE = 100
SELF_HOSTED = {"type": "self_hosted"}


def new_environment_id() -> str:
    return "env_" + secrets.token_hex(12)


def environment_json(res: Resource, edges: EdgeCounts | None = None) -> dict[str, Any]:
    body = res.body
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
        "edges": (edges or EdgeCounts()).to_json(),
    }


def environment_not_found(environment_id: str) -> CodedApiError:
    return CodedApiError(404, f"environment {environment_id!r} not found", "environment_not_found")


async def get_environment(
    store: Resources, environment_id: str, *, usable: bool = False, caller: Caller | None = None
) -> Resource:
    """The environment, or a 404 ``environment_not_found`` (also when ``caller``'s key does not
    see it); with ``usable``, an archived one is a 400 ``environment_archived``."""
    if caller is not None:
        caller.check_environment(environment_id, environment_not_found(environment_id))
    try:
        res = await store.get_resource("environment", environment_id)
    except NotFound:
        raise environment_not_found(environment_id) from None
    if usable and res.archived_at is not None:
        raise CodedApiError(400, f"environment {environment_id!r} is archived", "environment_archived")
    return res


def _config(config: dict[str, Any] | None) -> dict[str, Any]:
    """Only ``self_hosted`` is served (omitted or null means that), with optional sandbox
    ``networking`` (see :mod:`control_plane.sessions.networking`)."""
    if config is None:
        return {**SELF_HOSTED, "networking": {"type": "none"}}
    kind = config.get("type")
    if kind == "cloud":
        raise InvalidRequest(
            "config.type 'cloud' is not available: Outpost runs sessions on self-hosted edges only; "
            'use config {"type": "self_hosted"}',
            param="config.type",
        )
    if kind != "self_hosted":
        raise InvalidRequest(f"config.type must be 'self_hosted', not {kind!r}", param="config.type")
    extra = sorted(set(config) - {"type", "networking"})
    if extra:
        raise InvalidRequest(
            f"config: {', '.join(extra)} not allowed for a self_hosted environment", param="config"
        )
    return {**SELF_HOSTED, "networking": validate_networking(config.get("networking"))}


def environments_router(
    store: Store, clock: Callable[[], datetime], registry: EdgeRegistry | None = None
) -> APIRouter:
    """``registry``: this process's connected edges (counted at once, before presence records
    them); without it only the store's presence records count."""
    router = APIRouter()

    async def counts(environment_id: str | None = None) -> dict[str, EdgeCounts]:
        local = {c.edge_id for c in registry.all_connections() if c.is_open} if registry else set()
        return await count_edges(store, clock(), local=local, environment_id=environment_id)

    async def one(res: Resource) -> dict[str, Any]:
        return environment_json(res, (await counts(res.id))[res.id])

    async def _scoped(ids: frozenset[str], include_archived: bool, limit: int) -> list[Resource]:
        """An environment-scoped key's environments, newest first: one page of at most
        ``limit`` (a key names at most 100 environments)."""
        found: list[Resource] = []
        for environment_id in ids:
            try:
                res = await store.get_resource("environment", environment_id)
            except NotFound:
                continue  # deleted since the key was made
            if include_archived or res.archived_at is None:
                found.append(res)
        found.sort(key=lambda r: (r.created_at, r.id), reverse=True)
        return found[:limit]

    async def many(items: Sequence[Resource]) -> list[dict[str, Any]]:
        found = await counts() if items else {}
        return [environment_json(r, found.get(r.id)) for r in items]

    @router.post("/v1/environments")
    async def create(body: EnvironmentCreate, caller: CallerDep) -> dict[str, Any]:
        caller.require_unscoped_write("creating environments")
        stored = {
            "name": body.name,
            "description": body.description,
            "config": _config(body.config),
            "metadata": check_metadata(body.metadata),
            "scope": body.scope,
        }
        res = await store.create_resource("environment", new_environment_id(), stored, clock())
        return environment_json(res)  # a new environment has no edge yet

    @router.get("/v1/environments/{environment_id}")
    async def retrieve(environment_id: str, caller: CallerDep) -> dict[str, Any]:
        return await one(await get_environment(store, environment_id, caller=caller))

    @router.post("/v1/environments/{environment_id}")
    async def update(environment_id: str, body: EnvironmentUpdate, caller: CallerDep) -> dict[str, Any]:
        current = await get_environment(store, environment_id, caller=caller)
        caller.require_unscoped_write("changing environments")
        if current.archived_at is not None:
            raise CodedApiError(
                400,
                f"environment {environment_id!r} is archived and cannot be updated",
                "environment_archived",
            )
        sent = body.model_fields_set
        new = dict(current.body)
        if "name" in sent and body.name is not None:
            new["name"] = body.name
        if "description" in sent:
            new["description"] = body.description
        if "config" in sent and body.config is not None:
            new["config"] = _config(body.config)
        if "metadata" in sent:
            new["metadata"] = apply_metadata_patch(
                current.body.get("metadata", {}), body.metadata, empty_deletes=True
            )
        if "scope" in sent and body.scope is not None:
            new["scope"] = body.scope
        if new == current.body:
            return await one(current)
        res = await store.update_resource(
            "environment", environment_id, new, clock(), expected_version=current.version
        )
        return await one(res)

    @router.get("/v1/environments")
    async def list_(
        caller: CallerDep, limit: int = 20, page: str | None = None, include_archived: bool = False
    ) -> dict[str, Any]:
        limit = check_limit(limit, MAX_PAGE)
        if caller.environment_ids is not None:
            return page_body(await many(await _scoped(caller.environment_ids, include_archived, limit)), None)
        result = await store.list_resources(
            "environment", include_archived=include_archived, limit=limit, cursor=page
        )
        return page_body(await many(result.items), result.next_cursor)

    @router.post("/v1/environments/{environment_id}/archive")
    async def archive(environment_id: str, caller: CallerDep) -> dict[str, Any]:
        await get_environment(store, environment_id, caller=caller)
        caller.require_unscoped_write("archiving environments")
        return await one(await store.archive_resource("environment", environment_id, clock()))

    @router.delete("/v1/environments/{environment_id}")
    async def delete(environment_id: str, caller: CallerDep) -> dict[str, Any]:
        await get_environment(store, environment_id, caller=caller)
        caller.require_unscoped_write("deleting environments")
        await store.delete_resource("environment", environment_id)
        return {"id": environment_id, "type": "environment_deleted"}

    return router
