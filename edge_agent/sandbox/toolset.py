"""Input schemas of the ``agent_toolset_20260401`` sandbox tools, checked at the edge.

A call whose input does not match is answered with a tool error here, before any sandbox is
provisioned or any byte is sent to it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["BASH_DEFAULT_TIMEOUT_MS", "TOOL_NAMES", "request_timeout_ms", "validate_input"]

BASH_DEFAULT_TIMEOUT_MS = 120_000


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _is_positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _is_view_range(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    )


_Check = tuple[Callable[[Any], bool], str]
_STR: _Check = (_is_str, "a string")
_BOOL: _Check = (_is_bool, "a boolean")

# tool -> field -> (check, description, required)
_SCHEMAS: Mapping[str, Mapping[str, tuple[Callable[[Any], bool], str, bool]]] = {
    "bash": {
        "command": (*_STR, False),
        "restart": (*_BOOL, False),
        "timeout_ms": (_is_positive_int, "a positive integer", False),
    },
    "read": {
        "file_path": (*_STR, True),
        "view_range": (_is_view_range, "an array of two integers [start_line, end_line]", False),
    },
    "write": {"file_path": (*_STR, True), "content": (*_STR, True)},
    "edit": {
        "file_path": (*_STR, True),
        "old_string": (*_STR, True),
        "new_string": (*_STR, True),
        "replace_all": (*_BOOL, False),
    },
    "glob": {"pattern": (*_STR, True), "path": (*_STR, False)},
    "grep": {"pattern": (*_STR, True), "path": (*_STR, False)},
}

TOOL_NAMES: frozenset[str] = frozenset(_SCHEMAS)


def validate_input(tool: str, tool_input: Any) -> str | None:
    """Return an error message naming the offending field, or ``None`` if the input is valid."""
    schema = _SCHEMAS.get(tool)
    if schema is None:
        return f"unknown tool '{tool}'; the sandbox provides {', '.join(sorted(TOOL_NAMES))}"
    if not isinstance(tool_input, dict):
        return f"{tool}: input must be an object"
    for key in tool_input:
        if key not in schema:
            return f"{tool}: unknown field '{key}'"
    for key, (check, description, required) in schema.items():
        value = tool_input.get(key)
        if value is None:
            if required:
                return f"{tool}: missing required field '{key}'"
            continue
        if not check(value):
            return f"{tool}: field '{key}' must be {description}"
    return None


def request_timeout_ms(tool: str, tool_input: Mapping[str, Any], timeout_s: float | None) -> int:
    """The time the daemon may spend on a call: the bash input's ``timeout_ms`` (default 120 s),
    capped by the caller's ``timeout_s``."""
    timeout_ms = BASH_DEFAULT_TIMEOUT_MS
    if tool == "bash" and isinstance(tool_input.get("timeout_ms"), int):
        timeout_ms = int(tool_input["timeout_ms"])
    if timeout_s is not None:
        timeout_ms = min(timeout_ms, max(1, int(timeout_s * 1000)))
    return timeout_ms
