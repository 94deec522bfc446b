"""The local model server over a real socket, driven by the real ``anthropic`` SDK."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import sys
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from anthropic.types import MessageParam, ThinkingConfigParam, ToolParam
from anthropic.types.beta import BetaMessageParam

from scripted_model import (
    LocalModelServer,
    Script,
    Text,
    Thinking,
    ToolUse,
    Turn,
    demo_responder,
    echo_responder,
)

MODEL = "claude-local-test"
PROMPT: list[MessageParam] = [{"role": "user", "content": "Hello, model."}]
LONG_TEXT = "The quick brown fox jumps over the lazy dog, and then it naps in the afternoon sun."


def client_for(server: LocalModelServer, **options: Any) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=server.base_url, api_key="test", **options)


@contextlib.asynccontextmanager
async def serving(
    script: Any, **options: Any
) -> AsyncIterator[tuple[LocalModelServer, anthropic.AsyncAnthropic]]:
    async with LocalModelServer(script, **options) as server:
        client = client_for(server)
        try:
            yield server, client
        finally:
            await client.close()


async def test_streaming_text_arrives_in_deltas_and_accumulates() -> None:
    async with (
        serving(Script([LONG_TEXT])) as (server, client),
        client.messages.stream(model=MODEL, max_tokens=256, messages=PROMPT) as stream,
    ):
        deltas = [text async for text in stream.text_stream]
        message = await stream.get_final_message()
    assert len(deltas) > 1
    assert "".join(deltas) == LONG_TEXT
    assert message.id.startswith("msg_")
    assert message.model == MODEL
    assert message.role == "assistant"
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].type == "text"
    assert message.content[0].text == LONG_TEXT
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens > 0
    assert message.usage.output_tokens > 1
    assert message.usage.cache_read_input_tokens == 0
    assert message.usage.cache_creation_input_tokens == 0
    assert server.request_count == 1


async def test_tool_use_streams_partial_json_and_parses_the_input() -> None:
    tool_input = {"command": "ls -la /workspace && echo 'done'", "timeout_ms": 5000, "env": {"A": "é"}}
    script = Script([Turn([Text("Let me look."), ToolUse("bash", tool_input)])])
    tools: list[ToolParam] = [{"name": "bash", "input_schema": {"type": "object"}}]
    async with (
        serving(script) as (_, client),
        client.messages.stream(model=MODEL, max_tokens=256, messages=PROMPT, tools=tools) as stream,
    ):
        partial_json = [e.partial_json async for e in stream if e.type == "input_json"]
        message = await stream.get_final_message()
    assert len([p for p in partial_json if p]) > 1
    assert message.stop_reason == "tool_use"
    text, tool_use = message.content
    assert text.type == "text"
    assert text.text == "Let me look."
    assert tool_use.type == "tool_use"
    assert tool_use.name == "bash"
    assert tool_use.id.startswith("toolu_")
    assert tool_use.input == tool_input


async def test_thinking_block_streams_with_its_signature() -> None:
    script = Script([Turn([Thinking("First I consider the question carefully."), Text("Answer.")])])
    config: ThinkingConfigParam = {"type": "enabled", "budget_tokens": 1024}
    async with (
        serving(script) as (_, client),
        client.messages.stream(model=MODEL, max_tokens=2048, messages=PROMPT, thinking=config) as stream,
    ):
        kinds = [e.type async for e in stream]
        message = await stream.get_final_message()
    assert "thinking" in kinds
    assert "signature" in kinds
    thinking, text = message.content
    assert thinking.type == "thinking"
    assert thinking.thinking == "First I consider the question carefully."
    assert thinking.signature
    assert text.type == "text"
    assert text.text == "Answer."


async def test_non_streaming_create() -> None:
    script = Script([Turn([Text("Sure."), ToolUse("write", {"file_path": "a.txt", "content": "x"})])])
    async with serving(script) as (_, client):
        message = await client.messages.create(model=MODEL, max_tokens=256, messages=PROMPT)
    assert message.stop_reason == "tool_use"
    assert message.content[0].type == "text"
    assert message.content[1].type == "tool_use"
    assert message.content[1].input == {"file_path": "a.txt", "content": "x"}
    assert message.usage.input_tokens > 0
    assert message.usage.output_tokens > 0


async def test_beta_messages_stream_works_too() -> None:
    prompt: list[BetaMessageParam] = [{"role": "user", "content": "Hello, model."}]
    script = Script([Turn([Thinking("hmm"), Text("Done."), ToolUse("bash", {"command": "ls"})])])
    async with (
        serving(script) as (server, client),
        client.beta.messages.stream(
            model=MODEL, max_tokens=256, messages=prompt, betas=["interleaved-thinking-2025-05-14"]
        ) as stream,
    ):
        message = await stream.get_final_message()
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use"]
    assert message.stop_reason == "tool_use"
    assert server.requests[0].headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"


async def test_max_tokens_stop_reason_is_reported() -> None:
    async with (
        serving(Script([Turn([Text("cut")], stop_reason="max_tokens")])) as (_, client),
        client.messages.stream(model=MODEL, max_tokens=1, messages=PROMPT) as stream,
    ):
        message = await stream.get_final_message()
    assert message.stop_reason == "max_tokens"


@pytest.mark.parametrize(
    ("status", "error_class", "error_type"),
    [
        (529, anthropic.OverloadedError, "overloaded_error"),
        (500, anthropic.InternalServerError, "api_error"),
        (429, anthropic.RateLimitError, "rate_limit_error"),
    ],
)
async def test_injected_error_surfaces_at_once_without_retries(
    status: int, error_class: type[anthropic.APIStatusError], error_type: str
) -> None:
    async with serving(Script(["ok"])) as (server, client):
        server.inject_errors(status)
        with pytest.raises(error_class) as info:
            await client.with_options(max_retries=0).messages.create(
                model=MODEL, max_tokens=10, messages=PROMPT
            )
        assert server.request_count == 1
    assert info.value.status_code == status
    assert isinstance(info.value.body, dict)
    assert info.value.body["error"]["type"] == error_type
    assert info.value.request_id is not None
    assert issubclass(anthropic.OverloadedError, anthropic.InternalServerError)


async def test_sdk_raises_after_exhausting_its_retries() -> None:
    async with serving(Script(["ok"])) as (server, client):
        server.inject_errors(529, 3, retry_after_s=0.01)
        with pytest.raises(anthropic.OverloadedError):
            async with client.with_options(max_retries=2).messages.stream(
                model=MODEL, max_tokens=10, messages=PROMPT
            ) as stream:
                await stream.get_final_message()
        assert server.request_count == 3
        assert [r.headers["x-stainless-retry-count"] for r in server.requests] == ["0", "1", "2"]


async def test_sdk_retries_through_transient_errors() -> None:
    async with serving(Script(["made it"])) as (server, client):
        server.inject_errors(500, 2, retry_after_s=0.01)
        async with client.with_options(max_retries=2).messages.stream(
            model=MODEL, max_tokens=10, messages=PROMPT
        ) as stream:
            message = await stream.get_final_message()
        assert server.request_count == 3
    assert message.content[0].type == "text"
    assert message.content[0].text == "made it"


async def test_mid_stream_error_raises_after_partial_output() -> None:
    async with serving(Script([LONG_TEXT])) as (server, client):
        server.inject_errors(529, mid_stream=True)
        received: list[str] = []
        with pytest.raises(anthropic.APIStatusError) as info:
            async with client.messages.stream(model=MODEL, max_tokens=256, messages=PROMPT) as stream:
                async for text in stream.text_stream:
                    received.append(text)
        assert isinstance(info.value.body, dict)
        assert info.value.body["error"]["type"] == "overloaded_error"
        assert len(received) == 1
        assert LONG_TEXT.startswith(received[0])
        # The scripted turn was not consumed: the retry gets all of it.
        async with client.messages.stream(model=MODEL, max_tokens=256, messages=PROMPT) as stream:
            message = await stream.get_final_message()
    assert message.content[0].type == "text"
    assert message.content[0].text == LONG_TEXT


async def test_missing_key_raises_authentication_error() -> None:
    async with LocalModelServer(Script(["ok"])) as server:
        client = anthropic.AsyncAnthropic(
            base_url=server.base_url,
            api_key="unused",
            max_retries=0,
            # The SDK omits a header given as Omit(), though its annotation says str.
            default_headers={"X-Api-Key": anthropic.Omit(), "Authorization": anthropic.Omit()},  # type: ignore[dict-item]
        )
        with pytest.raises(anthropic.AuthenticationError) as info:
            await client.messages.create(model=MODEL, max_tokens=10, messages=PROMPT)
        await client.close()
    assert info.value.status_code == 401
    assert isinstance(info.value.body, dict)
    assert info.value.body["error"]["type"] == "authentication_error"


async def test_ttft_delays_the_first_text_delta() -> None:
    ttft_s = 0.3
    async with serving(Script([LONG_TEXT]), ttft_s=ttft_s, chunk_delay_s=0.01) as (_, client):
        started = time.monotonic()
        first_delta_at: float | None = None
        events: list[str] = []
        async with client.messages.stream(model=MODEL, max_tokens=256, messages=PROMPT) as stream:
            async for event in stream:
                events.append(event.type)
                if event.type == "text" and first_delta_at is None:
                    first_delta_at = time.monotonic()
    assert first_delta_at is not None
    assert first_delta_at - started >= ttft_s
    assert events[0] == "message_start"


async def test_non_streaming_honours_ttft_too() -> None:
    async with serving(Script(["hi"]), ttft_s=0.2) as (_, client):
        started = time.monotonic()
        await client.messages.create(model=MODEL, max_tokens=10, messages=PROMPT)
    assert time.monotonic() - started >= 0.2


async def test_requests_are_recorded_and_logged(tmp_path: Path) -> None:
    log = tmp_path / "model-requests.jsonl"
    system = "You are terse."
    async with serving(Script(["one", "two"]), request_log_path=log) as (server, client):
        before = time.monotonic()
        await client.messages.create(model=MODEL, max_tokens=10, messages=PROMPT, system=system)
        async with client.messages.stream(model=MODEL, max_tokens=10, messages=PROMPT) as stream:
            await stream.get_final_message()
        requests = server.requests
    assert server.request_count == 2
    assert [r.stream for r in requests] == [False, True]
    assert requests[0].body["system"] == system
    assert requests[0].messages == PROMPT
    assert before <= requests[0].received_at <= requests[1].received_at
    assert requests[0].headers["authorization"] == "[redacted]"
    assert "anthropic-version" in requests[0].headers
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert lines == [r.to_json() for r in requests]
    assert "Bearer test" not in log.read_text()


async def test_concurrent_streams_are_served_independently() -> None:
    async with serving(echo_responder, chunk_delay_s=0.001) as (server, client):

        async def ask(n: int) -> str:
            messages: list[MessageParam] = [{"role": "user", "content": f"number {n} of many"}]
            async with client.messages.stream(model=MODEL, max_tokens=64, messages=messages) as stream:
                return await stream.get_final_text()

        answers = await asyncio.gather(*(ask(n) for n in range(8)))
        assert server.request_count == 8
    assert answers == [f"You said: number {n} of many" for n in range(8)]


async def test_demo_responder_through_the_sdk() -> None:
    """The offline demo's loop: write a program, run it, quote its output."""
    tools: list[ToolParam] = [
        {"name": "bash", "input_schema": {"type": "object"}},
        {"name": "write", "input_schema": {"type": "object"}},
    ]
    files: dict[str, str] = {}
    messages: list[MessageParam] = [{"role": "user", "content": "Show me the sandbox."}]
    async with serving(demo_responder) as (server, client):
        for _ in range(5):
            async with client.messages.stream(
                model=MODEL, max_tokens=1024, messages=messages, tools=tools
            ) as s:
                message = await s.get_final_message()
            messages.append({"role": "assistant", "content": message.content})
            if message.stop_reason != "tool_use":
                break
            results: list[Any] = []
            for block in message.content:
                if block.type != "tool_use":
                    continue
                tool_input: Mapping[str, Any] = block.input
                if block.name == "write":
                    files[tool_input["file_path"]] = tool_input["content"]
                    output = "wrote it"
                else:
                    out = io.StringIO()
                    with contextlib.redirect_stdout(out):
                        exec(files[tool_input["command"].split()[-1]], {})
                    output = out.getvalue()
                results.append({"type": "tool_result", "tool_use_id": block.id, "content": output})
            messages.append({"role": "user", "content": results})
        assert server.request_count == 3
    final = message.content[-1]
    assert final.type == "text"
    assert "The first ten squares add up to 385." in final.text


async def test_close_is_idempotent_and_frees_the_port() -> None:
    server = LocalModelServer(Script(["ok"]))
    async with server:
        url = server.base_url
    await server.close()
    async with httpx.AsyncClient() as client:
        with pytest.raises(httpx.ConnectError):
            await client.post(f"{url}/v1/messages", json={})


async def test_standalone_entry_point_prints_its_url_and_stops_on_sigterm() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "scripted_model.local_server",
        "--port",
        "0",
        "--script",
        "echo",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        url = (await asyncio.wait_for(proc.stdout.readline(), timeout=30)).decode().strip()
        assert url.startswith("http://127.0.0.1:")
        client = anthropic.AsyncAnthropic(base_url=url, api_key="test", max_retries=0)
        message = await client.messages.create(model=MODEL, max_tokens=10, messages=PROMPT)
        await client.close()
        assert message.content[0].type == "text"
        assert message.content[0].text == "You said: Hello, model."
    finally:
        proc.terminate()
        _, stderr = await asyncio.wait_for(proc.communicate(), timeout=30)
    assert proc.returncode == 0, stderr.decode()
    assert b"RuntimeWarning" not in stderr
