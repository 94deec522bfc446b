"""``AnthropicModelClient`` against the local model server: streaming events and error mapping."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from control_plane.harness import AnthropicModelClient, BlockStart, ModelError, StreamEvent, TextDelta
from control_plane.harness.model import ModelRetryableError, ModelTerminalError
from control_plane.model import LocalModelServer, Script, Text, Thinking, ToolUse, Turn

REQUEST: dict[str, Any] = {
    "model": "claude-local-test",
    "max_tokens": 256,
    "messages": [{"role": "user", "content": "hi"}],
}


async def test_streams_block_starts_and_text_deltas_and_returns_the_message() -> None:
    turn = Turn(
        [
            Thinking("Let me think."),
            Text("Hello there, how are you today?"),
            ToolUse("bash", {"command": "ls"}, "toolu_X"),
        ]
    )
    seen: list[StreamEvent] = []
    async with LocalModelServer(Script([turn])) as server:
        client = AnthropicModelClient(base_url=server.base_url, api_key="test")
        message = await client.stream(REQUEST, seen.append)
        await client.close()
        assert server.requests[0].body["stream"] is True
    assert [s for s in seen if isinstance(s, BlockStart)] == [
        BlockStart(0, "thinking"),
        BlockStart(1, "text"),
        BlockStart(2, "tool_use"),
    ]
    deltas = [s for s in seen if isinstance(s, TextDelta)]
    assert len(deltas) > 1 and {d.index for d in deltas} == {1}
    assert "".join(d.text for d in deltas) == "Hello there, how are you today?"
    assert message["role"] == "assistant"
    assert message["stop_reason"] == "tool_use"
    assert message["content"][0]["type"] == "thinking" and message["content"][0]["signature"]
    assert message["content"][2] == {
        "type": "tool_use",
        "id": "toolu_X",
        "name": "bash",
        "input": {"command": "ls"},
    }
    assert message["usage"]["output_tokens"] > 0


@pytest.mark.parametrize(
    ("status", "mid_stream", "error_class", "error_type"),
    [
        (529, False, ModelRetryableError, "model_overloaded_error"),
        (529, True, ModelRetryableError, "model_overloaded_error"),
        (429, False, ModelRetryableError, "model_rate_limited_error"),
        (500, False, ModelRetryableError, "model_request_failed_error"),
        (503, False, ModelRetryableError, "model_request_failed_error"),
        (400, False, ModelTerminalError, "model_request_failed_error"),
        (401, False, ModelTerminalError, "model_request_failed_error"),
        (402, False, ModelTerminalError, "billing_error"),
        (404, False, ModelTerminalError, "model_request_failed_error"),
    ],
)
async def test_errors_are_mapped_once(
    status: int, mid_stream: bool, error_class: type[ModelError], error_type: str
) -> None:
    async with LocalModelServer(Script(["unused"])) as server:
        server.inject_errors(status, mid_stream=mid_stream)
        client = AnthropicModelClient(base_url=server.base_url, api_key="test")
        with pytest.raises(ModelError) as caught:
            await client.stream(REQUEST, lambda _: None)
        await client.close()
        assert server.request_count == 1  # the SDK's own retries are off: the harness retries
    assert type(caught.value) is error_class
    assert caught.value.error_type == error_type
    assert caught.value.retryable is (error_class is ModelRetryableError)


async def test_connection_refused_is_retryable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = AnthropicModelClient(base_url=f"http://127.0.0.1:{port}", api_key="test", timeout_s=5)
    with pytest.raises(ModelRetryableError) as caught:
        await client.stream(REQUEST, lambda _: None)
    await client.close()
    assert caught.value.error_type == "model_request_failed_error"


async def test_api_key_is_never_in_the_error_message() -> None:
    async with LocalModelServer(Script(["x"]), api_key="right-key") as server:
        client = AnthropicModelClient(base_url=server.base_url, api_key="sk-secret-wrong-key")
        with pytest.raises(ModelTerminalError) as caught:
            await client.stream(REQUEST, lambda _: None)
        await client.close()
    assert "sk-secret-wrong-key" not in str(caught.value)
