"""Context beyond the window: the budget of a model request, its estimated size, and the
conversation after a compaction (pure: no I/O).

* **Budget.** ``HarnessConfig.context_budget(model)``: the model's context window
  (:data:`DEFAULT_CONTEXT_WINDOWS`, configurable as ``harness.context_windows``; an unknown model
  gets ``context_window_default_tokens``) minus ``max_tokens`` minus ``context_margin_tokens``.
* **Estimate.** A request's size in characters is the JSON length of its ``system``, ``tools``
  and message content blocks (:func:`chars_of`); tokens ≈ characters / ratio. The ratio is learned
  per session from the log: the characters of the last request's conversation (recorded by the
  fold at its ``span.model_request_start``) against the input tokens its reply reported (``usage``
  of ``span.model_request_end``: input + cache read + cache write), clamped to
  [:data:`MIN_CHARS_PER_TOKEN`, :data:`MAX_CHARS_PER_TOKEN`]; before any reply,
  :data:`DEFAULT_CHARS_PER_TOKEN` (conservative). A restart folds the same log: the same ratio.
  Near the budget the driver may count the request exactly (``count_tokens``,
  :mod:`~control_plane.harness.compaction`), which replaces the ratio until the next reply.
* **After a compaction.** ``agent.thread_context_compacted`` carries the summary (and the
  endpoint's ``compaction`` block verbatim, when the endpoint compacted) and how many messages of
  the conversation it replaces (``compacted_messages``); the fold replaces them with one message
  holding the summary (:func:`compacted_messages`): later requests send it after the stable
  prefix (system, tools), then the recent tail.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from control_plane.sessions.usage import DEFAULT_MODEL_PRICES

__all__ = [
    "DEFAULT_CHARS_PER_TOKEN",
    "DEFAULT_CONTEXT_WINDOWS",
    "ContextState",
    "chars_of",
    "compacted_messages",
    "default_context_windows",
    "summary_message",
    "window_for",
]

#: The context window of current Claude models (tokens): every model of the shipped price table.
DEFAULT_CONTEXT_WINDOWS: Mapping[str, int] = dict.fromkeys(DEFAULT_MODEL_PRICES, 200_000)
DEFAULT_CHARS_PER_TOKEN = 3.0
MIN_CHARS_PER_TOKEN = 1.0
MAX_CHARS_PER_TOKEN = 4.0
#: The text the summary of a harness-side compaction is sent with.
SUMMARY_PREFIX = (
    "The earlier part of this session was compacted to stay within the context window; the full "
    "history is kept in the session's event log. Summary of it:\n\n"
)
_DATED = re.compile(r"^(?P<base>.+)-\d{8}$")


def default_context_windows() -> dict[str, int]:
    return dict(DEFAULT_CONTEXT_WINDOWS)


def window_for(windows: Mapping[str, int], model: str) -> int | None:
    """``model``'s row: its own, else (a dated id) its undated one, else ``None``."""
    found = windows.get(model)
    if found is None and (dated := _DATED.match(model)) is not None:
        found = windows.get(dated["base"])
    return found


def chars_of(value: Any) -> int:
    """The size of ``value`` for the estimate: the length of its JSON."""
    if value is None:
        return 0
    return len(json.dumps(value, ensure_ascii=False))


@dataclass(slots=True)
class ContextState:
    """What the fold keeps for the context window."""

    message_chars: int = 0  # chars_of the committed conversation's content blocks
    sent_chars: int | None = None  # message_chars of the request in flight (at its span start)
    calibration: tuple[int, int] | None = None  # (message chars, input tokens) of the last reply
    counted: tuple[int, int] | None = None  # (request chars, tokens) of an exact count since then
    compacted: bool = False  # the conversation starts with a summary
    compactions_in_a_row: int = 0  # compactions since the last model reply

    def ratio(self, prefix_chars: int) -> float:
        """Characters per token for a request whose ``system`` and ``tools`` take ``prefix_chars``."""
        if self.counted is not None:  # exact: not clamped above
            chars, tokens = self.counted
            return max(MIN_CHARS_PER_TOKEN, chars / tokens) if tokens > 0 else DEFAULT_CHARS_PER_TOKEN
        if self.calibration is not None:
            chars, tokens = self.calibration[0] + prefix_chars, self.calibration[1]
        else:
            return DEFAULT_CHARS_PER_TOKEN
        if tokens <= 0:
            return DEFAULT_CHARS_PER_TOKEN
        return min(MAX_CHARS_PER_TOKEN, max(MIN_CHARS_PER_TOKEN, chars / tokens))

    def pushed(self, blocks: Sequence[Mapping[str, Any]]) -> None:
        self.message_chars += sum(chars_of(b) for b in blocks)

    def request_started(self, cleared_chars: int = 0) -> None:
        """A request starts; ``cleared_chars``: what the harness cleared of its tool results."""
        self.sent_chars = max(0, self.message_chars - cleared_chars)

    def replied(self, usage: Any, cleared_tokens: int = 0) -> None:
        """A model reply (not a compaction) arrived with ``usage``; ``cleared_tokens``: input
        tokens the server's context edits cleared (the calibration is of the request as sent)."""
        self.compactions_in_a_row = 0
        self.counted = None
        if isinstance(usage, Mapping) and self.sent_chars is not None:
            keys = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
            tokens = sum(int(usage.get(k) or 0) for k in keys) + max(0, cleared_tokens)
            if tokens > 0:
                self.calibration = (self.sent_chars, tokens)
        self.sent_chars = None

    def compacted_to(self, messages: Sequence[Mapping[str, Any]], succeeded: bool) -> None:
        self.compactions_in_a_row += 1
        self.sent_chars = None
        if succeeded:
            self.compacted = True
            self.message_chars = sum(chars_of(b) for m in messages for b in m["content"])


def summary_message(payload: Mapping[str, Any]) -> dict[str, Any] | None:
    """The message a compaction's summary is sent as (``None``: the compaction failed): the
    endpoint's ``compaction`` block as an assistant message, else the summary as user text."""
    block = payload.get("compaction_block")
    if isinstance(block, Mapping) and block.get("content"):
        fields = ("type", "content", "encrypted_content", "signature", "tool_changes")
        kept = {k: copy.deepcopy(block[k]) for k in fields if block.get(k) is not None}
        return {"role": "assistant", "content": [kept]}
    summary = payload.get("summary")
    if not isinstance(summary, str) or not summary.strip():
        return None
    return {"role": "user", "content": [{"type": "text", "text": SUMMARY_PREFIX + summary}]}


def compacted_messages(messages: list[dict[str, Any]], payload: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``messages`` after the compaction ``payload`` (an ``agent.thread_context_compacted``):
    its first ``compacted_messages`` replaced by the summary (a failed one changes nothing)."""
    summary = summary_message(payload)
    count = payload.get("compacted_messages")
    if summary is None or not isinstance(count, int) or count < 1:
        return messages
    out = [summary]
    for message in messages[count:]:
        if out[-1]["role"] == message["role"]:
            out[-1]["content"].extend(message["content"])
        else:
            out.append(message)
    return out
