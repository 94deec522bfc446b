"""One short line per session event, for ``outpost-control sessions events``.

``summarize(event)`` reads the event's JSON as the API returns it and says what a person looking
at a timeline wants to know: the text of a message, the tool and its command or file, whether a
result was an error, why the session went idle, the error of a ``session.error``, the tokens of a
model request. Unknown types get an empty summary (the type column says enough).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_SUMMARY_CHARS", "summarize"]

MAX_SUMMARY_CHARS = 100
_INPUT_KEYS = ("command", "file_path", "path", "pattern", "url", "query")


def _clip(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= MAX_SUMMARY_CHARS else flat[: MAX_SUMMARY_CHARS - 1] + "…"


def _text(content: Any) -> str:
    """The text blocks of a content list (or a plain string), joined; other blocks by their type."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        else:
            parts.append(f"[{block.get('type', 'block')}]")
    return " ".join(parts)


def _tool_input(value: Any) -> str:
    if not isinstance(value, dict):
        return ""
    for key in _INPUT_KEYS:
        if isinstance(value.get(key), str):
            return str(value[key])
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False) if value else ""


def _result(event: dict[str, Any]) -> str:
    outcome = "error" if event.get("is_error") else "ok"
    text = _text(event.get("content"))
    return f"{outcome}: {text}" if text else outcome


def _tool_use(event: dict[str, Any]) -> str:
    name = str(event.get("name", "?"))
    server = event.get("mcp_server_name")
    if server:
        name = f"{server}/{name}"
    return f"{name} {_tool_input(event.get('input'))}"


def _idle(event: dict[str, Any]) -> str:
    reason = event.get("stop_reason")
    return f"stop: {reason.get('type', '?')}" if isinstance(reason, dict) else ""


def _error(event: dict[str, Any]) -> str:
    error = event.get("error")
    if not isinstance(error, dict):
        return ""
    retry = error.get("retry_status")
    retry_type = retry.get("type") if isinstance(retry, dict) else None
    tail = f" ({retry_type})" if retry_type else ""
    return f"{error.get('type', 'error')}: {error.get('message', '')}{tail}"


def _model_end(event: dict[str, Any]) -> str:
    usage = event.get("model_usage")
    if not isinstance(usage, dict):
        return ""
    line = f"tokens in {usage.get('input_tokens', 0)}, out {usage.get('output_tokens', 0)}"
    return line + " (failed)" if event.get("is_error") else line


def _confirmation(event: dict[str, Any]) -> str:
    return str(event.get("result", ""))


_SUMMARIES: dict[str, Callable[[dict[str, Any]], str]] = {
    "user.message": lambda e: _text(e.get("content")),
    "agent.message": lambda e: _text(e.get("content")),
    "system.message": lambda e: _text(e.get("content")),
    "agent.thinking": lambda e: _text(e.get("content")) or str(e.get("thinking", "")),
    "agent.tool_use": _tool_use,
    "agent.mcp_tool_use": _tool_use,
    "agent.custom_tool_use": _tool_use,
    "agent.tool_result": _result,
    "agent.mcp_tool_result": _result,
    "user.tool_result": _result,
    "user.custom_tool_result": _result,
    "user.tool_confirmation": _confirmation,
    "session.status_idle": _idle,
    "session.error": _error,
    "span.model_request_end": _model_end,
}


def summarize(event: dict[str, Any]) -> str:
    """A one-line summary of ``event`` (at most :data:`MAX_SUMMARY_CHARS` characters)."""
    summary = _SUMMARIES.get(str(event.get("type")))
    return _clip(summary(event)) if summary is not None else ""
