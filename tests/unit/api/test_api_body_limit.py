"""``BodyLimitMiddleware`` in front of a small ASGI app that reads the whole body."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from control_plane.api.body_limit import BodyLimitMiddleware

LIMIT = 1000


def make_app() -> tuple[BodyLimitMiddleware, list[int]]:
    seen: list[int] = []

    async def echo(request: Request) -> JSONResponse:
        body = await request.body()
        seen.append(len(body))
        return JSONResponse({"size": len(body)})

    return BodyLimitMiddleware(Starlette(routes=[Route("/", echo, methods=["POST"])]), LIMIT), seen


async def test_small_bodies_pass() -> None:
    app, seen = make_app()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        response = await client.post("/", content=b"x" * LIMIT)
    assert response.status_code == 200
    assert response.json() == {"size": LIMIT}
    assert seen == [LIMIT]


async def test_declared_length_over_the_limit_is_refused_unread() -> None:
    app, seen = make_app()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        response = await client.post("/", content=b"x" * (LIMIT + 1))
    assert response.status_code == 413
    assert response.json()["error"]["type"] == "request_too_large"
    assert seen == []


async def test_streamed_body_is_cut_off_at_the_limit() -> None:
    app, seen = make_app()

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(5):
            yield b"y" * 300

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        response = await client.post("/", content=chunks())
    assert response.status_code == 413
    assert response.json() == {
        "type": "error",
        "error": {
            "type": "request_too_large",
            "message": f"request body is larger than the limit of {LIMIT} bytes",
        },
    }
    assert seen == []
