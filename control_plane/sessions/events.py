"""The session event vocabulary, shared by the API and the harness.

Every event in a session log has a ``type`` from the closed set :data:`EVENT_TYPES` (the SDK's
``BetaManagedAgentsSessionEventType`` plus ``session.deleted``). On the wire an event is one flat
JSON object::

    {"id": "sevt_...", "type": "agent.message", "processed_at": "2030-01-01T12:00:00Z", **payload}

where ``payload`` is what the store keeps (:class:`~control_plane.store.base.NewEvent`). Two more
types exist only on live streams and are never stored: ``event_start`` and ``event_delta``
(:data:`STREAM_ONLY_TYPES`), previews of an ``agent.message`` / ``agent.thinking`` still being made.

A session's status is the one named by the last ``session.status_*`` event in its log
(:data:`STATUS_BY_EVENT_TYPE`), ``idle`` for a log without one.
"""

from __future__ import annotations

import enum
import os
import threading
from datetime import UTC, datetime
from typing import Any

from control_plane.store.base import Event

__all__ = [
    "DELTA_EVENT_TYPES",
    "EVENT_TYPES",
    "INPUT_EVENT_TYPES",
    "STATUS_BY_EVENT_TYPE",
    "STATUS_EVENT_TYPES",
    "STREAM_ONLY_TYPES",
    "SessionStatus",
    "event_json",
    "new_event_id",
    "rfc3339",
]

EVENT_ID_PREFIX = "sevt_"

EVENT_TYPES: frozenset[str] = frozenset(
    {
        "user.message",
        "user.interrupt",
        "user.tool_confirmation",
        "user.custom_tool_result",
        "user.tool_result",
        "user.define_outcome",
        "system.message",
        "agent.custom_tool_use",
        "agent.message",
        "agent.thinking",
        "agent.mcp_tool_use",
        "agent.mcp_tool_result",
        "agent.tool_use",
        "agent.tool_result",
        "agent.thread_message_received",
        "agent.thread_message_sent",
        "agent.thread_context_compacted",
        "session.error",
        "session.status_rescheduled",
        "session.status_running",
        "session.status_idle",
        "session.status_terminated",
        "session.thread_created",
        "session.thread_status_running",
        "session.thread_status_idle",
        "session.thread_status_terminated",
        "session.thread_status_rescheduled",
        "session.updated",
        "session.usage",
        "session.deleted",
        "span.outcome_evaluation_start",
        "span.outcome_evaluation_end",
        "span.outcome_evaluation_ongoing",
        "span.model_request_start",
        "span.model_request_end",
        "workflow_run.created",
        "workflow_run.status_running",
        "workflow_run.status_idle",
        "workflow_run.status_ended",
        "workflow_run.error",
        "workflow_run.phase_started",
        "workflow_run.phase_ended",
    }
)
"""Every event type a session log may hold."""

INPUT_EVENT_TYPES: frozenset[str] = frozenset(
    {
        "user.message",
        "user.interrupt",
        "user.tool_confirmation",
        "user.custom_tool_result",
        "user.tool_result",
        "user.define_outcome",
        "system.message",
    }
)
"""What clients may send with ``POST /v1/sessions/{id}/events``."""

STREAM_ONLY_TYPES: frozenset[str] = frozenset({"event_start", "event_delta"})
"""Live previews; never stored, only sent to streams that asked for them."""

DELTA_EVENT_TYPES: frozenset[str] = frozenset({"agent.message", "agent.thinking"})
"""Event types a stream can ask previews of (``event_deltas[]``)."""


class SessionStatus(enum.StrEnum):
    """A session's status as the API reports it. Sessions start ``idle``."""

    RESCHEDULING = "rescheduling"
    RUNNING = "running"
    IDLE = "idle"
    TERMINATED = "terminated"


STATUS_BY_EVENT_TYPE: dict[str, SessionStatus] = {
    "session.status_rescheduled": SessionStatus.RESCHEDULING,
    "session.status_running": SessionStatus.RUNNING,
    "session.status_idle": SessionStatus.IDLE,
    "session.status_terminated": SessionStatus.TERMINATED,
}
"""The event that moves a session into each status."""

STATUS_EVENT_TYPES: tuple[str, ...] = tuple(STATUS_BY_EVENT_TYPE)

_RESERVED_KEYS = frozenset({"id", "type", "processed_at"})


class _Entropy:
    """Bytes from the operating system's CSPRNG (``os.urandom``), read a block at a time: a turn
    makes an event id per streamed event, and one system call per id cost more than the rest of
    making it (system calls take microseconds in a VM). Thread-safe; a forked child starts afresh."""

    def __init__(self, block: int = 4096) -> None:
        self._block = block
        self._lock = threading.Lock()
        self._buffer = b""
        self._pos = 0

    def take(self, n: int) -> bytes:
        with self._lock:
            if self._pos + n > len(self._buffer):
                self._buffer, self._pos = os.urandom(max(self._block, n)), 0
            start, self._pos = self._pos, self._pos + n
            return self._buffer[start : self._pos]

    def reset(self) -> None:
        self._lock = threading.Lock()
        self._buffer, self._pos = b"", 0


_ENTROPY = _Entropy()
os.register_at_fork(after_in_child=_ENTROPY.reset)


def new_event_id() -> str:
    """A fresh, unguessable event id (``sevt_`` + 24 hex digits, 96 random bits)."""
    return EVENT_ID_PREFIX + _ENTROPY.take(12).hex()


def rfc3339(value: datetime) -> str:
    """RFC 3339 in UTC with a ``Z`` suffix, the API's timestamp format."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def event_json(event: Event) -> dict[str, Any]:
    """The wire form of a stored event: ``id``, ``type``, ``processed_at`` and the payload's fields
    (a payload key that collides with those three is ignored)."""
    out: dict[str, Any] = {"id": event.id, "type": event.type, "processed_at": rfc3339(event.processed_at)}
    for key, value in event.payload.items():
        if key not in _RESERVED_KEYS:
            out[key] = value
    return out
