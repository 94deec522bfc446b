"""Session and event domain logic shared by the HTTP API and the harness.

* :mod:`~control_plane.sessions.events` — the closed set of event types, ids, the wire form.
* :mod:`~control_plane.sessions.input_events` — strict validation of client-sent events.
* :mod:`~control_plane.sessions.log` — append-and-publish, status and usage read from the log.
* :mod:`~control_plane.sessions.service` — :class:`SessionService`, the rules of sessions, their
  input events and repositories (the API's routers call it with the typed values of
  :mod:`~control_plane.sessions.commands`; the agent snapshot is
  :mod:`~control_plane.sessions.agent_snapshot`).
"""

from __future__ import annotations

from control_plane.sessions.events import (
    DELTA_EVENT_TYPES,
    EVENT_TYPES,
    INPUT_EVENT_TYPES,
    STATUS_BY_EVENT_TYPE,
    STREAM_ONLY_TYPES,
    SessionStatus,
    event_json,
    new_event_id,
)
from control_plane.sessions.input_events import parse_input_events
from control_plane.sessions.log import StatusView, append_and_publish, read_status, read_usage

__all__ = [
    "DELTA_EVENT_TYPES",
    "EVENT_TYPES",
    "INPUT_EVENT_TYPES",
    "STATUS_BY_EVENT_TYPE",
    "STREAM_ONLY_TYPES",
    "SessionStatus",
    "StatusView",
    "append_and_publish",
    "event_json",
    "new_event_id",
    "parse_input_events",
    "read_status",
    "read_usage",
]
