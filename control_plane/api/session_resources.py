"""``/v1/sessions/{session_id}/resources``: a session's resources (git repositories, memory
stores, files).

* ``GET .../resources`` (``limit``, ``page``) and ``GET .../resources/{id}``: the repositories as
  :func:`~control_plane.sessions.repositories.repository_json` shows them, never the token;
* ``POST .../resources/{id}`` ``{"authorization_token"}``: rotate a repository's token (sealed
  again; the edge gets the new one with the session's next sandbox request);
* ``DELETE .../resources/{id}``: the repository is no longer the session's (its files stay in the
  workspace; the edge stops relaying pull/push for it at the session's next sandbox request);
* ``POST .../resources`` ``{"type": "file", "file_id", "mount_path"?}`` adds a file (mounted
  read-only in the sandbox by the session's next sandbox request); repositories and memory stores
  are given when the session is created. A file resource is removed with ``DELETE``.

Repositories themselves are created with the session. The rules are
:class:`~control_plane.sessions.service.SessionService`'s; this module only speaks HTTP.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body

from control_plane.api.caller import CallerDep
from control_plane.api.query import check_limit, page_body
from control_plane.api.sessions import viewer_of
from control_plane.sessions.repositories import repository_json
from control_plane.sessions.service import SessionService

__all__ = ["session_resources_router"]

MAX_PAGE = 100


class _ResourceRoutes:
    def __init__(self, service: SessionService) -> None:
        self._service = service

    async def list_(
        self, session_id: str, caller: CallerDep, limit: int = 20, page: str | None = None
    ) -> dict[str, Any]:
        found = await self._service.repositories(
            session_id, viewer_of(caller), limit=check_limit(limit, MAX_PAGE), cursor=page
        )
        return page_body([repository_json(r) for r in found.items], found.next_cursor)

    async def add(
        self,
        session_id: str,
        caller: CallerDep,
        body: dict[str, Any] = Body(...),  # noqa: B008
    ) -> dict[str, Any]:
        return repository_json(await self._service.add_resource(session_id, body, viewer_of(caller)))

    async def retrieve(self, session_id: str, resource_id: str, caller: CallerDep) -> dict[str, Any]:
        return repository_json(await self._service.repository(session_id, resource_id, viewer_of(caller)))

    async def update(
        self,
        session_id: str,
        resource_id: str,
        caller: CallerDep,
        body: dict[str, Any] = Body(...),  # noqa: B008
    ) -> dict[str, Any]:
        updated = await self._service.rotate_token(session_id, resource_id, body, viewer_of(caller))
        return repository_json(updated)

    async def delete(self, session_id: str, resource_id: str, caller: CallerDep) -> dict[str, Any]:
        await self._service.remove_repository(session_id, resource_id, viewer_of(caller))
        return {"id": resource_id, "type": "session_resource_deleted"}


def session_resources_router(service: SessionService) -> APIRouter:
    routes = _ResourceRoutes(service)
    router = APIRouter()
    path = "/v1/sessions/{session_id}/resources"
    router.add_api_route(path, routes.list_, methods=["GET"])
    router.add_api_route(path, routes.add, methods=["POST"])
    router.add_api_route(path + "/{resource_id}", routes.retrieve, methods=["GET"])
    router.add_api_route(path + "/{resource_id}", routes.update, methods=["POST"])
    router.add_api_route(path + "/{resource_id}", routes.delete, methods=["DELETE"])
    return router
