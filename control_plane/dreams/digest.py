"""A dream's model request and the plan it answers with (pure: no I/O).

**Input, bounded.** Each input session's transcript is digested into short lines (what the user
said, what the agent said, which tools it called with what, what they returned, errors), each line
cut to :data:`MAX_LINE_CHARS`. The memory store is shown as its memories (path and content). The
whole prompt must fit the model's context budget (``HarnessConfig.context_budget`` with the
dream's ``max_tokens``), counted in characters at the harness's conservative
:data:`~control_plane.harness.context_window.DEFAULT_CHARS_PER_TOKEN`: the memories get at most
a third of it, the sessions share the rest fairly (a short transcript leaves its unused share to
the longer ones), and a transcript longer than its share keeps its beginning (a quarter) and its
end, with a line saying how much was left out between them.

**Output, structured.** The request forces one call of the ``record_memories`` tool
(``tool_choice``): ``writes`` (path and full new content), ``deletes`` (paths) and a short
``summary``. :func:`parse_plan` accepts exactly that, every path and content checked by the memory
rules (:mod:`control_plane.memory.limits`) before anything is written, or raises
:class:`~control_plane.errors.DreamFailed` (``invalid_model_output``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from control_plane.errors import DreamFailed, InvalidRequest
from control_plane.harness.context_window import DEFAULT_CHARS_PER_TOKEN
from control_plane.memory.limits import check_content, check_path
from control_plane.store.base import Event, MemoryRecord

__all__ = [
    "INVALID_OUTPUT",
    "MAX_LINE_CHARS",
    "MAX_PLAN_OPERATIONS",
    "SYSTEM",
    "TOOL",
    "TOOL_NAME",
    "TRANSCRIPT_TYPES",
    "MemoryPlan",
    "build_request",
    "digest_events",
    "parse_plan",
    "plan_input",
    "trim_lines",
]

TOOL_NAME = "record_memories"
INVALID_OUTPUT = "invalid_model_output"
MAX_LINE_CHARS = 2000
MAX_PLAN_OPERATIONS = 500
#: The event types a transcript is made of (the rest: statuses, spans, usage ... say nothing new).
TRANSCRIPT_TYPES = (
    "user.message",
    "agent.message",
    "agent.tool_use",
    "agent.custom_tool_use",
    "agent.mcp_tool_use",
    "agent.tool_result",
    "agent.mcp_tool_result",
    "user.custom_tool_result",
    "session.error",
)

SYSTEM = (
    "You are a memory curator. You read transcripts of past agent sessions and the current contents of "
    "a memory store, and you reorganize the store so that future sessions find what they need: durable "
    "facts, user preferences, decisions, procedures that worked and pitfalls to avoid. Merge duplicates, "
    "fix what the transcripts show to be outdated, drop what is no longer true, and keep each memory "
    "focused and short. Paths start with '/' and look like '/topic/subtopic.md'. Answer by calling "
    f"{TOOL_NAME} exactly once: `writes` holds the full new content of every memory you create or change, "
    "`deletes` the paths of memories to remove; memories you leave out stay as they are."
)

TOOL: dict[str, Any] = {
    "name": TOOL_NAME,
    "description": "Record the reorganized memory store: memories to write (create or replace), to delete.",
    "input_schema": {
        "type": "object",
        "properties": {
            "writes": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                    "required": ["path", "content"],
                },
            },
            "deletes": {"type": "array", "items": {"type": "string"}},
            "summary": {"type": "string", "description": "One or two sentences: what changed and why."},
        },
        "required": ["writes", "deletes", "summary"],
    },
}


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """What the model decided: full contents by path, paths to delete, and why."""

    writes: tuple[tuple[str, str], ...]
    deletes: tuple[str, ...]
    summary: str

    def to_json(self) -> dict[str, Any]:
        return {
            "writes": [{"path": p, "content": c} for p, c in self.writes],
            "deletes": list(self.deletes),
            "summary": self.summary,
        }


def _cut(text: str, limit: int = MAX_LINE_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + f" […{len(text) - limit} more characters]"


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, Sequence):
        return ""
    parts = []
    for block in content:
        if isinstance(block, Mapping):
            if block.get("type") == "text":
                parts.append(str(block.get("text", "")))
            elif block.get("type") is not None:
                parts.append(f"[{block.get('type')}]")
    return " ".join(parts)


def _line(event: Event) -> str | None:
    p = event.payload
    kind = event.type
    if kind in ("user.message", "agent.message"):
        who = "USER" if kind == "user.message" else "AGENT"
        text = _text_of(p.get("content"))
        return f"{who}: {text}" if text else None
    if kind in ("agent.tool_use", "agent.custom_tool_use", "agent.mcp_tool_use"):
        name = p.get("name")
        if kind == "agent.mcp_tool_use":
            name = f"{p.get('mcp_server_name')}/{name}"
        return f"TOOL CALL {name}: {json.dumps(p.get('input'), ensure_ascii=False)}"
    if kind in ("agent.tool_result", "agent.mcp_tool_result", "user.custom_tool_result"):
        flag = " (error)" if p.get("is_error") else ""
        return f"TOOL RESULT{flag}: {_text_of(p.get('content'))}"
    if kind == "session.error":
        error = p.get("error")
        message = error.get("message") if isinstance(error, Mapping) else None
        return f"ERROR: {message}" if message else None
    return None


def digest_events(events: Sequence[Event]) -> list[str]:
    """A transcript's lines, each cut to :data:`MAX_LINE_CHARS`."""
    lines = []
    for event in events:
        line = _line(event)
        if line is not None:
            lines.append(_cut(line))
    return lines


