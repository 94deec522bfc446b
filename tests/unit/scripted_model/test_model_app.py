"""The local model's HTTP behaviour, driven in memory through its ASGI app (no socket)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from scripted_model import LocalModelServer, Responder, Script, Turn

BODY: dict[str, Any] = {"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
KEY = {"x-api-key": "sk-secret-value"}


def client_for(server: LocalModelServer) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=server.app), base_url="http://model")


@pytest.fixture
async def server() -> AsyncIterator[LocalModelServer]:
    yield LocalModelServer(Script(["first", "second"]))


async def post(
    server: LocalModelServer, body: Any = BODY, headers: Mapping[str, str] = KEY
) -> httpx.Response:
    async with client_for(server) as client:
        if isinstance(body, bytes):
            return await client.post("/v1/messages", content=body, headers=dict(headers))
        return await client.post("/v1/messages", json=body, headers=dict(headers))


def sse_events(text: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for chunk in text.split("\n\n"):
        if not chunk:
            continue
        name_line, data_line = chunk.split("\n")
        assert name_line.startswith("event: ")
        assert data_line.startswith("data: ")
        events.append((name_line[7:], json.loads(data_line[6:])))
    return events


async def test_non_streaming_returns_the_message(server: LocalModelServer) -> None:
    response = await post(server)
    assert response.status_code == 200
    assert response.headers["request-id"].startswith("req_")
    message = response.json()
    assert message["type"] == "message"
    assert message["content"] == [{"type": "text", "text": "first"}]
    assert message["stop_reason"] == "end_turn"
    assert message["model"] == "m"


async def test_streaming_sends_sse_in_order(server: LocalModelServer) -> None:
    response = await post(server, {**BODY, "stream": True})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    names = [name for name, _ in sse_events(response.text)]
    assert names == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]


@pytest.mark.parametrize(
    "headers", [{}, {"x-api-key": ""}, {"authorization": "Bearer "}, {"authorization": "k"}]
)
async def test_missing_key_is_401_in_the_real_shape(
    server: LocalModelServer, headers: dict[str, str]
) -> None:
    response = await post(server, headers=headers)
    assert response.status_code == 401
    body = response.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == "authentication_error"
    assert body["request_id"] == response.headers["request-id"]
    assert server.request_count == 1
    assert isinstance(server.script, Script)
    assert server.script.served == 0


async def test_bearer_key_is_accepted(server: LocalModelServer) -> None:
    response = await post(server, headers={"authorization": "Bearer sk-abc"})
    assert response.status_code == 200


async def test_a_configured_key_must_match() -> None:
    server = LocalModelServer(Script(["ok"]), api_key="right")
    assert (await post(server, headers={"x-api-key": "wrong"})).status_code == 401
    assert (await post(server, headers={"x-api-key": "right"})).status_code == 200


async def test_keys_can_be_optional() -> None:
    server = LocalModelServer(Script(["ok"]), require_key=False)
    assert (await post(server, headers={})).status_code == 200


async def test_requests_are_recorded_without_the_key(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    server = LocalModelServer(Script(["a", "b"]), request_log_path=log)
    await post(server)
    await post(server, headers={"authorization": "Bearer sk-secret-value"})
    await post(server, body=b"not json")
    assert server.request_count == 3
    first, second, third = server.requests
    assert first.headers["x-api-key"] == "[redacted]"
    assert second.headers["authorization"] == "[redacted]"
    assert first.body == BODY
    assert first.messages == BODY["messages"]
    assert not first.stream
    assert third.body is None
    assert first.received_at <= second.received_at <= third.received_at
    text = log.read_text()
    assert "sk-secret-value" not in text
    assert "sk-secret-value" not in repr(server.requests)
    lines = [json.loads(line) for line in text.splitlines()]
    assert lines == [r.to_json() for r in server.requests]


async def test_invalid_requests_are_400_and_consume_no_turn(server: LocalModelServer) -> None:
    response = await post(server, {"model": "m", "messages": []})
    assert response.status_code == 400
    assert response.json()["error"] == {
        "type": "invalid_request_error",
        "message": "max_tokens: Field required",
    }
    assert (await post(server)).json()["content"][0]["text"] == "first"


async def test_unknown_paths_are_404(server: LocalModelServer) -> None:
    async with client_for(server) as client:
        response = await client.get("/v1/models", headers=KEY)
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found_error"


async def test_exhausted_script_is_a_clear_400() -> None:
    server = LocalModelServer(Script(["only"]))
    await post(server)
    response = await post(server)
    assert response.status_code == 400
    assert "script exhausted" in response.json()["error"]["message"]


async def test_injected_errors_come_first_and_consume_no_turn(server: LocalModelServer) -> None:
    server.inject_errors(529, 2, retry_after_s=0.25, should_retry=True)
    server.inject_errors(500, message="boom")
    assert server.pending_errors == 3
    assert (await post(server, headers={})).status_code == 401  # auth failures take no injection
    first = await post(server)
    assert first.status_code == 529
    assert first.json()["error"] == {"type": "overloaded_error", "message": "Overloaded"}
    assert first.headers["retry-after-ms"] == "250"
    assert first.headers["retry-after"] == "1"
    assert first.headers["x-should-retry"] == "true"
    assert (await post(server)).status_code == 529
    third = await post(server)
    assert third.status_code == 500
    assert third.json()["error"] == {"type": "api_error", "message": "boom"}
    assert "retry-after" not in third.headers
    assert server.pending_errors == 0
    assert (await post(server)).json()["content"][0]["text"] == "first"


async def test_injected_error_type_can_be_overridden(server: LocalModelServer) -> None:
    server.inject_errors(400, error_type="request_too_large")
    assert (await post(server)).json()["error"]["type"] == "request_too_large"
    server.inject_errors(503)
    server.clear_injected_errors()
    assert (await post(server)).status_code == 200


@pytest.mark.parametrize(("status", "count"), [(200, 1), (529, 0)])
def test_inject_errors_checks_its_arguments(status: int, count: int) -> None:
    with pytest.raises(ValueError):
        LocalModelServer(Script()).inject_errors(status, count)


async def test_mid_stream_error_keeps_the_turn(server: LocalModelServer) -> None:
    server.inject_errors(529, mid_stream=True)
    response = await post(server, {**BODY, "stream": True})
    assert response.status_code == 200
    events = sse_events(response.text)
    assert [name for name, _ in events][-2:] == ["content_block_delta", "error"]
    assert events[-1][1]["error"]["type"] == "overloaded_error"
    assert (await post(server)).json()["content"][0]["text"] == "first"


async def test_mid_stream_injection_fails_a_non_streaming_request_plainly(server: LocalModelServer) -> None:
    server.inject_errors(529, mid_stream=True)
    assert (await post(server)).status_code == 529


async def test_responders_see_the_request_and_may_be_async() -> None:
    seen: list[Mapping[str, Any]] = []
    release = asyncio.Event()

    async def responder(request: Mapping[str, Any]) -> Turn:
        seen.append(request)
        await release.wait()
        return Turn.text(f"{len(request['messages'])} message(s)")

    server = LocalModelServer(responder)
    pending = asyncio.create_task(post(server))
    while not seen:
        await asyncio.sleep(0.001)
    assert not pending.done()
    release.set()
    response = await pending
    assert response.json()["content"][0]["text"] == "1 message(s)"
    assert seen[0]["messages"] == BODY["messages"]


@pytest.mark.parametrize(
    "responder",
    [
        lambda request: 1 / 0,
        lambda request: "not a turn",
    ],
)
async def test_a_failing_responder_is_a_500_that_is_not_retried(responder: Responder) -> None:
    server = LocalModelServer(responder)
    response = await post(server)
    assert response.status_code == 500
    assert response.json()["error"]["type"] == "api_error"
    assert response.headers["x-should-retry"] == "false"


def test_constructor_checks_its_arguments() -> None:
    with pytest.raises(ValueError):
        LocalModelServer(Script(), ttft_s=-1)
    with pytest.raises(ValueError):
        LocalModelServer(Script(), words_per_chunk=0)
