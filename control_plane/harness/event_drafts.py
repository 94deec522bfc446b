"""Event types the harness reads and writes, and the drafts it appends (no I/O).

A :class:`Draft` is an event the harness has decided to append: a type and a payload, and an id
when the id must be known in advance (the ``agent.message`` id is streamed in ``event_start``
frames before the event is stored; tool-use ids are idempotency keys). The driver mints the
missing ids (``control_plane.sessions.new_event_id``) *before* appending, so a retried append is
idempotent. The shared vocabulary (the closed set of types, statuses, the wire form) lives in
``control_plane.sessions``; this module names the types the harness branches on.

Two payload fields are Outpost extensions, written on ``span.model_request_end``:

* ``assistant_message`` — the complete assistant message as the Messages API returned it
  (thinking blocks with signatures, text, ``tool_use`` blocks with their original ids, stop reason,
  usage). The conversation is rebuilt from it, byte for byte, so a finished model request is never
  sent again.
* ``content_event_ids`` — for each content block of that message, the id of the session event
  that shows it (``agent.message`` / ``agent.thinking`` / ``agent.tool_use`` /
  ``agent.mcp_tool_use`` / ``agent.custom_tool_use``); ``user.tool_result`` answers an event id,
  the model needs the block id.

``agent.mcp_tool_result`` carries four more: ``mcp_server_name`` and ``tool`` (what was called),
``outcome`` (``ok`` | ``tool_error`` | ``policy_denied`` | a ``session.error`` type such as
``mcp_connection_failed_error``; ``denied`` / ``interrupted`` when no call was made) and
``latency_ms`` (only when a call was made). Never a credential.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from control_plane.sessions.events import STATUS_BY_EVENT_TYPE, new_event_id

__all__ = [
    "AGENT_CUSTOM_TOOL_USE",
    "AGENT_MCP_TOOL_RESULT",
    "AGENT_MCP_TOOL_USE",
    "AGENT_MESSAGE",
    "AGENT_THINKING",
    "AGENT_THREAD_CONTEXT_COMPACTED",
    "AGENT_TOOL_RESULT",
    "AGENT_TOOL_USE",
    "INPUT_TYPES",
    "SESSION_ERROR",
    "SESSION_STATUS_IDLE",
    "SESSION_STATUS_RESCHEDULED",
    "SESSION_STATUS_RUNNING",
    "SESSION_STATUS_TERMINATED",
    "SESSION_UPDATED",
    "SESSION_USAGE",
    "SPAN_MODEL_REQUEST_END",
    "SPAN_MODEL_REQUEST_START",
    "SYSTEM_MESSAGE",
    "TOOLSET_NAME",
    "USER_CUSTOM_TOOL_RESULT",
    "USER_INTERRUPT",
    "USER_MESSAGE",
    "USER_TOOL_CONFIRMATION",
    "USER_TOOL_RESULT",
    "Draft",
    "LogEvent",
    "edge_unavailable",
    "mcp_server_error",
    "mcp_tool_result",
    "new_event_id",
    "sandbox_moved",
    "sandbox_moved_note",
    "session_error",
    "span_end_failed",
    "status_idle",
    "status_of",
    "text_content",
    "tool_result",
]

TOOLSET_NAME = "agent_toolset_20260401"

# Input events (appended by the API).
USER_MESSAGE = "user.message"
USER_INTERRUPT = "user.interrupt"
USER_TOOL_CONFIRMATION = "user.tool_confirmation"
USER_CUSTOM_TOOL_RESULT = "user.custom_tool_result"
USER_TOOL_RESULT = "user.tool_result"
SYSTEM_MESSAGE = "system.message"
INPUT_TYPES = frozenset(
    {
        USER_MESSAGE,
        USER_INTERRUPT,
        USER_TOOL_CONFIRMATION,
        USER_CUSTOM_TOOL_RESULT,
        USER_TOOL_RESULT,
        SYSTEM_MESSAGE,
    }
)

# Events the harness appends.
AGENT_MESSAGE = "agent.message"
AGENT_THINKING = "agent.thinking"
AGENT_TOOL_USE = "agent.tool_use"
AGENT_TOOL_RESULT = "agent.tool_result"
AGENT_CUSTOM_TOOL_USE = "agent.custom_tool_use"
AGENT_MCP_TOOL_USE = "agent.mcp_tool_use"
AGENT_MCP_TOOL_RESULT = "agent.mcp_tool_result"
AGENT_THREAD_CONTEXT_COMPACTED = "agent.thread_context_compacted"
SESSION_STATUS_RUNNING = "session.status_running"
SESSION_STATUS_IDLE = "session.status_idle"
SESSION_STATUS_RESCHEDULED = "session.status_rescheduled"
SESSION_STATUS_TERMINATED = "session.status_terminated"
SESSION_ERROR = "session.error"
SESSION_USAGE = "session.usage"
SESSION_UPDATED = "session.updated"
SPAN_MODEL_REQUEST_START = "span.model_request_start"
SPAN_MODEL_REQUEST_END = "span.model_request_end"


class LogEvent(Protocol):
    """What the harness needs of a stored event (``control_plane.store.Event`` fits)."""

    @property
    def id(self) -> str: ...

    @property
    def type(self) -> str: ...

    @property
    def payload(self) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class Draft:
    """An event the harness will append. ``id=None``: the driver mints one before appending."""

    type: str
    payload: dict[str, Any] = field(default_factory=dict)
    id: str | None = None


def status_of(event_type: str) -> str | None:
    """The session resource ``status`` a status event sets, or ``None`` for other events."""
    status = STATUS_BY_EVENT_TYPE.get(event_type)
    return None if status is None else str(status)


def text_content(text: str) -> list[dict[str, Any]]:
    """A content list holding one text block."""
    return [{"type": "text", "text": text}]


def tool_result(tool_use_id: str, content: Sequence[Mapping[str, Any]], *, is_error: bool) -> Draft:
    """``agent.tool_result`` answering the ``agent.tool_use`` event ``tool_use_id``."""
    return Draft(
        AGENT_TOOL_RESULT,
        {"tool_use_id": tool_use_id, "content": [dict(b) for b in content], "is_error": is_error},
    )


def mcp_tool_result(
    mcp_tool_use_id: str,
    content: Sequence[Mapping[str, Any]],
    *,
    is_error: bool,
    server: str,
    tool: str,
    outcome: str,
    latency_ms: float | None = None,
) -> Draft:
    """``agent.mcp_tool_result`` answering the ``agent.mcp_tool_use`` event ``mcp_tool_use_id``,
    with the Outpost extension fields (see the module docstring)."""
    payload: dict[str, Any] = {
        "mcp_tool_use_id": mcp_tool_use_id,
        "content": [dict(b) for b in content],
        "is_error": is_error,
        "mcp_server_name": server,
        "tool": tool,
        "outcome": outcome,
    }
    if latency_ms is not None:
        payload["latency_ms"] = latency_ms
    return Draft(AGENT_MCP_TOOL_RESULT, payload)


def status_idle(stop_type: str, event_ids: Sequence[str] | None = None) -> Draft:
    """``session.status_idle`` with ``stop_reason {type}`` (and ``event_ids`` for requires_action)."""
    stop_reason: dict[str, Any] = {"type": stop_type}
    if event_ids is not None:
        stop_reason["event_ids"] = list(event_ids)
    return Draft(SESSION_STATUS_IDLE, {"stop_reason": stop_reason})


def session_error(error_type: str, message: str, retry_status: str) -> Draft:
    """``session.error`` with ``retry_status`` ``retrying`` | ``exhausted`` | ``terminal``."""
    return Draft(
        SESSION_ERROR,
        {"error": {"type": error_type, "message": message, "retry_status": {"type": retry_status}}},
    )


def sandbox_moved(from_edge_id: str, to_edge_id: str, reason: str) -> Draft:
    """The non-fatal ``session.error`` saying the session's sandbox was made anew on another edge
    (``unknown_error``, ``retry_status: retrying``: the session goes on). ``sandbox_moved`` names
    the edges; it is an Outpost field, which the SDK keeps as an extra attribute."""
    message = (
        f"The session's sandbox moved from edge {from_edge_id} to edge {to_edge_id} ({reason}). "
        f"The new sandbox has its own /workspace: files written before the move stayed with edge "
        f"{from_edge_id}'s workspace, and the shell started afresh."
    )
    draft = session_error("unknown_error", message, "retrying")
    draft.payload["error"]["sandbox_moved"] = {
        "from_edge_id": from_edge_id,
        "to_edge_id": to_edge_id,
        "reason": reason,
    }
    return draft


def edge_unavailable(environment_id: str, edges_enrolled: int, edge_wait_s: float) -> Draft:
    """The non-fatal ``session.error`` saying the session's environment has no connected edge, so
    its tool calls wait (up to ``edge_wait_s``) and then fail (``unknown_error``, ``retry_status:
    retrying``: the session goes on). ``edge_unavailable`` is an Outpost field for programs (the SDK
    keeps it as an extra attribute), as ``sandbox_moved`` is."""
    if edges_enrolled:
        why = f"none of its {edges_enrolled} enrolled edge(s) has a tunnel up"
    else:
        why = "no edge is enrolled in it (outpost-control tokens create, then outpost-edge register)"
    message = (
        f"No edge of environment {environment_id} is connected: {why}. Tool calls wait up to "
        f"{edge_wait_s:g} s for an edge to connect, then fail; the session goes on."
    )
    draft = session_error("unknown_error", message, "retrying")
    draft.payload["error"]["edge_unavailable"] = {
        "environment_id": environment_id,
        "edges_enrolled": edges_enrolled,
        "edges_connected": 0,
        "edge_wait_s": edge_wait_s,
    }
    return draft


def sandbox_moved_note(reason: str) -> str:
    """What the model is told, ahead of the first result from the new sandbox."""
    return (
        f"[The sandbox was replaced by a new one on another machine ({reason}): files written "
        "before this call may be missing, the shell's state is gone, and repositories were "
        "cloned again.]"
    )


def mcp_server_error(error_type: str, server: str, message: str) -> Draft:
    """The non-fatal ``session.error`` for an MCP server whose tools could not be listed
    (``retry_status: retrying``: the next turn tries the server again)."""
    draft = session_error(error_type, message, "retrying")
    draft.payload["error"]["mcp_server_name"] = server
    return draft


def span_end_failed(start_id: str) -> Draft:
    """``span.model_request_end`` closing a request that produced no assistant message."""
    return Draft(
        SPAN_MODEL_REQUEST_END,
        {
            "model_request_start_id": start_id,
            "model_usage": {
                "input_tokens": 0,
                "output_tokens": 0,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
            "is_error": True,
        },
    )
