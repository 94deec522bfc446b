"""The events after a toolset call (``step.tool_outcome_events``): one test per outcome, golden files.

Each file in ``golden/tool_outcomes/`` holds a call, what became of it and the sandbox move the
gateway reported, and the events expected; the test replays them through the pure function. To
re-record after an intended change: ``UPDATE_GOLDEN=1 pytest tests/unit/harness`` and review the
diff of ``golden/tool_outcomes/``.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from control_plane.harness import event_drafts as ev
from control_plane.harness.step import (
    DispatchTool,
    NoEnvironment,
    SandboxUnavailable,
    ToolAnswered,
    ToolCallFailed,
    ToolOutcome,
    tool_outcome_events,
)
from control_plane.tunnel import SandboxMove
from outpost_wire.errors import ErrorCode, ProtocolViolation, RemoteError
from outpost_wire.results import ContentBlock, DocumentBlock, ImageBlock, TextBlock, ToolResult

GOLDEN = Path(__file__).parent / "golden" / "tool_outcomes"
CALL = DispatchTool("sevt_007", "bash", {"command": "ls /work"})
MOVE = SandboxMove("edge-a", "edge-b", "edge edge-a disconnected")
REPO_FAILURE = RemoteError(
    ErrorCode.REPOSITORY_NOT_FOUND, "repository https://git.internal/org/app.git: not found"
)


def _types(drafts: tuple[ev.Draft, ...]) -> list[str]:
    return [d.type for d in drafts]


def test_an_answer_becomes_the_tool_result() -> None:
    result = ToolResult((TextBlock("README.md"), ImageBlock("image/png", b"\x89PNG")), is_error=False)
    (draft,) = tool_outcome_events(CALL, ToolAnswered(result))
    assert draft == ev.tool_result("sevt_007", result.to_json(), is_error=False)
    failed = ToolResult.error("exit 2")
    assert tool_outcome_events(CALL, ToolAnswered(failed)) == (
        ev.tool_result("sevt_007", ev.text_content("exit 2"), is_error=True),
    )


def test_calls_that_could_not_run_are_error_results() -> None:
    cases: list[tuple[ToolOutcome, str]] = [
        (NoEnvironment(), "The session has no environment to run tools in."),
        (SandboxUnavailable("no edge is connected"), "The sandbox is unavailable: no edge is connected"),
        (ToolCallFailed.of(ProtocolViolation("bad frame")), "The tool call failed: bad frame"),
        (
            ToolCallFailed.of(RemoteError(ErrorCode.POLICY_DENIED, "bash is off")),
            "The tool call failed: policy_denied: bash is off",
        ),
    ]
    for outcome, message in cases:
        assert tool_outcome_events(CALL, outcome) == (
            ev.tool_result("sevt_007", ev.text_content(message), is_error=True),
        )


def test_a_repository_failure_is_also_a_typed_session_error_first() -> None:
    error, result = tool_outcome_events(CALL, ToolCallFailed.of(REPO_FAILURE))
    assert error.type == ev.SESSION_ERROR
    assert error.payload["error"] == {
        "type": "repository_not_found_error",
        "message": "repository https://git.internal/org/app.git: not found",
        "retry_status": {"type": "retrying"},
        "repository_url": "https://git.internal/org/app.git",
    }
    assert result.type == ev.AGENT_TOOL_RESULT and result.payload["is_error"] is True


def test_a_move_is_reported_and_noted_ahead_of_the_content() -> None:
    answered = ToolAnswered(ToolResult.text("README.md"))
    moved, result = tool_outcome_events(CALL, answered, MOVE)
    assert moved == ev.sandbox_moved("edge-a", "edge-b", "edge edge-a disconnected")
    assert result.payload["content"] == [
        *ev.text_content(ev.sandbox_moved_note("edge edge-a disconnected")),
        {"type": "text", "text": "README.md"},
    ]
    # With a repository failure too: the repository's error, the move, then the result.
    drafts = tool_outcome_events(CALL, ToolCallFailed.of(REPO_FAILURE), MOVE)
    assert _types(drafts) == [ev.SESSION_ERROR, ev.SESSION_ERROR, ev.AGENT_TOOL_RESULT]
    assert drafts[0].payload["error"]["type"] == "repository_not_found_error"
    assert "sandbox_moved" in drafts[1].payload["error"]


# -- golden files -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Case:
    outcome: ToolOutcome
    move: SandboxMove | None = None


PDF = b"%PDF-1.4\n%%EOF\n"
CASES: dict[str, _Case] = {
    "answered": _Case(ToolAnswered(ToolResult.text("README.md\nsrc"))),
    "answered_blocks": _Case(
        ToolAnswered(
            ToolResult(
                (TextBlock("a"), ImageBlock("image/png", b"png"), DocumentBlock("application/pdf", PDF))
            )
        )
    ),
    "answered_error": _Case(ToolAnswered(ToolResult.error("bash: exit status 2"))),
    "answered_after_move": _Case(ToolAnswered(ToolResult.text("README.md")), MOVE),
    "no_environment": _Case(NoEnvironment()),
    "sandbox_unavailable": _Case(SandboxUnavailable("no edge of environment env_1 is connected")),
    "sandbox_unavailable_after_move": _Case(SandboxUnavailable("edge edge-b went away"), MOVE),
    "call_failed": _Case(ToolCallFailed.of(RemoteError(ErrorCode.POLICY_DENIED, "bash is off"))),
    "repository_failed": _Case(ToolCallFailed.of(REPO_FAILURE)),
    "repository_failed_after_move": _Case(ToolCallFailed.of(REPO_FAILURE), MOVE),
}


def _block_json(block: ContentBlock) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"text": block.text}
    kind = "image" if isinstance(block, ImageBlock) else "document"
    return {kind: block.media_type, "data_b64": base64.b64encode(block.data).decode("ascii")}


def _block_from_json(data: dict[str, Any]) -> ContentBlock:
    if "text" in data:
        return TextBlock(data["text"])
    raw = base64.b64decode(data["data_b64"])
    return ImageBlock(data["image"], raw) if "image" in data else DocumentBlock(data["document"], raw)


def _outcome_json(outcome: ToolOutcome) -> dict[str, Any]:
    match outcome:
        case ToolAnswered(result):
            blocks = [_block_json(b) for b in result.content]
            return {"kind": "answered", "content": blocks, "is_error": result.is_error}
        case NoEnvironment():
            return {"kind": "no_environment"}
        case SandboxUnavailable(detail):
            return {"kind": "sandbox_unavailable", "detail": detail}
        case ToolCallFailed(detail, code, message):
            return {"kind": "call_failed", "detail": detail, "code": code and code.value, "message": message}


def _outcome_from_json(data: dict[str, Any]) -> ToolOutcome:
    kind = data["kind"]
    if kind == "answered":
        content = tuple(_block_from_json(b) for b in data["content"])
        return ToolAnswered(ToolResult(content, is_error=data["is_error"]))
    if kind == "no_environment":
        return NoEnvironment()
    if kind == "sandbox_unavailable":
        return SandboxUnavailable(data["detail"])
    code = ErrorCode(data["code"]) if data["code"] is not None else None
    return ToolCallFailed(data["detail"], code, data["message"])


def _move_json(move: SandboxMove | None) -> dict[str, str] | None:
    if move is None:
        return None
    return {"from_edge_id": move.from_edge_id, "to_edge_id": move.to_edge_id, "reason": move.reason}


def _drafts_json(drafts: tuple[ev.Draft, ...]) -> list[dict[str, Any]]:
    return [{"type": d.type, "payload": d.payload, "id": d.id} for d in drafts]


def _record(name: str) -> dict[str, Any]:
    case = CASES[name]
    return {
        "scenario": name,
        "call": {"tool_use_id": CALL.tool_use_id, "name": CALL.name, "input": CALL.input},
        "outcome": _outcome_json(case.outcome),
        "move": _move_json(case.move),
        "expected": _drafts_json(tool_outcome_events(CALL, case.outcome, case.move)),
    }


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_outcome(name: str) -> None:
    path = GOLDEN / f"{name}.json"
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(json.dumps(_record(name), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    golden = json.loads(path.read_text(encoding="utf-8"))
    call = DispatchTool(golden["call"]["tool_use_id"], golden["call"]["name"], golden["call"]["input"])
    outcome = _outcome_from_json(golden["outcome"])
    assert outcome == CASES[name].outcome  # the file's input reads back as the case's
    move = SandboxMove(**golden["move"]) if golden["move"] is not None else None
    assert _drafts_json(tool_outcome_events(call, outcome, move)) == golden["expected"]


def test_every_golden_outcome_file_has_a_case() -> None:
    assert sorted(p.stem for p in GOLDEN.glob("*.json")) == sorted(CASES)