def _size(lines: Sequence[str]) -> int:
    return sum(len(line) + 1 for line in lines)


def trim_lines(lines: Sequence[str], budget_chars: int) -> list[str]:
    """``lines`` if they fit ``budget_chars``, else their beginning (a quarter of the budget) and
    their end, with a line saying how many were left out."""
    if _size(lines) <= budget_chars:
        return list(lines)
    head: list[str] = []
    used = 0
    for line in lines:
        if used + len(line) + 1 > budget_chars // 4:
            break
        head.append(line)
        used += len(line) + 1
    tail: list[str] = []
    for line in reversed(lines[len(head) :]):
        if used + len(line) + 1 > budget_chars - 80:
            break
        tail.append(line)
        used += len(line) + 1
    tail.reverse()
    left_out = len(lines) - len(head) - len(tail)
    return [*head, f"[… {left_out} transcript lines left out to fit the context budget …]", *tail]


def _shares(sizes: Sequence[int], budget: int) -> list[int]:
    """A fair split of ``budget`` among items of ``sizes``: none gets more than it needs, the
    rest is shared equally (water filling)."""
    shares = [0] * len(sizes)
    order = sorted(range(len(sizes)), key=lambda i: sizes[i])
    left, remaining = budget, len(sizes)
    for i in order:
        share = min(sizes[i], left // remaining) if remaining else 0
        shares[i] = share
        left -= share
        remaining -= 1
    return shares


def _memory_section(memories: Sequence[MemoryRecord], budget_chars: int) -> tuple[str, int]:
    if not memories:
        return "(the memory store is empty)", 0
    per_memory = max(200, budget_chars // len(memories))
    parts, used, shown = [], 0, 0
    for memory in memories:
        block = f"--- {memory.path}\n{_cut(memory.content or '', per_memory)}"
        if used + len(block) > budget_chars:
            break
        parts.append(block)
        used += len(block) + 1
        shown += 1
    if shown < len(memories):
        parts.append(f"[… {len(memories) - shown} more memories not shown; leave them as they are …]")
    return "\n".join(parts), shown


def build_request(
    *,
    model: str,
    max_tokens: int,
    budget_tokens: int,
    transcripts: Mapping[str, Sequence[str]],
    memories: Sequence[MemoryRecord],
    instructions: str | None,
) -> dict[str, Any]:
    """The Messages request of a dream: ``transcripts`` (session id -> digest lines, in the order
    given) and ``memories`` trimmed to ``budget_tokens``, ``record_memories`` forced."""
    fixed = len(SYSTEM) + len(json.dumps(TOOL)) + len(instructions or "") + 1000
    budget_chars = max(1000, int(budget_tokens * DEFAULT_CHARS_PER_TOKEN) - fixed)
    memory_text, _ = _memory_section(memories, budget_chars // 3)
    session_budget = budget_chars - len(memory_text)
    ids = list(transcripts)
    overhead = 40
    shares = _shares([_size(transcripts[i]) + overhead for i in ids], session_budget)
    sections = []
    for session_id, share in zip(ids, shares, strict=True):
        lines = trim_lines(transcripts[session_id], max(0, share - overhead))
        sections.append(f"=== session {session_id}\n" + ("\n".join(lines) or "(no transcript)"))
    guidance = f"\n\nInstructions for this reorganization:\n{instructions}" if instructions else ""
    prompt = (
        f"Current memory store:\n{memory_text}\n\nTranscripts of {len(ids)} past session(s):\n"
        + "\n\n".join(sections)
        + guidance
    )
    return {
        "model": model,
        "max_tokens": max_tokens,
        "system": SYSTEM,
        "tools": [TOOL],
        "tool_choice": {"type": "tool", "name": TOOL_NAME},
        "messages": [{"role": "user", "content": [{"type": "text", "text": prompt}]}],
    }


def _invalid(message: str) -> DreamFailed:
    return DreamFailed(INVALID_OUTPUT, f"the model's answer is not a valid {TOOL_NAME} call: {message}")


def plan_input(message: Mapping[str, Any]) -> Mapping[str, Any]:
    """The input of the one ``record_memories`` call in the assistant ``message``."""
    if message.get("stop_reason") == "max_tokens":
        raise _invalid("it was cut off at max_tokens")
    calls = [
        b
        for b in message.get("content") or ()
        if isinstance(b, Mapping) and b.get("type") == "tool_use" and b.get("name") == TOOL_NAME
    ]
    if len(calls) != 1:
        raise _invalid(f"expected exactly one call, found {len(calls)}")
    given = calls[0].get("input")
    if not isinstance(given, Mapping):
        raise _invalid("its input is not an object")
    return given


def parse_plan(given: Mapping[str, Any]) -> MemoryPlan:
    """The plan in a ``record_memories`` input, every path and content checked."""
    writes, deletes, summary = given.get("writes"), given.get("deletes", []), given.get("summary", "")
    if not isinstance(writes, list) or not isinstance(deletes, list) or not isinstance(summary, str):
        raise _invalid("`writes` and `deletes` must be arrays, `summary` a string")
    if len(writes) + len(deletes) > MAX_PLAN_OPERATIONS:
        raise _invalid(f"more than {MAX_PLAN_OPERATIONS} writes and deletes")
    planned: dict[str, str] = {}
    try:
        for i, item in enumerate(writes):
            if not isinstance(item, Mapping) or not isinstance(item.get("path"), str):
                raise _invalid(f"writes[{i}] must be an object with a string `path`")
            if not isinstance(item.get("content"), str):
                raise _invalid(f"writes[{i}].content must be a string")
            path = check_path(item["path"], f"writes[{i}].path")
            if path in planned:
                raise _invalid(f"writes[{i}]: {path!r} is written twice")
            planned[path] = check_content(item["content"], f"writes[{i}].content")
        removed: list[str] = []
        for i, item in enumerate(deletes):
            if not isinstance(item, str):
                raise _invalid(f"deletes[{i}] must be a string")
            path = check_path(item, f"deletes[{i}]")
            if path in planned or path in removed:
                raise _invalid(f"deletes[{i}]: {path!r} is also written or deleted twice")
            removed.append(path)
    except InvalidRequest as exc:
        raise _invalid(str(exc)) from None
    return MemoryPlan(tuple(planned.items()), tuple(removed), _cut(summary))
