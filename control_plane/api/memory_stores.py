"""``/v1/memory_stores`` with ``memories`` and ``memory_versions`` — HTTP only.

Each route translates the request into a typed command (:mod:`control_plane.memory.commands`),
calls one method of :class:`~control_plane.memory.service.MemoryService` (which holds the rules:
paths, limits, preconditions, versions) and shows the result as the SDK's
``BetaManagedAgentsMemoryStore``, ``BetaManagedAgentsMemory`` / ``BetaManagedAgentsMemoryPrefix``
and ``BetaManagedAgentsMemoryVersion``. ``view`` defaults to ``full`` on retrieves and ``basic``
(no content) on creates, updates and lists. Writes record the caller's API key as their author
(``api_actor``). Memory stores belong to no environment: any key may read them; creating,
changing, archiving or deleting them, their memories and versions needs an unscoped
``read_write`` or ``admin`` key (the router's dependency, in ``app.py``).
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict

from control_plane.api.caller import Caller, CallerDep
from control_plane.api.query import check_limit, page_body, time_bounds
from control_plane.errors import InvalidRequest
from control_plane.memory.commands import (
    CreateMemory,
    CreateMemoryStore,
    MemoryPrefix,
    MemoryQuery,
    MemoryStoreQuery,
    MemoryVersionQuery,
    UpdateMemory,
    UpdateMemoryStore,
)
from control_plane.memory.service import MAX_PAGE, MemoryService
from control_plane.patch import KEEP
from control_plane.store.base import MemoryActor, MemoryRecord, MemoryVersionRecord, Resource
from control_plane.timestamps import timestamp

__all__ = ["memory_json", "memory_store_json", "memory_stores_router", "memory_version_json"]

View = Literal["basic", "full"]
Operation = Literal["created", "modified", "deleted"]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MemoryStoreCreate(_Body):
    name: str
    description: str | None = None
    metadata: dict[str, str] | None = None


class MemoryStoreUpdate(_Body):
    name: str | None = None
    description: str | None = None
    metadata: dict[str, str | None] | None = None


class Precondition(_Body):
    type: Literal["content_sha256"]
    content_sha256: str | None = None


class MemoryCreate(_Body):
    path: str
    content: str | None  # null: an empty memory, as ""


class MemoryUpdate(_Body):
    content: str | None = None  # null or left out: unchanged
    path: str | None = None
    precondition: Precondition | None = None


def memory_store_json(res: Resource) -> dict[str, Any]:
    return {
        "type": "memory_store",
        "id": res.id,
        "name": res.body["name"],
        "description": res.body.get("description", ""),
        "metadata": res.body.get("metadata", {}),
        "created_at": timestamp(res.created_at),
        "updated_at": timestamp(res.updated_at),
        "archived_at": timestamp(res.archived_at) if res.archived_at else None,
    }


def memory_json(memory: MemoryRecord) -> dict[str, Any]:
    return {
        "type": "memory",
        "id": memory.id,
        "memory_store_id": memory.store_id,
        "path": memory.path,
        "content": memory.content,
        "content_sha256": memory.content_sha256,
        "content_size_bytes": memory.content_size_bytes,
        "memory_version_id": memory.version_id,
        "created_at": timestamp(memory.created_at),
        "updated_at": timestamp(memory.updated_at),
    }


def _item_json(item: MemoryRecord | MemoryPrefix) -> dict[str, Any]:
    if isinstance(item, MemoryPrefix):
        return {"type": "memory_prefix", "path": item.path}
    return memory_json(item)


def _actor_json(actor: MemoryActor | None) -> dict[str, Any] | None:
    if actor is None:
        return None
    key = "session_id" if actor.type == "session_actor" else "api_key_id"
    return {"type": actor.type, key: actor.id}


def memory_version_json(version: MemoryVersionRecord) -> dict[str, Any]:
    return {
        "type": "memory_version",
        "id": version.id,
        "memory_store_id": version.store_id,
        "memory_id": version.memory_id,
        "operation": version.operation,
        "path": version.path,
        "content": version.content,
        "content_sha256": version.content_sha256,
        "content_size_bytes": version.content_size_bytes,
        "created_by": _actor_json(version.created_by),
        "created_at": timestamp(version.created_at),
        "redacted_at": timestamp(version.redacted_at) if version.redacted_at else None,
        "redacted_by": _actor_json(version.redacted_by),
    }


def _actor(caller: Caller) -> MemoryActor:
    return MemoryActor("api_actor", caller.key.id)


def _basic(memory: MemoryRecord, view: View | None) -> dict[str, Any]:
    """A memory as a create or an update shows it: ``basic`` unless ``full`` was asked for."""
    body = memory_json(memory)
    if view != "full":
        body["content"] = None
    return body


def _update_store_command(body: MemoryStoreUpdate) -> UpdateMemoryStore:
    sent = body.model_fields_set
    return UpdateMemoryStore(
        name=body.name if "name" in sent else KEEP,
        description=body.description if "description" in sent else KEEP,
        metadata=body.metadata if "metadata" in sent else KEEP,
    )


def _update_memory_command(body: MemoryUpdate) -> UpdateMemory:
    expected = None
    if body.precondition is not None:
        if body.precondition.content_sha256 is None:
            raise InvalidRequest("precondition.content_sha256 is required", param="precondition")
        expected = body.precondition.content_sha256
    return UpdateMemory(content=body.content, path=body.path, expected_sha256=expected)


class _MemoryRoutes:
    """The routes, one service call each."""

    def __init__(self, service: MemoryService) -> None:
        self._service = service

    # -- memory stores -------------------------------------------------------------------------

    async def create_store(self, body: MemoryStoreCreate) -> dict[str, Any]:
        command = CreateMemoryStore(body.name, body.description or "", body.metadata or {})
        return memory_store_json(await self._service.create_store(command))

    async def retrieve_store(self, memory_store_id: str) -> dict[str, Any]:
        return memory_store_json(await self._service.get_store(memory_store_id))

    async def update_store(self, memory_store_id: str, body: MemoryStoreUpdate) -> dict[str, Any]:
        updated = await self._service.update_store(memory_store_id, _update_store_command(body))
        return memory_store_json(updated)

    async def list_stores(
        self, request: Request, limit: int = 20, page: str | None = None, include_archived: bool = False
    ) -> dict[str, Any]:
        bounds = time_bounds(request.query_params)
        query = MemoryStoreQuery(
            limit=check_limit(limit, MAX_PAGE),
            cursor=page,
            include_archived=include_archived,
            created_after=bounds.after,
            created_before=bounds.before,
        )
        found = await self._service.list_stores(query)
        return page_body([memory_store_json(r) for r in found.items], found.next_cursor)

    async def delete_store(self, memory_store_id: str) -> dict[str, Any]:
        await self._service.delete_store(memory_store_id)
        return {"type": "memory_store_deleted", "id": memory_store_id}

    async def archive_store(self, memory_store_id: str) -> dict[str, Any]:
        return memory_store_json(await self._service.archive_store(memory_store_id))

    # -- memories ------------------------------------------------------------------------------

    async def create_memory(
        self, memory_store_id: str, body: MemoryCreate, caller: CallerDep, view: View | None = None
    ) -> dict[str, Any]:
        command = CreateMemory(body.path, body.content or "")
        return _basic(await self._service.create_memory(memory_store_id, command, _actor(caller)), view)

    async def retrieve_memory(
        self, memory_store_id: str, memory_id: str, view: View = "full"
    ) -> dict[str, Any]:
        found = await self._service.get_memory(memory_store_id, memory_id, full=view == "full")
        return memory_json(found)

    async def update_memory(
        self,
        memory_store_id: str,
        memory_id: str,
        body: MemoryUpdate,
        caller: CallerDep,
        view: View | None = None,
    ) -> dict[str, Any]:
        command = _update_memory_command(body)
        return _basic(
            await self._service.update_memory(memory_store_id, memory_id, command, _actor(caller)), view
        )

    async def list_memories(
        self,
        memory_store_id: str,
        depth: int = Query(0, ge=0, le=1000),
        limit: int = 20,
        page: str | None = None,
        path_prefix: str = "/",
        view: View = "basic",
    ) -> dict[str, Any]:
        query = MemoryQuery(path_prefix, depth, limit, page, full=view == "full")
        found = await self._service.list_memories(memory_store_id, query)
        return page_body([_item_json(item) for item in found.items], found.next_cursor)

    async def delete_memory(
        self,
        memory_store_id: str,
        memory_id: str,
        caller: CallerDep,
        expected_content_sha256: str | None = None,
    ) -> dict[str, Any]:
        await self._service.delete_memory(memory_store_id, memory_id, expected_content_sha256, _actor(caller))
        return {"type": "memory_deleted", "id": memory_id}

    # -- versions ------------------------------------------------------------------------------

    async def list_versions(  # the SDK's filters, one parameter each
        self,
        request: Request,
        memory_store_id: str,
        limit: int = 20,
        page: str | None = None,
        memory_id: str | None = None,
        operation: Operation | None = None,
        api_key_id: str | None = None,
        session_id: str | None = None,
        service_account_id: str | None = None,
        view: View = "basic",
    ) -> dict[str, Any]:
        bounds = time_bounds(request.query_params)
        query = MemoryVersionQuery(
            memory_id, operation, api_key_id, session_id, service_account_id,
            bounds.after, bounds.before, limit, page, full=view == "full",
        )  # fmt: skip
        found = await self._service.list_versions(memory_store_id, query)
        return page_body([memory_version_json(v) for v in found.items], found.next_cursor)

    async def retrieve_version(
        self, memory_store_id: str, memory_version_id: str, view: View = "full"
    ) -> dict[str, Any]:
        found = await self._service.get_version(memory_store_id, memory_version_id, full=view == "full")
        return memory_version_json(found)

    async def redact_version(
        self, memory_store_id: str, memory_version_id: str, caller: CallerDep
    ) -> dict[str, Any]:
        redacted = await self._service.redact_version(memory_store_id, memory_version_id, _actor(caller))
        return memory_version_json(redacted)


def memory_stores_router(service: MemoryService) -> APIRouter:
    routes = _MemoryRoutes(service)
    router = APIRouter()
    stores, store = "/v1/memory_stores", "/v1/memory_stores/{memory_store_id}"
    router.add_api_route(stores, routes.create_store, methods=["POST"])
    router.add_api_route(stores, routes.list_stores, methods=["GET"])
    router.add_api_route(store, routes.retrieve_store, methods=["GET"])
    router.add_api_route(store, routes.update_store, methods=["POST"])
    router.add_api_route(store, routes.delete_store, methods=["DELETE"])
    router.add_api_route(store + "/archive", routes.archive_store, methods=["POST"])
    memories, memory = store + "/memories", store + "/memories/{memory_id}"
    router.add_api_route(memories, routes.create_memory, methods=["POST"])
    router.add_api_route(memories, routes.list_memories, methods=["GET"])
    router.add_api_route(memory, routes.retrieve_memory, methods=["GET"])
    router.add_api_route(memory, routes.update_memory, methods=["POST"])
    router.add_api_route(memory, routes.delete_memory, methods=["DELETE"])
    versions, version = store + "/memory_versions", store + "/memory_versions/{memory_version_id}"
    router.add_api_route(versions, routes.list_versions, methods=["GET"])
    router.add_api_route(version, routes.retrieve_version, methods=["GET"])
    router.add_api_route(version + "/redact", routes.redact_version, methods=["POST"])
    return router
