"""Context beyond the window, first resort: clear old tool results (pure: no I/O).

Before a request is compacted (:mod:`~control_plane.harness.compaction`), the content of its oldest
tool results is replaced, **in the request only** (the log keeps every result whole), by a short
placeholder naming the result's tool-use event (:data:`CLEARED_NOTE`), the way the Messages API's
server-side edit ``clear_tool_uses_20250919`` clears them:

* **trigger**: the request's estimate is over ``clear_tool_uses_trigger_share`` of the budget;
* **keep**: the last ``clear_tool_uses_keep`` tool results stay, and so do those of the last
  message (the results the model has not seen yet);
* **batches**: the oldest results are cleared until at least the excess over the trigger, rounded
  up to a whole number of batches of ``clear_tool_uses_at_least_share`` of the budget, is freed;
  when the candidates cannot free one batch nothing is cleared (as ``clear_at_least`` does). The
  cleared set grows by batches, oldest first: the prompt-cache prefix changes rarely.

The rule is a function of the log and the configuration only, so a restarted harness rebuilds the
same request. Models listed in ``harness.context_edit_models`` get the same rule as the request's
``context_management`` parameter instead (:func:`context_management_param`); the harness then only
simulates it to estimate what the server will send on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from control_plane.harness.context_window import chars_of

__all__ = [
    "CLEARED_NOTE",
    "CLEAR_TOOL_USES",
    "Cleared",
    "clear_tool_results",
    "cleared_input_tokens",
    "context_management_param",
]

CLEAR_TOOL_USES = "clear_tool_uses_20250919"
CLEARED_NOTE = "[tool result cleared to save context; {chars} characters; event {event_id}]"


@dataclass(frozen=True, slots=True)
class Cleared:
    """What clearing removed from a request: ``tool_uses`` results, ``chars`` characters."""

    tool_uses: int
    chars: int

    def to_json(self) -> dict[str, int]:
        """The record on the request's ``span.model_request_start`` (``cleared_tool_results``)."""
        return {"tool_uses": self.tool_uses, "characters": self.chars}


def _candidates(messages: Sequence[Mapping[str, Any]], keep: int) -> list[tuple[int, int]]:
    """``(message, block)`` of every tool result that may be cleared, oldest first."""
    found = [
        (m, b)
        for m, message in enumerate(messages[:-1])  # never the last message (not seen yet)
        if message.get("role") == "user" and isinstance(message.get("content"), list)
        for b, block in enumerate(message["content"])
        if isinstance(block, Mapping) and block.get("type") == "tool_result"
    ]
    tail = sum(
        1
        for block in (messages[-1].get("content") if messages else None) or ()
        if isinstance(block, Mapping) and block.get("type") == "tool_result"
    )
    kept = max(0, keep - tail)
    return found[: len(found) - kept] if kept else found


def clear_tool_results(
    messages: list[dict[str, Any]],
    event_ids: Mapping[str, str],
    *,
    keep: int,
    excess_chars: int,
    batch_chars: int,
    at_least_chars: int = 1,
) -> Cleared | None:
    """Clear (in place) the oldest tool results of ``messages`` beyond the last ``keep``, until
    ``excess_chars`` rounded up to whole ``batch_chars`` are freed (or all of them are cleared);
    ``None`` (nothing changed) when there is no excess or the candidates cannot free
    ``at_least_chars``. ``event_ids`` maps a ``tool_use_id`` to its tool-use event id, named in
    the placeholder."""
    if excess_chars <= 0:
        return None
    batch = max(1, batch_chars)
    goal = math.ceil(excess_chars / batch) * batch
    planned: list[tuple[int, int, dict[str, Any]]] = []
    freed = 0
    for m, b in _candidates(messages, keep):
        if freed >= goal:
            break
        block = messages[m]["content"][b]
        event_id = event_ids.get(str(block.get("tool_use_id")), "unknown")
        note = CLEARED_NOTE.format(chars=chars_of(block.get("content")), event_id=event_id)
        new = {k: v for k, v in block.items() if k != "content"}
        new["content"] = [{"type": "text", "text": note}]
        saved = chars_of(block) - chars_of(new)
        if saved <= 0:
            continue  # already short: clearing it frees nothing
        planned.append((m, b, new))
        freed += saved
    if freed < max(1, at_least_chars):
        return None  # not worth a change of the cached prompt prefix (clear_at_least)
    for m, b, new in planned:
        messages[m]["content"][b] = new
    return Cleared(len(planned), freed)


def context_management_param(*, trigger_tokens: int, keep: int, at_least_tokens: int) -> dict[str, Any]:
    """The Messages API's ``context_management`` for the same rule, cleared by the server."""
    edit = {
        "type": CLEAR_TOOL_USES,
        "trigger": {"type": "input_tokens", "value": max(1, trigger_tokens)},
        "keep": {"type": "tool_uses", "value": keep},
        "clear_at_least": {"type": "input_tokens", "value": max(1, at_least_tokens)},
    }
    return {"edits": [edit]}


def cleared_input_tokens(context_management: Any) -> int:
    """The input tokens the server's edits cleared, from a response's ``context_management``."""
    if not isinstance(context_management, Mapping):
        return 0
    total = 0
    for edit in context_management.get("applied_edits") or ():
        if isinstance(edit, Mapping) and isinstance(edit.get("cleared_input_tokens"), int):
            total += edit["cleared_input_tokens"]
    return total
