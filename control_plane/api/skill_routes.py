"""``/v1/skills`` and ``/v1/skills/{id}/versions``: upload (multipart), list, read, content, delete.

Each route calls one method of :class:`~control_plane.skills.SkillService` (which holds the rules:
the archive's checks, the slug, ``latest``) and shows the result as the SDK's ``BetaSkill`` /
``BetaSkillVersion`` / ``BetaDeletedSkill`` / ``BetaDeletedSkillVersion``. A version's content is
its canonical zip (``application/zip``, ``<name>.zip``). Any key may read skills; creating and
deleting need an unscoped key (the router's dependency, in ``app.py``), as for files. Without a
blob store the routes answer 503.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from control_plane.api.query import page_body
from control_plane.api.skill_upload import read_skill_upload
from control_plane.errors import InvalidRequest, NotConfigured
from control_plane.skills import SkillQuery, SkillService, VersionQuery
from control_plane.store.base import Resource
from control_plane.timestamps import timestamp

__all__ = ["skill_json", "skill_version_json", "skills_router"]

_PAGE_PREFIX = "page_"


def skill_json(res: Resource) -> dict[str, Any]:
    body = res.body
    return {
        "id": res.id,
        "type": "skill",
        "display_name": body["display_name"],
        "latest_version_id": body["latest_version_id"],
        "source": {"type": body.get("source", "custom")},
        "created_at": timestamp(res.created_at),
        "updated_at": timestamp(res.updated_at),
    }


def skill_version_json(res: Resource) -> dict[str, Any]:
    body = res.body
    return {
        "id": res.id,
        "type": "skill_version",
        "skill_id": body["skill_id"],
        "name": body["name"],
        "description": body["description"],
        "created_at": timestamp(res.created_at),
    }


def _store_cursor(page: str | None) -> str | None:
    if page is None:
        return None
    if not page.startswith(_PAGE_PREFIX):
        raise InvalidRequest("page: invalid page cursor", param="page")
    return page[len(_PAGE_PREFIX) :]


def _next_page(cursor: str | None) -> str | None:
    return None if cursor is None else _PAGE_PREFIX + cursor


class _SkillRoutes:
    """The routes, one service call each."""

    def __init__(self, service: SkillService | None) -> None:
        self._service_or_none = service

    @property
    def _service(self) -> SkillService:
        if self._service_or_none is None:
            raise NotConfigured("skills need a blob store, and this control plane runs without one")
        return self._service_or_none

    async def create(self, request: Request) -> dict[str, Any]:
        service = self._service
        upload = await read_skill_upload(request, service.limits)
        return skill_json(await service.create(upload))

    async def list_(
        self, limit: int | None = None, page: str | None = None, source: str | None = None
    ) -> dict[str, Any]:
        query = SkillQuery(limit=limit, cursor=_store_cursor(page), source=source)
        found = await self._service.list_skills(query)
        return page_body([skill_json(r) for r in found.items], _next_page(found.next_cursor))

    async def retrieve(self, skill_id: str) -> dict[str, Any]:
        return skill_json(await self._service.get(skill_id))

    async def delete(self, skill_id: str) -> dict[str, Any]:
        await self._service.delete(skill_id)
        return {"id": skill_id, "type": "skill_deleted"}

    async def create_version(self, skill_id: str, request: Request) -> dict[str, Any]:
        service = self._service
        await service.get(skill_id)  # 404 before the body is read
        upload = await read_skill_upload(request, service.limits)
        return skill_version_json(await service.create_version(skill_id, upload))

    async def list_versions(
        self, skill_id: str, limit: int | None = None, page: str | None = None
    ) -> dict[str, Any]:
        query = VersionQuery(limit=limit, cursor=_store_cursor(page))
        found = await self._service.list_versions(skill_id, query)
        return page_body([skill_version_json(r) for r in found.items], _next_page(found.next_cursor))

    async def retrieve_version(self, skill_id: str, version: str) -> dict[str, Any]:
        return skill_version_json(await self._service.get_version(skill_id, version))

    async def content(self, skill_id: str, version: str) -> StreamingResponse:
        res, chunks = await self._service.content(skill_id, version)
        headers = {
            "content-type": "application/zip",
            "content-length": str(res.body["size_bytes"]),
            "content-disposition": f'attachment; filename="{res.body["name"]}.zip"',  # a checked slug
            "x-content-type-options": "nosniff",
        }
        return StreamingResponse(chunks, headers=headers)

    async def delete_version(self, skill_id: str, version: str) -> dict[str, Any]:
        res = await self._service.delete_version(skill_id, version)
        return {"id": res.id, "type": "skill_version_deleted"}


def skills_router(service: SkillService | None) -> APIRouter:
    routes = _SkillRoutes(service)
    router = APIRouter()
    versions = "/v1/skills/{skill_id}/versions"
    router.add_api_route("/v1/skills", routes.create, methods=["POST"])
    router.add_api_route("/v1/skills", routes.list_, methods=["GET"])
    router.add_api_route("/v1/skills/{skill_id}", routes.retrieve, methods=["GET"])
    router.add_api_route("/v1/skills/{skill_id}", routes.delete, methods=["DELETE"])
    router.add_api_route(versions, routes.create_version, methods=["POST"])
    router.add_api_route(versions, routes.list_versions, methods=["GET"])
    router.add_api_route(versions + "/{version}", routes.retrieve_version, methods=["GET"])
    router.add_api_route(versions + "/{version}/content", routes.content, methods=["GET"])
    router.add_api_route(versions + "/{version}", routes.delete_version, methods=["DELETE"])
    return router
