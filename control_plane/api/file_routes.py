"""``/v1/files``: upload (multipart), list, metadata, content, delete — HTTP only.

Each route calls one method of :class:`~control_plane.files.FileService` (which holds the rules:
the size cap, the name and type kept, expiry) and shows the result as the SDK's
``BetaFileMetadata`` / ``BetaDeletedFile``. The upload's body is read as it streams in
(:class:`~control_plane.api.multipart.MultipartUpload`), never whole; the content is streamed
back the same way, with the file's type, its length and ``Content-Disposition: attachment``.
Any key may read files; uploading and deleting need an unscoped key (the router's dependency, in
``app.py``): files belong to no environment, as agents and vaults. Without a blob store the routes
answer 503.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from control_plane.api.multipart import MultipartUpload
from control_plane.api.query import page_body, query_list
from control_plane.errors import InvalidRequest, NotConfigured
from control_plane.files import FileQuery, FileService
from control_plane.store.base import Resource
from control_plane.timestamps import timestamp

__all__ = ["file_json", "files_router"]

_PAGE_PREFIX = "page_"  # the hosted API's cursors start so


def file_json(res: Resource) -> dict[str, Any]:
    body = res.body
    scope_id = body.get("scope_id")
    return {
        "id": res.id,
        "type": "file",
        "filename": body["filename"],
        "mime_type": body["mime_type"],
        "size_bytes": body["size_bytes"],
        "created_at": timestamp(res.created_at),
        "downloadable": body.get("downloadable", True),
        "expires_at": body.get("expires_at"),
        "scope": None if scope_id is None else {"type": "session", "id": scope_id},
    }


def _store_cursor(page: str | None) -> str | None:
    if page is None:
        return None
    if not page.startswith(_PAGE_PREFIX):
        raise InvalidRequest("page: invalid page cursor", param="page")
    return page[len(_PAGE_PREFIX) :]


def _content_headers(res: Resource) -> dict[str, str]:
    name = res.body["filename"]
    return {
        "content-type": res.body["mime_type"],
        "content-length": str(res.body["size_bytes"]),
        "content-disposition": f"attachment; filename*=UTF-8''{quote(name, safe='')}",
        "x-content-type-options": "nosniff",  # a browser never runs an uploaded page as ours
    }


class _FileRoutes:
    """The routes, one service call each."""

    def __init__(self, service: FileService | None) -> None:
        self._service_or_none = service

    @property
    def _service(self) -> FileService:
        if self._service_or_none is None:
            raise NotConfigured("files need a blob store, and this control plane runs without one")
        return self._service_or_none

    async def upload(self, request: Request) -> dict[str, Any]:
        service = self._service
        return file_json(await service.upload(MultipartUpload(request)))

    async def list_(
        self, request: Request, limit: int | None = None, page: str | None = None, scope_id: str | None = None
    ) -> dict[str, Any]:
        query = FileQuery(
            limit=limit,
            cursor=_store_cursor(page),
            ids=query_list(request.query_params, "ids"),
            scope_id=scope_id,
        )
        found = await self._service.list_files(query)
        next_page = None if found.next_cursor is None else _PAGE_PREFIX + found.next_cursor
        return page_body([file_json(r) for r in found.items], next_page)

    async def retrieve(self, file_id: str) -> dict[str, Any]:
        return file_json(await self._service.get(file_id))

    async def content(self, file_id: str) -> StreamingResponse:
        res, chunks = await self._service.content(file_id)
        return StreamingResponse(chunks, headers=_content_headers(res))

    async def delete(self, file_id: str) -> dict[str, Any]:
        await self._service.delete(file_id)
        return {"id": file_id, "type": "file_deleted"}


def files_router(service: FileService | None) -> APIRouter:
    routes = _FileRoutes(service)
    router = APIRouter()
    router.add_api_route("/v1/files", routes.upload, methods=["POST"])
    router.add_api_route("/v1/files", routes.list_, methods=["GET"])
    router.add_api_route("/v1/files/{file_id}", routes.retrieve, methods=["GET"])
    router.add_api_route("/v1/files/{file_id}/content", routes.content, methods=["GET"])
    router.add_api_route("/v1/files/{file_id}", routes.delete, methods=["DELETE"])
    return router
