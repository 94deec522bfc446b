"""The local model's ``context_management`` edits (``clear_tool_uses_20250919``), through the official
SDK's beta client over loopback (the harness's clearing tests rely on them)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import pytest

from scripted_model import LocalModelServer, Script, wire
from scripted_model.context_edits import CLEARED_TEXT, apply_context_management

BETA = "context-management-2025-06-27"


def _messages(results: int, size: int = 400) -> list[Any]:
    messages: list[Any] = [{"role": "user", "content": "Read the logs."}]
    for index in range(results):
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": f"toolu_{index}", "name": "bash", "input": {"n": index}}
                ],
            }
        )
        result = {"type": "tool_result", "tool_use_id": f"toolu_{index}", "content": "x" * size}
        messages.append({"role": "user", "content": [result]})
    return messages


def _edit(trigger: int, keep: int = 3, at_least: int = 0) -> dict[str, Any]:
    edit: dict[str, Any] = {
        "type": "clear_tool_uses_20250919",
        "trigger": {"type": "input_tokens", "value": trigger},
        "keep": {"type": "tool_uses", "value": keep},
    }
    if at_least:
        edit["clear_at_least"] = {"type": "input_tokens", "value": at_least}
    return {"edits": [edit]}


@pytest.fixture
async def server() -> AsyncIterator[LocalModelServer]:
    async with LocalModelServer(Script(["one", "two", "three"])) as server:
        yield server


@pytest.fixture
async def client(server: LocalModelServer) -> AsyncIterator[anthropic.AsyncAnthropic]:
    client = anthropic.AsyncAnthropic(base_url=server.base_url, api_key="k", max_retries=0)
    yield client
    await client.close()


async def test_old_tool_results_are_cleared_over_the_trigger_and_reported(
    server: LocalModelServer, client: anthropic.AsyncAnthropic
) -> None:
    messages = _messages(6)
    message = await client.beta.messages.create(
        model="m", max_tokens=100, messages=messages, context_management=_edit(trigger=100), betas=[BETA]
    )
    assert message.context_management is not None
    [applied] = message.context_management.applied_edits
    assert applied.type == "clear_tool_uses_20250919" and applied.cleared_tool_uses == 3
    edited, _ = apply_context_management(
        {"model": "m", "max_tokens": 1, "messages": messages, "context_management": _edit(100)}
    )
    assert message.usage.input_tokens == wire.count_input_tokens(edited)  # counted after the edits
    assert (
        applied.cleared_input_tokens
        == wire.count_input_tokens({"messages": messages}) - message.usage.input_tokens
    )
    contents = [
        b["content"] for m in edited["messages"][1:] for b in m["content"] if b.get("type") == "tool_result"
    ]
    assert contents == [CLEARED_TEXT] * 3 + ["x" * 400] * 3  # the oldest, beyond keep
    assert server.requests[0].headers["anthropic-beta"] == BETA
    assert server.requests[0].body["messages"] == messages  # recorded as sent


async def test_under_the_trigger_or_short_of_clear_at_least_nothing_is_cleared(
    client: anthropic.AsyncAnthropic,
) -> None:
    under = await client.beta.messages.create(
        model="m",
        max_tokens=100,
        messages=_messages(6),
        context_management=_edit(trigger=10**6),
        betas=[BETA],
    )
    assert under.context_management is not None and under.context_management.applied_edits == []
    short = await client.beta.messages.create(
        model="m",
        max_tokens=100,
        messages=_messages(6),
        context_management=_edit(trigger=100, at_least=10**6),
        betas=[BETA],
    )
    assert short.context_management is not None and short.context_management.applied_edits == []
    assert short.usage.input_tokens == wire.count_input_tokens({"messages": _messages(6)})


async def test_a_stream_reports_the_edits_in_message_delta(client: anthropic.AsyncAnthropic) -> None:
    async with client.beta.messages.stream(
        model="m",
        max_tokens=100,
        messages=_messages(5),
        context_management=_edit(trigger=100, keep=1),
        betas=[BETA],
    ) as stream:
        message = await stream.get_final_message()
    assert message.context_management is not None
    assert [e.cleared_tool_uses for e in message.context_management.applied_edits] == [4]


async def test_count_tokens_counts_after_the_edits(client: anthropic.AsyncAnthropic) -> None:
    messages = _messages(6)
    counted = await client.beta.messages.count_tokens(
        model="m", messages=messages, context_management=_edit(trigger=100), betas=[BETA]
    )
    whole = wire.count_input_tokens({"messages": messages})
    assert counted.input_tokens < whole
    assert (
        counted.context_management is not None and counted.context_management.original_input_tokens == whole
    )


async def test_compaction_and_context_management_together_are_refused(
    client: anthropic.AsyncAnthropic,
) -> None:
    with pytest.raises(anthropic.BadRequestError, match="context_management"):
        await client.beta.messages.create(
            model="m",
            max_tokens=100,
            messages=_messages(1),
            compaction={"type": "summarize"},
            context_management=_edit(trigger=100),
            betas=["compact-2026-09-04", BETA],
        )


async def test_an_unknown_edit_is_a_bad_request(client: anthropic.AsyncAnthropic) -> None:
    with pytest.raises(anthropic.BadRequestError, match=r"edits\.0\.type"):
        await client.beta.messages.create(
            model="m",
            max_tokens=100,
            messages=_messages(1),
            context_management={"edits": [{"type": "forget_everything"}]},  # type: ignore[list-item]
            betas=[BETA],
        )
