"""The local model's ``compaction`` parameter and ``count_tokens``, through the official SDK over
loopback (the harness's compaction tests rely on both)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import pytest

from scripted_model import LocalModelServer, Script, wire

MESSAGES: list[Any] = [
    {"role": "user", "content": "Read the logs."},
    {"role": "assistant", "content": [{"type": "text", "text": "Reading."}]},
    {"role": "user", "content": [{"type": "text", "text": "a.log: " + "x" * 400}]},
]


@pytest.fixture
async def server() -> AsyncIterator[LocalModelServer]:
    async with LocalModelServer(Script(["first"])) as server:
        yield server


@pytest.fixture
async def client(server: LocalModelServer) -> AsyncIterator[anthropic.AsyncAnthropic]:
    client = anthropic.AsyncAnthropic(base_url=server.base_url, api_key="k", max_retries=0)
    yield client
    await client.close()


async def test_a_compaction_request_returns_one_compaction_block(
    server: LocalModelServer, client: anthropic.AsyncAnthropic
) -> None:
    message = await client.beta.messages.create(
        model="m",
        max_tokens=100,
        messages=MESSAGES,
        compaction={"type": "summarize"},
        betas=["compact-2026-09-04"],
    )
    assert message.stop_reason == "compaction"
    [block] = message.content
    assert block.type == "compaction"
    assert block.content == wire.compaction_summary(MESSAGES)
    assert block.content.startswith("Compacted 3 messages") and "Read the logs." in block.content
    assert block.signature
    assert server.requests[0].headers["anthropic-beta"] == "compact-2026-09-04"
    # No turn of the script was taken: the next ordinary request gets the first one.
    reply = await client.messages.create(
        model="m", max_tokens=100, messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.content[0].type == "text" and reply.content[0].text == "first"


async def test_a_streamed_compaction_request_builds_the_same_block(client: anthropic.AsyncAnthropic) -> None:
    async with client.beta.messages.stream(
        model="m",
        max_tokens=100,
        messages=MESSAGES,
        compaction={"type": "summarize"},
        betas=["compact-2026-09-04"],
    ) as stream:
        message = await stream.get_final_message()
    assert message.stop_reason == "compaction"
    assert message.content[0].type == "compaction"
    assert message.content[0].content == wire.compaction_summary(MESSAGES)


async def test_a_compaction_of_another_type_is_refused(client: anthropic.AsyncAnthropic) -> None:
    with pytest.raises(anthropic.BadRequestError, match="summarize"):
        await client.beta.messages.create(
            model="m",
            max_tokens=100,
            messages=MESSAGES,
            compaction={"type": "other"},  # type: ignore[typeddict-item]
        )


async def test_count_tokens_is_the_usage_count(
    server: LocalModelServer, client: anthropic.AsyncAnthropic
) -> None:
    system = "You are terse."
    counted = await client.beta.messages.count_tokens(model="m", system=system, messages=MESSAGES)
    expected = wire.count_input_tokens({"system": system, "messages": MESSAGES})
    assert counted.input_tokens == expected
    reply = await client.messages.create(model="m", max_tokens=100, system=system, messages=MESSAGES)
    assert reply.usage.input_tokens == expected
    assert len(server.count_requests) == 1 and server.request_count == 1


async def test_count_tokens_checks_the_key_and_the_body(server: LocalModelServer) -> None:
    async with anthropic.AsyncAnthropic(base_url=server.base_url, api_key="k", max_retries=0) as client:
        with pytest.raises(anthropic.BadRequestError):
            await client.beta.messages.count_tokens(model="m", messages=[])
    server_key = LocalModelServer(Script([]), api_key="right")
    async with (
        server_key,
        anthropic.AsyncAnthropic(base_url=server_key.base_url, api_key="wrong", max_retries=0) as c,
    ):
        with pytest.raises(anthropic.AuthenticationError):
            await c.beta.messages.count_tokens(model="m", messages=MESSAGES)
