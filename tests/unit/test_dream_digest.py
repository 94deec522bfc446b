"""The dream's request and plan (pure): transcripts digested and trimmed to the budget, the forced
``record_memories`` call parsed strictly, every malformed answer a typed ``invalid_model_output``."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from control_plane.dreams.digest import (
    MAX_LINE_CHARS,
    build_request,
    digest_events,
    parse_plan,
    plan_input,
    trim_lines,
)
from control_plane.errors import DreamFailed
from control_plane.store.base import Event, MemoryRecord

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def event(kind: str, payload: dict[str, Any]) -> Event:
    return Event("sevt_x", "sesn_x", 1, kind, payload, NOW)


def memory(path: str, content: str) -> MemoryRecord:
    return MemoryRecord("mem_x", "memstore_x", path, content, "0" * 64, len(content), "memver_x", NOW, NOW)


def test_transcript_lines() -> None:
    lines = digest_events(
        [
            event("user.message", {"content": [{"type": "text", "text": "use tabs"}]}),
            event("agent.tool_use", {"name": "bash", "input": {"command": "ls"}}),
            event("agent.tool_result", {"content": [{"type": "text", "text": "a.py"}], "is_error": True}),
            event("agent.message", {"content": [{"type": "text", "text": "x" * 5000}]}),
            event("session.error", {"error": {"type": "unknown_error", "message": "boom"}}),
            event("session.status_idle", {}),
        ]
    )
    assert lines[:3] == ["USER: use tabs", 'TOOL CALL bash: {"command": "ls"}', "TOOL RESULT (error): a.py"]
    assert len(lines[3]) < MAX_LINE_CHARS + 40 and lines[3].endswith("more characters]")
    assert lines[4] == "ERROR: boom" and len(lines) == 5


def test_trim_keeps_the_beginning_and_the_end() -> None:
    lines = [f"line {i:03d} " + "y" * 90 for i in range(100)]
    assert trim_lines(lines, 100_000) == lines
    trimmed = trim_lines(lines, 2000)
    assert sum(len(line) + 1 for line in trimmed) <= 2000
    assert trimmed[0] == lines[0] and trimmed[-1] == lines[-1]
    assert any("left out" in line for line in trimmed)


def test_the_request_fits_the_budget_and_shares_it_fairly() -> None:
    short = ["USER: short one"]
    long = [f"AGENT: {'z' * 500} {i}" for i in range(200)]
    request = build_request(
        model="m",
        max_tokens=100,
        budget_tokens=5000,
        transcripts={"sesn_a": short, "sesn_b": long, "sesn_c": long},
        memories=[memory(f"/m{i}.md", "w" * 3000) for i in range(20)],
        instructions="Be brief.",
    )
    assert len(json.dumps(request)) < 5000 * 3
    prompt = request["messages"][0]["content"][0]["text"]
    assert "USER: short one" in prompt  # a short transcript is kept whole
    assert prompt.count("transcript lines left out") == 2
    assert "more memories not shown" in prompt or prompt.count("--- /m") == 20
    assert request["tool_choice"] == {"type": "tool", "name": "record_memories"}
    assert prompt.endswith("Be brief.")


def call(given: Any, stop: str = "tool_use", name: str = "record_memories") -> dict[str, Any]:
    return {"content": [{"type": "tool_use", "id": "t", "name": name, "input": given}], "stop_reason": stop}


def test_a_valid_plan() -> None:
    given = {"writes": [{"path": "/a.md", "content": "A"}], "deletes": ["/b.md"], "summary": "ok"}
    plan = parse_plan(plan_input(call(given)))
    assert plan.writes == (("/a.md", "A"),) and plan.deletes == ("/b.md",) and plan.summary == "ok"
    assert parse_plan(plan.to_json()) == plan


@pytest.mark.parametrize(
    "message",
    [
        {"content": [{"type": "text", "text": "no tool"}], "stop_reason": "end_turn"},
        call({"writes": [], "deletes": []}, name="other_tool"),
        call({"writes": [], "deletes": []}, stop="max_tokens"),
        call("not an object"),
        {"content": [call({})["content"][0]] * 2, "stop_reason": "tool_use"},
    ],
)
def test_not_one_call(message: dict[str, Any]) -> None:
    with pytest.raises(DreamFailed) as caught:
        plan_input(message)
    assert caught.value.error_type == "invalid_model_output"


@pytest.mark.parametrize(
    "given",
    [
        {"writes": "all", "deletes": []},
        {"writes": [{"path": "relative", "content": "x"}], "deletes": []},
        {"writes": [{"path": "/a", "content": 3}], "deletes": []},
        {"writes": [{"path": "/a", "content": "x"}, {"path": "/a", "content": "y"}], "deletes": []},
        {"writes": [{"path": "/a", "content": "x"}], "deletes": ["/a"]},
        {"writes": [], "deletes": ["/a/../b"]},
        {"writes": [{"path": "/a", "content": "\x00"}], "deletes": []},
        {"writes": [{"path": f"/{i}", "content": ""} for i in range(501)], "deletes": []},
    ],
)
def test_malformed_plans(given: dict[str, Any]) -> None:
    with pytest.raises(DreamFailed) as caught:
        parse_plan(given)
    assert caught.value.error_type == "invalid_model_output"
