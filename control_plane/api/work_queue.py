"""``/v1/environments/{id}/work``: the work queue of a worker-run environment, and the operator's
routes for its environment keys — HTTP only (the rules: :mod:`control_plane.work.service`).

Who may call what (the gate admits a worker's credential only where it belongs, see
:mod:`control_plane.api.worker_credentials`; each route checks again which kind it takes):

* ``GET work/poll``, ``GET work`` (list), ``POST work/{id}/ack`` — the environment's key;
* ``POST work/{id}/heartbeat`` — the item's sessions token or the environment's key;
* ``POST work/{id}/stop`` — those, or an API key that may write and sees the environment;
* ``GET work/{id}``, ``POST work/{id}`` (metadata), ``GET work/stats`` — an API key (a worker's
  credential is refused with 403).
* ``POST /v1/environments/{id}/keys``, ``GET …/keys``, ``POST …/keys/{key_id}/revoke`` — an admin
  API key: environment keys, the plaintext returned once.

A poll with nothing to hand out answers JSON ``null`` (the SDK reads a 204 as ``""``); ``block_ms``
is 1-999 (``0`` refused, omitted: no wait). A heartbeat whose ``expected_last_heartbeat`` does not
match is a 412 whose ``details`` carry ``error_code: heartbeat_precondition_failed`` and the lease
as the server holds it (``current_state``).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response

from control_plane.api.caller import CallerDep
from control_plane.api.errors import ApiError, error_body
from control_plane.api.models import Name, _Body
from control_plane.api.query import check_limit, page_body
from control_plane.api.worker_credentials import WORKER_STATE, WorkerCaller
from control_plane.environments.service import get_environment
from control_plane.errors import EnvironmentNotFound
from control_plane.store.base import Resources
from control_plane.work.environment_keys import EnvironmentKeys, environment_key_json
from control_plane.work.service import HeartbeatPreconditionFailed, WorkQueue, work_json

__all__ = ["work_queue_router"]

MAX_PAGE = 100
MAX_RECLAIM_MS = 86_400_000


class WorkStop(_Body):
    force: bool | None = None


class WorkUpdate(_Body):
    metadata: dict[str, str | None]


class EnvironmentKeyCreate(_Body):
    name: Name


def _worker(request: Request) -> WorkerCaller | None:
    found = request.scope.get("state", {}).get(WORKER_STATE)
    return found if isinstance(found, WorkerCaller) else None


def _require_environment_key(request: Request, what: str) -> WorkerCaller:
    worker = _worker(request)
    if worker is None or worker.kind != "environment_key":
        raise ApiError(
            403, f"{what} takes the environment's key (Authorization: Bearer oek-...)", "permission_error"
        )
    return worker


def _require_api_key(request: Request, what: str) -> None:
    if _worker(request) is not None:
        raise ApiError(403, f"{what} takes an API key, not a worker's credential", "permission_error")


class _WorkRoutes:
    def __init__(self, queue: WorkQueue, keys: EnvironmentKeys, store: Resources) -> None:
        self._queue = queue
        self._keys = keys
        self._store = store

    async def _visible(self, environment_id: str, caller: CallerDep) -> None:
        caller.check_environment(environment_id, EnvironmentNotFound(environment_id))
        await get_environment(self._store, environment_id)

    async def poll(
        self,
        request: Request,
        environment_id: str,
        block_ms: Annotated[int | None, Query()] = None,
        reclaim_older_than_ms: Annotated[int, Query(ge=0, le=MAX_RECLAIM_MS)] = 5000,
    ) -> Response:
        _require_environment_key(request, "polling for work")
        if block_ms is not None and not 1 <= block_ms <= 999:
            raise ApiError(400, "block_ms must be between 1 and 999 (omit it for a poll that does not wait)")
        worker_id = request.headers.get("anthropic-worker-id")
        polled = await self._queue.poll(
            environment_id,
            block_ms=block_ms,
            reclaim_older_than_ms=reclaim_older_than_ms,
            worker_id=worker_id,
        )
        if polled is None:
            return Response(b"null", media_type="application/json")
        return JSONResponse(work_json(polled.item, polled.secret))

    async def list_(
        self, request: Request, environment_id: str, limit: int = 20, page: str | None = None
    ) -> dict[str, Any]:
        _require_environment_key(request, "listing work")
        items, cursor = await self._queue.list_items(environment_id, check_limit(limit, MAX_PAGE), page)
        return page_body([work_json(i) for i in items], cursor)

    async def ack(self, request: Request, environment_id: str, work_id: str) -> dict[str, Any]:
        _require_environment_key(request, "acknowledging work")
        return work_json(await self._queue.ack(environment_id, work_id))

    async def heartbeat(
        self,
        request: Request,
        environment_id: str,
        work_id: str,
        expected_last_heartbeat: str | None = None,
        desired_ttl_seconds: int | None = None,
    ) -> Any:
        if _worker(request) is None:
            raise ApiError(
                403, "heartbeats take the item's sessions token or the environment's key", "permission_error"
            )
        try:
            return await self._queue.heartbeat(
                environment_id, work_id, expected_last_heartbeat, desired_ttl_seconds
            )
        except HeartbeatPreconditionFailed as exc:
            body = error_body("invalid_request_error", str(exc))
            body["error"]["details"] = {"error_code": exc.error_code, "current_state": exc.current_state}
            return JSONResponse(body, status_code=412, headers={"x-should-retry": "false"})

    async def stop(
        self,
        request: Request,
        environment_id: str,
        work_id: str,
        caller: CallerDep,
        body: WorkStop | None = None,
    ) -> dict[str, Any]:
        if _worker(request) is None:
            caller.require_write("stopping work")
            await self._visible(environment_id, caller)
        force = bool(body is not None and body.force)
        return work_json(await self._queue.stop(environment_id, work_id, force=force))

    async def retrieve(
        self, request: Request, environment_id: str, work_id: str, caller: CallerDep
    ) -> dict[str, Any]:
        _require_api_key(request, "reading a work item")
        await self._visible(environment_id, caller)
        return work_json(await self._queue.get(environment_id, work_id))

    async def update(
        self, request: Request, environment_id: str, work_id: str, body: WorkUpdate, caller: CallerDep
    ) -> dict[str, Any]:
        _require_api_key(request, "updating a work item")
        caller.require_write("updating a work item")
        await self._visible(environment_id, caller)
        return work_json(await self._queue.update_metadata(environment_id, work_id, body.metadata))

    async def stats(self, request: Request, environment_id: str, caller: CallerDep) -> dict[str, Any]:
        _require_api_key(request, "reading queue stats")
        await self._visible(environment_id, caller)
        return await self._queue.stats(environment_id)

    # -- environment keys (admin) -------------------------------------------------------------
    async def create_key(
        self, environment_id: str, body: EnvironmentKeyCreate, caller: CallerDep
    ) -> dict[str, Any]:
        caller.require_admin("creating environment keys")
        key, record = await self._keys.create(environment_id, body.name)
        return {**environment_key_json(record), "key": key}

    async def list_keys(self, environment_id: str, caller: CallerDep) -> dict[str, Any]:
        caller.require_admin("listing environment keys")
        return page_body([environment_key_json(r) for r in await self._keys.list_keys(environment_id)], None)

    async def revoke_key(self, environment_id: str, key_id: str, caller: CallerDep) -> dict[str, Any]:
        caller.require_admin("revoking environment keys")
        return environment_key_json(await self._keys.revoke(environment_id, key_id))


def work_queue_router(queue: WorkQueue, keys: EnvironmentKeys, store: Resources) -> APIRouter:
    routes = _WorkRoutes(queue, keys, store)
    router = APIRouter()
    work = "/v1/environments/{environment_id}/work"
    item = work + "/{work_id}"
    router.add_api_route(work + "/poll", routes.poll, methods=["GET"])
    router.add_api_route(work + "/stats", routes.stats, methods=["GET"])
    router.add_api_route(work, routes.list_, methods=["GET"])
    router.add_api_route(item, routes.retrieve, methods=["GET"])
    router.add_api_route(item, routes.update, methods=["POST"])
    router.add_api_route(item + "/ack", routes.ack, methods=["POST"])
    router.add_api_route(item + "/heartbeat", routes.heartbeat, methods=["POST"])
    router.add_api_route(item + "/stop", routes.stop, methods=["POST"])
    keys_path = "/v1/environments/{environment_id}/keys"
    router.add_api_route(keys_path, routes.create_key, methods=["POST"])
    router.add_api_route(keys_path, routes.list_keys, methods=["GET"])
    router.add_api_route(keys_path + "/{key_id}/revoke", routes.revoke_key, methods=["POST"])
    return router
