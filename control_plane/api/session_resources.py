"""``/v1/sessions/{session_id}/resources``: a session's resources (git repositories).

* ``GET .../resources`` (``limit``, ``page``) and ``GET .../resources/{id}``: the repositories as
  :func:`~control_plane.sessions.repositories.repository_json` shows them, never the token;
* ``POST .../resources/{id}`` ``{"authorization_token"}``: rotate a repository's token (sealed
  again; the edge gets the new one with the session's next sandbox request);
* ``DELETE .../resources/{id}``: the repository is no longer the session's (its files stay in the
  workspace; the edge stops relaying pull/push for it at the session's next sandbox request);
* ``POST .../resources`` adds ``file`` resources in the API; Outpost does not mount files yet, and
  repositories are given when the session is created, so it answers 400.

Repositories themselves are created with the session (:func:`create_repositories`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from fastapi import APIRouter, Body

from control_plane.api.caller import Caller, CallerDep
from control_plane.api.errors import ApiError
from control_plane.api.query import check_limit
from control_plane.api.wire import page_body
from control_plane.errors import InvalidRequest, NotFound
from control_plane.sessions.repositories import (
    RESOURCE_KIND,
    RepositoryInput,
    check_token,
    new_resource_id,
    repository_body,
    repository_json,
)
from control_plane.sessions.repository_tokens import RepositoryTokens
from control_plane.store.base import Order, Resource, Resources

__all__ = ["create_repositories", "session_resources_router"]

MAX_PAGE = 100
_NO_VAULT = "authorization_token: the vault (which seals tokens) is not configured on this control plane"


async def create_repositories(
    store: Resources,
    tokens: RepositoryTokens | None,
    session_id: str,
    repositories: Sequence[RepositoryInput],
    now: datetime,
) -> list[Resource]:
    """Store the repositories of a new session, tokens sealed."""
    if tokens is None and any(repo.token for repo in repositories):
        raise ApiError(503, _NO_VAULT)
    created: list[Resource] = []
    for index, repo in enumerate(repositories):
        resource_id = new_resource_id()
        sealed = None
        if repo.token and tokens is not None:
            sealed = await tokens.seal(session_id, resource_id, repo.url, repo.token)
        body = repository_body(session_id, repo, sealed)
        # One microsecond apart: listings (ordered by creation time, then id) keep the request's order.
        at = now + timedelta(microseconds=index)
        created.append(await store.create_resource(RESOURCE_KIND, resource_id, body, at))
    return created


def session_resources_router(
    store: Resources, tokens: RepositoryTokens | None, clock: Callable[[], datetime]
) -> APIRouter:
    router = APIRouter()

    async def session_of(caller: Caller, session_id: str, *, usable: bool = False) -> Resource:
        session = await caller.session(store, session_id)  # 404 for another environment's session
        if usable and session.archived_at is not None:
            raise InvalidRequest(f"session {session_id!r} is archived", param="session_id")
        return session

    async def resource_of(session_id: str, resource_id: str) -> Resource:
        res = await store.get_resource(RESOURCE_KIND, resource_id)
        if res.body.get("session_id") != session_id:
            raise NotFound(RESOURCE_KIND, resource_id)
        return res

    @router.get("/v1/sessions/{session_id}/resources")
    async def list_(
        session_id: str, caller: CallerDep, limit: int = 20, page: str | None = None
    ) -> dict[str, Any]:
        await session_of(caller, session_id)
        result = await store.list_resources(
            RESOURCE_KIND,
            filters={"session_id": session_id},
            limit=check_limit(limit, MAX_PAGE),
            cursor=page,
            order=Order.ASC,
        )
        return page_body([repository_json(r) for r in result.items], result.next_cursor)

    @router.post("/v1/sessions/{session_id}/resources")
    async def add(session_id: str, caller: CallerDep, body: dict[str, Any] = Body(...)) -> dict[str, Any]:  # noqa: B008
        await session_of(caller, session_id, usable=True)
        kind = body.get("type")
        if kind == "file":
            raise InvalidRequest("type: 'file' resources are not supported by Outpost yet", param="type")
        raise InvalidRequest(
            "type: only 'file' resources can be added to a session; repositories are given when the "
            "session is created",
            param="type",
        )

    @router.get("/v1/sessions/{session_id}/resources/{resource_id}")
    async def retrieve(session_id: str, resource_id: str, caller: CallerDep) -> dict[str, Any]:
        await session_of(caller, session_id)
        return repository_json(await resource_of(session_id, resource_id))

    @router.post("/v1/sessions/{session_id}/resources/{resource_id}")
    async def update(
        session_id: str,
        resource_id: str,
        caller: CallerDep,
        body: dict[str, Any] = Body(...),  # noqa: B008
    ) -> dict[str, Any]:
        await session_of(caller, session_id, usable=True)
        res = await resource_of(session_id, resource_id)
        unknown = sorted(set(body) - {"authorization_token"})
        if unknown:
            raise InvalidRequest(f"unknown field(s) {', '.join(unknown)}", param=unknown[0])
        token = check_token(body.get("authorization_token"), "authorization_token")
        if tokens is None:
            raise ApiError(503, _NO_VAULT)
        sealed = await tokens.seal(session_id, resource_id, str(res.body["url"]), token)
        updated = await store.update_resource(
            RESOURCE_KIND, resource_id, {**res.body, "sealed": sealed}, clock(), expected_version=res.version
        )
        return repository_json(updated)

    @router.delete("/v1/sessions/{session_id}/resources/{resource_id}")
    async def delete(session_id: str, resource_id: str, caller: CallerDep) -> dict[str, Any]:
        await session_of(caller, session_id)
        await resource_of(session_id, resource_id)
        await store.delete_resource(RESOURCE_KIND, resource_id)
        return {"id": resource_id, "type": "session_resource_deleted"}

    return router
