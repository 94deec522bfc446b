"""The edge's door for sandbox tool calls: input checked once into a ``ToolCall``, one deadline."""

from __future__ import annotations

import pytest

from edge_agent.errors import InvalidToolInput
from edge_agent.sandbox import ToolCall
from edge_agent.sandbox.channel import report_margin_s
from edge_agent.sandbox.tool_call import ANSWER_GRACE_S

NOW = 1000.0


@pytest.mark.parametrize(
    ("tool", "input_json", "message"),
    [
        ("bash", "{not json", "tool input is not valid JSON: Expecting property name"),
        ("bash", "[1, 2]", "tool input must be a JSON object"),
        ("bash", '"ls"', "tool input must be a JSON object"),
        ("web_fetch", "{}", "unknown tool 'web_fetch'"),
        ("bash", '{"cmd": "ls"}', "bash: unknown field 'cmd'"),
        ("bash", '{"timeout_ms": -5}', "bash: field 'timeout_ms' must be a positive integer"),
        ("read", "{}", "read: missing required field 'file_path'"),
        ("write", '{"file_path": "a", "content": 3}', "write: field 'content' must be a string"),
    ],
)
def test_bad_input_is_refused_with_the_tool_error_message(tool: str, input_json: str, message: str) -> None:
    with pytest.raises(InvalidToolInput) as raised:
        ToolCall.from_json("s1", tool, input_json, now=NOW)
    assert raised.value.message.startswith(message)


def test_a_good_call_is_parsed_once() -> None:
    call = ToolCall.from_json("s1", "read", '{"file_path": "a.txt", "view_range": [1, 5]}', now=NOW)
    assert (call.session_id, call.tool) == ("s1", "read")
    assert call.input == {"file_path": "a.txt", "view_range": [1, 5]}
    assert ToolCall.from_json("s1", "bash", "", now=NOW).input == {}  # no input: an empty object


@pytest.mark.parametrize(
    ("input_json", "request_timeout_ms", "request_deadline", "timeout_ms", "deadline"),
    [
        # The default tool timeout (bash's 120 s), then its grace for the answer.
        ('{"command": "x"}', 0, None, 120_000, NOW + 120 + ANSWER_GRACE_S),
        # The bash input's own timeout ...
        ('{"command": "x", "timeout_ms": 2000}', 0, None, 2000, NOW + 2 + ANSWER_GRACE_S),
        # ... capped by the request's timeout_ms ...
        ('{"command": "x", "timeout_ms": 9000}', 3000, None, 3000, NOW + 3 + ANSWER_GRACE_S),
        ('{"command": "x", "timeout_ms": 1000}', 3000, None, 1000, NOW + 1 + ANSWER_GRACE_S),
        # ... and the request's deadline when it comes first.
        ('{"command": "x", "timeout_ms": 9000}', 0, NOW + 4, 9000, NOW + 4),
        ('{"command": "x", "timeout_ms": 1000}', 0, NOW + 60, 1000, NOW + 1 + ANSWER_GRACE_S),
    ],
)
def test_the_deadline_is_the_earliest_of_the_candidates(
    input_json: str,
    request_timeout_ms: int,
    request_deadline: float | None,
    timeout_ms: int,
    deadline: float,
) -> None:
    call = ToolCall.from_json(
        "s1", "bash", input_json, now=NOW, timeout_ms=request_timeout_ms, deadline=request_deadline
    )
    assert call.timeout_ms == timeout_ms
    assert call.deadline == pytest.approx(deadline)


def test_a_non_bash_tool_takes_the_default_or_the_request_cap() -> None:
    assert ToolCall.of("s1", "glob", {"pattern": "*"}, now=NOW).timeout_ms == 120_000
    assert ToolCall.of("s1", "glob", {"pattern": "*"}, now=NOW, timeout_ms=2500).timeout_ms == 2500


def test_of_copies_the_input() -> None:
    given = {"command": "ls"}
    call = ToolCall.of("s1", "bash", given, now=NOW)
    given["command"] = "rm -rf /"
    assert call.input == {"command": "ls"}


def test_the_daemon_reports_before_the_edge_gives_up() -> None:
    assert report_margin_s(30.0) == 1.0
    assert report_margin_s(2.0) == 0.5  # a quarter of a short remainder
    assert report_margin_s(-1.0) == 0.0
