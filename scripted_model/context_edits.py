"""The Messages API's server-side context edits (``context_management``, beta
``context-management-2025-06-27``), applied deterministically by the local server.

``clear_tool_uses_20250919``: when the request's input tokens (``wire.count_input_tokens``)
exceed ``trigger`` (``input_tokens``, default 100,000; or ``tool_uses``: more tool uses than its
value), the content of every tool result but those of the last ``keep`` tool uses (default 3) and
of tools named in ``exclude_tools`` is replaced by :data:`CLEARED_TEXT`, oldest first; when that
frees fewer than ``clear_at_least`` input tokens, nothing is cleared. ``clear_thinking_20251015``
is accepted and changes nothing (the server keeps no thinking to clear). The response reports
``context_management.applied_edits``: one ``{type, cleared_tool_uses, cleared_input_tokens}`` per
clearing applied; ``count_tokens`` counts the request after its edits.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from scripted_model import wire

__all__ = ["CLEARED_TEXT", "apply_context_management"]

CLEARED_TEXT = "[Tool result cleared by context management]"
_KNOWN = frozenset({"clear_tool_uses_20250919", "clear_thinking_20251015"})


def apply_context_management(body: Mapping[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]] | str:
    """``body`` after its ``context_management`` edits and the edits applied, or the
    ``invalid_request_error`` message."""
    config = body.get("context_management")
    edits = config.get("edits") if isinstance(config, Mapping) else None
    if not isinstance(edits, list):
        return "context_management.edits: Input should be a valid list"
    out = copy.deepcopy(dict(body))
    out.pop("context_management", None)
    applied: list[dict[str, Any]] = []
    for index, edit in enumerate(edits):
        kind = edit.get("type") if isinstance(edit, Mapping) else None
        if kind not in _KNOWN:
            return f"context_management.edits.{index}.type: Input should be one of {sorted(_KNOWN)}"
        if kind == "clear_tool_uses_20250919":
            assert isinstance(edit, Mapping)
            done = _clear_tool_uses(out, edit)
            if done is not None:
                applied.append(done)
    return out, applied


def _value(param: Any, kind: str, default: int) -> int:
    if isinstance(param, Mapping) and param.get("type") == kind and isinstance(param.get("value"), int):
        return int(param["value"])
    return default


def _clear_tool_uses(body: dict[str, Any], edit: Mapping[str, Any]) -> dict[str, Any] | None:
    messages = body["messages"]
    names = {
        block.get("id"): block.get("name")
        for message in messages
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, Mapping) and block.get("type") == "tool_use"
    }
    results = [
        block
        for message in messages
        if message.get("role") == "user" and isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "tool_result"
    ]
    trigger = edit.get("trigger")
    before = wire.count_input_tokens(body)
    if isinstance(trigger, Mapping) and trigger.get("type") == "tool_uses":
        if len(results) <= _value(trigger, "tool_uses", 0):
            return None
    elif before <= _value(trigger, "input_tokens", 100_000):
        return None
    keep = max(0, _value(edit.get("keep"), "tool_uses", 3))
    excluded = set(edit.get("exclude_tools") or ())
    candidates = [
        block
        for block in results[: len(results) - keep if keep else None]
        if names.get(block.get("tool_use_id")) not in excluded and block.get("content") != CLEARED_TEXT
    ]
    saved = [(block, block.get("content")) for block in candidates]
    for block in candidates:
        block["content"] = CLEARED_TEXT
    cleared = before - wire.count_input_tokens(body)
    if not candidates or cleared < _value(edit.get("clear_at_least"), "input_tokens", 0):
        for block, content in saved:  # not worth it: nothing is cleared
            if content is None:
                block.pop("content", None)
            else:
                block["content"] = content
        return None
    return {
        "type": "clear_tool_uses_20250919",
        "cleared_tool_uses": len(candidates),
        "cleared_input_tokens": cleared,
    }
