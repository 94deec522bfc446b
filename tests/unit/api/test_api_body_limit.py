"""``BodyLimitMiddleware`` in front of a small ASGI app that reads the whole body."""

from __future__ import annotations

import asyncio
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


async def test_routes_with_content_get_the_larger_limit() -> None:
    seen: list[int] = []

    async def echo(request: Request) -> JSONResponse:
        seen.append(len(await request.body()))
        return JSONResponse({})

    routes = [Route(p, echo, methods=["POST"]) for p in ("/v1/agents", "/v1/sessions/s1/events")]
    app = BodyLimitMiddleware(Starlette(routes=routes), LIMIT, content_max_body_bytes=10 * LIMIT)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        small_route = await client.post("/v1/agents", content=b"x" * (LIMIT + 1))
        content_route = await client.post("/v1/sessions/s1/events", content=b"x" * (5 * LIMIT))
        too_much = await client.post("/v1/sessions/s1/events", content=b"x" * (10 * LIMIT + 1))
    assert small_route.status_code == 413
    assert content_route.status_code == 200
    assert too_much.status_code == 413
    assert f"limit of {10 * LIMIT} bytes" in too_much.json()["error"]["message"]
    assert seen == [5 * LIMIT]


async def test_uploads_get_their_own_limit() -> None:
    seen: list[int] = []

    async def echo(request: Request) -> JSONResponse:
        seen.append(len(await request.body()))
        return JSONResponse({})

    routes = [Route(p, echo, methods=["POST"]) for p in ("/v1/files", "/v1/sessions/s1/events")]
    app = BodyLimitMiddleware(
        Starlette(routes=routes), LIMIT, content_max_body_bytes=2 * LIMIT, upload_max_body_bytes=10 * LIMIT
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        upload = await client.post("/v1/files", content=b"x" * (5 * LIMIT))
        content_route = await client.post("/v1/sessions/s1/events", content=b"x" * (5 * LIMIT))
        too_much = await client.post("/v1/files", content=b"x" * (10 * LIMIT + 1))
    assert (upload.status_code, content_route.status_code, too_much.status_code) == (200, 413, 413)
    assert seen == [5 * LIMIT]


async def test_a_body_that_stops_arriving_is_a_408() -> None:
    app, seen = make_app()
    app.body_timeout_s = 0.2  # short so the test is quick; the default is 30 s

    async def stalls() -> AsyncIterator[bytes]:
        yield b"x" * 10
        await asyncio.sleep(5)
        yield b"never"

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        response = await client.post("/", content=stalls())
    assert response.status_code == 408
    assert response.json()["error"]["type"] == "timeout_error"
    assert seen == []
