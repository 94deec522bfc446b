"""Idempotency keys are unique within a session only: the dispatcher's join of duplicates in flight
and the journal's stored results never cross from one session to another."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from edge_agent.dispatch import Dispatcher
from edge_agent.journal import ResultJournal
from edge_agent.policy import Policy
from edge_agent.sandbox import SandboxLimits, ToolCall
from outpost_wire.frames import Execute, Provision, Request
from outpost_wire.results import ToolResult
from tests.support import eventually


class SlowManager:
    """Answers each call with its session id, after the test lets it go."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.release = asyncio.Event()

    async def execute(self, call: ToolCall, limits: SandboxLimits) -> ToolResult:
        self.calls.append(call.session_id)
        await self.release.wait()
        return ToolResult.text(f"result of {call.session_id}")


def call(session_id: str, request_id: str, key: str = "toolu_same") -> Request:
    op = Execute("bash", '{"command": "true"}', sandbox=Provision())
    return Request(request_id, session_id, key, 0, op)


def text(outcome: Any) -> str:
    assert isinstance(outcome, ToolResult)
    return str(outcome.content[0].text)


async def test_the_same_key_in_two_sessions_runs_twice_and_each_gets_its_own(tmp_path: Path) -> None:
    manager = SlowManager()
    async with ResultJournal(tmp_path / "j.db", 3600) as journal:
        dispatcher = Dispatcher(manager, Policy(), journal)  # type: ignore[arg-type]
        a = asyncio.create_task(dispatcher.handle(call("sesn_a", "req_1")))
        a_again = asyncio.create_task(dispatcher.handle(call("sesn_a", "req_2")))  # joins a
        b = asyncio.create_task(dispatcher.handle(call("sesn_b", "req_3")))  # does not
        await eventually(lambda: len(manager.calls) == 2, what="sesn_a's and sesn_b's calls to start")
        manager.release.set()
        assert [text(await t) for t in (a, a_again, b)] == [
            "result of sesn_a",
            "result of sesn_a",
            "result of sesn_b",
        ]
        assert sorted(manager.calls) == ["sesn_a", "sesn_b"]
        # Later repeats are answered from the journal, each from its own session's entry.
        assert text(await dispatcher.handle(call("sesn_b", "req_4"))) == "result of sesn_b"
        assert text(await dispatcher.handle(call("sesn_a", "req_5"))) == "result of sesn_a"
        assert len(manager.calls) == 2
