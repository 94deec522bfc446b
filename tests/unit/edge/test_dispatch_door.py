"""The dispatcher's door for Execute: a call is checked into one ToolCall with one deadline before
anything runs; a missing sandbox spec and a passed deadline are refused before the journal hears
of the key."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from edge_agent.dispatch import Dispatcher
from edge_agent.journal import ResultJournal
from edge_agent.policy import Policy
from edge_agent.sandbox import SandboxLimits, ToolCall
from outpost_wire.errors import ErrorCode
from outpost_wire.frames import Destroy, Destroyed, Execute, Failure, Provision, Request
from outpost_wire.results import ToolResult

WALL = 1_000_000.0  # the dispatcher's wall clock, fixed


class RecordingManager:
    def __init__(self) -> None:
        self.calls: list[ToolCall] = []

    async def execute(self, call: ToolCall, limits: SandboxLimits) -> ToolResult:
        self.calls.append(call)
        return ToolResult.text("ran")

    async def destroy(self, session_id: str) -> bool:
        return True


def request(op: Execute | Destroy, key: str, *, deadline_ms: int = 0) -> Request:
    return Request("req_" + key, "sesn_1", key, deadline_ms, op)


@pytest.fixture
async def door(tmp_path: Path) -> AsyncIterator[tuple[Dispatcher, RecordingManager]]:
    manager = RecordingManager()
    async with ResultJournal(tmp_path / "j.db", 3600) as journal:
        yield Dispatcher(manager, Policy(), journal, clock=lambda: WALL), manager  # type: ignore[arg-type]


async def test_an_execute_without_a_spec_the_edge_does_not_hold_is_refused_before_the_journal(
    door: tuple[Dispatcher, RecordingManager],
) -> None:
    dispatcher, manager = door
    refused = await dispatcher.handle(request(Execute("bash", '{"command": "true"}'), "toolu_1"))
    assert isinstance(refused, Failure) and refused.code is ErrorCode.SANDBOX_SPEC_REQUIRED
    assert manager.calls == []
    # The control plane sends it again with the spec, same key: it runs (the journal did not take
    # the refused attempt for a started one, which it would answer as interrupted).
    again = await dispatcher.handle(
        request(Execute("bash", '{"command": "true"}', sandbox=Provision()), "toolu_1")
    )
    assert again == ToolResult.text("ran") and len(manager.calls) == 1
    # Later calls without the spec use the one the edge holds now ...
    assert await dispatcher.handle(request(Execute("bash", "{}"), "toolu_2")) == ToolResult.text("ran")
    # ... until the sandbox is destroyed.
    assert await dispatcher.handle(request(Destroy(), "")) == Destroyed(existed=True)
    gone = await dispatcher.handle(request(Execute("bash", "{}"), "toolu_3"))
    assert isinstance(gone, Failure) and gone.code is ErrorCode.SANDBOX_SPEC_REQUIRED


@pytest.mark.parametrize(
    ("tool", "input_json", "message"),
    [
        ("bash", "{oops", "tool input is not valid JSON"),
        ("bash", "[]", "tool input must be a JSON object"),
        ("web_fetch", "{}", "unknown tool 'web_fetch'"),
        ("bash", '{"cmd": "ls"}', "bash: unknown field 'cmd'"),
    ],
)
async def test_bad_input_is_a_tool_error_and_nothing_runs(
    door: tuple[Dispatcher, RecordingManager], tool: str, input_json: str, message: str
) -> None:
    dispatcher, manager = door
    outcome = await dispatcher.handle(request(Execute(tool, input_json, sandbox=Provision()), "toolu_1"))
    assert isinstance(outcome, ToolResult) and outcome.is_error
    assert outcome.plain_text.startswith(message)
    assert manager.calls == []


async def test_a_request_past_its_deadline_is_refused(door: tuple[Dispatcher, RecordingManager]) -> None:
    dispatcher, manager = door
    op = Execute("bash", '{"command": "true"}', sandbox=Provision())
    outcome = await dispatcher.handle(request(op, "toolu_1", deadline_ms=int(WALL * 1000) - 1))
    assert outcome == Failure(
        ErrorCode.DEADLINE_EXCEEDED, "the request's deadline passed before it reached the edge"
    )
    assert manager.calls == []


async def test_the_call_carries_one_deadline_down(door: tuple[Dispatcher, RecordingManager]) -> None:
    dispatcher, manager = door
    op = Execute("bash", '{"command": "true", "timeout_ms": 60000}', timeout_ms=90_000, sandbox=Provision())
    before = asyncio.get_running_loop().time()
    await dispatcher.handle(request(op, "toolu_1", deadline_ms=int((WALL + 10) * 1000)))
    after = asyncio.get_running_loop().time()
    (call,) = manager.calls
    assert call.timeout_ms == 60_000  # the tool's own timeout ...
    assert before + 10 <= call.deadline <= after + 10  # ... but the request's deadline comes first
    assert call.input == {"command": "true", "timeout_ms": 60000}
