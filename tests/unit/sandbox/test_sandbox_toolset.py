"""Edge-side validation of tool inputs against the agent_toolset_20260401 schemas."""

from __future__ import annotations

from typing import Any

import pytest

from edge_agent.sandbox.toolset import TOOL_NAMES, request_timeout_ms, validate_input


def test_tool_names() -> None:
    assert frozenset({"bash", "read", "write", "edit", "glob", "grep"}) == TOOL_NAMES


@pytest.mark.parametrize(
    ("tool", "tool_input"),
    [
        ("bash", {"command": "ls"}),
        ("bash", {"restart": True}),
        ("bash", {}),  # the tool itself answers "bash: command is required"
        ("bash", {"command": "ls", "timeout_ms": 5}),
        ("read", {"file_path": "a", "view_range": [1, -1]}),
        ("write", {"file_path": "a", "content": ""}),
        ("edit", {"file_path": "a", "old_string": "x", "new_string": "y", "replace_all": False}),
        ("glob", {"pattern": "**/*.py", "path": "src"}),
        ("grep", {"pattern": "TODO", "path": None}),
    ],
)
def test_valid(tool: str, tool_input: dict[str, Any]) -> None:
    assert validate_input(tool, tool_input) is None


@pytest.mark.parametrize(
    ("tool", "tool_input", "message"),
    [
        ("read", {}, "read: missing required field 'file_path'"),
        ("write", {"file_path": "a"}, "write: missing required field 'content'"),
        ("edit", {"file_path": "a", "old_string": "x"}, "edit: missing required field 'new_string'"),
        ("glob", {}, "glob: missing required field 'pattern'"),
        ("read", {"file_path": 3}, "read: field 'file_path' must be a string"),
        ("read", {"file_path": "a", "view_range": [1]}, "read: field 'view_range' must be an array"),
        ("read", {"file_path": "a", "view_range": [True, 2]}, "read: field 'view_range' must be an array"),
        ("bash", {"command": "ls", "timeout_ms": 0}, "bash: field 'timeout_ms' must be a positive integer"),
        (
            "bash",
            {"command": "ls", "timeout_ms": True},
            "bash: field 'timeout_ms' must be a positive integer",
        ),
        ("bash", {"restart": "yes"}, "bash: field 'restart' must be a boolean"),
        ("bash", {"cmd": "ls"}, "bash: unknown field 'cmd'"),
        ("bash", ["ls"], "bash: input must be an object"),
        ("web_fetch", {}, "unknown tool 'web_fetch'"),
    ],
)
def test_invalid(tool: str, tool_input: Any, message: str) -> None:
    problem = validate_input(tool, tool_input)
    assert problem is not None and problem.startswith(message)


def test_request_timeout() -> None:
    assert request_timeout_ms("bash", {"command": "x"}, None) == 120_000
    assert request_timeout_ms("bash", {"command": "x", "timeout_ms": 500}, None) == 500
    assert request_timeout_ms("bash", {"command": "x", "timeout_ms": 500_000}, 10) == 10_000
    assert request_timeout_ms("read", {"file_path": "x"}, 2.5) == 2500
