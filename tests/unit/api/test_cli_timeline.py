"""``outpost-control sessions events``: one short line per event type that matters."""

from __future__ import annotations

from typing import Any

import pytest

from control_plane.cli_timeline import MAX_SUMMARY_CHARS, summarize


def text(t: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": t}]


@pytest.mark.parametrize(
    ("event", "summary"),
    [
        ({"type": "user.message", "content": text("Hello\n  there")}, "Hello there"),
        ({"type": "agent.message", "content": [*text("See:"), {"type": "image"}]}, "See: [image]"),
        ({"type": "agent.tool_use", "name": "bash", "input": {"command": "ls -la"}}, "bash ls -la"),
        ({"type": "agent.tool_use", "name": "read", "input": {"file_path": "a.txt"}}, "read a.txt"),
        ({"type": "agent.tool_use", "name": "todo", "input": {"n": 1}}, 'todo {"n":1}'),
        (
            {
                "type": "agent.mcp_tool_use",
                "mcp_server_name": "docs",
                "name": "search",
                "input": {"query": "q"},
            },
            "docs/search q",
        ),
        ({"type": "agent.tool_result", "is_error": False, "content": text("out")}, "ok: out"),
        ({"type": "agent.tool_result", "is_error": True, "content": []}, "error"),
        ({"type": "session.status_idle", "stop_reason": {"type": "end_turn"}}, "stop: end_turn"),
        (
            {
                "type": "session.error",
                "error": {
                    "type": "unknown_error",
                    "message": "no edge",
                    "retry_status": {"type": "retrying"},
                },
            },
            "unknown_error: no edge (retrying)",
        ),
        (
            {"type": "span.model_request_end", "model_usage": {"input_tokens": 12, "output_tokens": 3}},
            "tokens in 12, out 3",
        ),
        ({"type": "user.tool_confirmation", "result": "allow"}, "allow"),
        ({"type": "session.status_running"}, ""),
        ({"type": "something.new", "content": text("x")}, ""),
        ({"type": "agent.message", "content": "not a list"}, "not a list"),
        ({"type": "session.error", "error": "odd"}, ""),
    ],
)
def test_summaries(event: dict[str, Any], summary: str) -> None:
    assert summarize(event) == summary


def test_long_text_is_clipped_to_one_short_line() -> None:
    line = summarize({"type": "agent.message", "content": text("word " * 100)})
    assert len(line) == MAX_SUMMARY_CHARS and line.endswith("…") and "\n" not in line
