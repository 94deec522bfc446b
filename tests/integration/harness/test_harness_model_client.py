"""``AnthropicModelClient`` against the local model server: streaming events and error mapping, the
message built from the raw stream equal to the SDK's own, and a pool smaller than the concurrency."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import anthropic
import pytest

from control_plane.harness import AnthropicModelClient, BlockStart, ModelError, StreamEvent, TextDelta
from control_plane.harness.model import ModelRetryableError, ModelTerminalError, _MessageAccumulator
from scripted_model import LocalModelServer, Script, Text, Thinking, ToolUse, Turn

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


TURNS = [
    Turn([Text("Just a short answer, in a few words.")]),
    Turn(
        [
            Thinking("Let me think about it first."),
            Text("I will list the files."),
            ToolUse("bash", {"command": "ls -la", "nested": {"n": [1, 2.5, None, "x"]}}, "toolu_A"),
        ]
    ),
    Turn([ToolUse("write", {"file_path": "a.txt", "content": 'é ✓ "quoted"\n' * 5}, "toolu_B")]),
]


@pytest.mark.parametrize("turn", TURNS, ids=["text", "thinking-text-tool", "tool-only"])
async def test_the_message_and_events_match_the_sdks_own_stream(turn: Turn) -> None:
    """The stream is parsed without the SDK's typed events: what it returns and reports must be
    what the SDK's ``MessageStream`` gives for the same bytes."""
    async with LocalModelServer(Script([turn, turn])) as server:
        client = AnthropicModelClient(base_url=server.base_url, api_key="test")
        seen: list[StreamEvent] = []
        ours = await client.stream(REQUEST, seen.append)
        await client.close()
        sdk = anthropic.AsyncAnthropic(base_url=server.base_url, api_key="test", max_retries=0)
        expected: list[StreamEvent] = []
        async with sdk.messages.stream(**REQUEST) as stream:
            async for event in stream:
                if event.type == "content_block_start":
                    expected.append(BlockStart(event.index, event.content_block.type))
                elif event.type == "content_block_delta" and event.delta.type == "text_delta":
                    expected.append(TextDelta(event.index, event.delta.text))
            final = (await stream.get_final_message()).model_dump(mode="json", exclude_none=True)
        await sdk.close()
    assert seen == expected
    ours.pop("id"), final.pop("id")  # each request gets its own message id
    assert ours == final


async def test_concurrent_streams_share_a_small_pool() -> None:
    """More concurrent requests than connections: they queue for a connection of their shard."""
    async with LocalModelServer(lambda _request: Turn.text("pooled answer"), ttft_s=0.05) as server:
        client = AnthropicModelClient(base_url=server.base_url, api_key="test", max_connections=4)
        messages = await asyncio.gather(*(client.stream(REQUEST, lambda _: None) for _ in range(20)))
        await client.close()
        assert server.request_count == 20
    assert all(m["content"] == [{"type": "text", "text": "pooled answer"}] for m in messages)


def test_a_stream_without_message_start_is_a_retryable_error() -> None:
    accumulator = _MessageAccumulator(lambda _: None)
    with pytest.raises(ModelRetryableError, match="message_start"):
        accumulator.add("content_block_start", '{"index": 0, "content_block": {"type": "text", "text": ""}}')
    with pytest.raises(ModelRetryableError, match="ended before"):
        accumulator.result()
