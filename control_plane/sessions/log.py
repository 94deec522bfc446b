"""Reading and writing a session's log the way the API and the harness both need to.

* :func:`append_and_publish` appends events and tells live streams (through the
  :class:`~control_plane.bus.EventBus`) how far the log now reaches.
* :func:`read_status` derives the session's status from the log: the last ``session.status_*``
  event wins; a log without one is ``idle``. The API reports this, never the ``status`` field of
  the session body (a mirror that the API and harness keep for scans by status).
* :func:`read_usage` is the last ``session.usage`` snapshot, or zeros.
* :func:`read_active_ms` is the time the session spent ``running``, from the timestamps of its
  status events (:func:`~control_plane.sessions.usage.active_ms`).
* :func:`check_answers` refuses tool confirmations and tool results that answer nothing the session
  waits for: an id not in the latest ``requires_action`` idle, or one already answered since.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from control_plane.bus import EventBus
from control_plane.errors import InvalidRequest
from control_plane.sessions.events import STATUS_BY_EVENT_TYPE, STATUS_EVENT_TYPES, SessionStatus
from control_plane.sessions.usage import active_ms
from control_plane.store.base import Event, EventLog, NewEvent, Order

__all__ = [
    "ANSWER_ID_FIELDS",
    "StatusView",
    "append_and_publish",
    "check_answers",
    "open_tool_uses",
    "pending_answers",
    "read_active_ms",
    "read_status",
    "read_usage",
    "zero_usage",
]

# Input events that answer a tool use the session waits for, and the field naming it.
ANSWER_ID_FIELDS = {
    "user.tool_confirmation": "tool_use_id",
    "user.custom_tool_result": "custom_tool_use_id",
    "user.tool_result": "tool_use_id",
}


async def append_and_publish(
    store: EventLog,
    bus: EventBus,
    session_id: str,
    events: Sequence[NewEvent],
    now: datetime,
    *,
    expected_seq: int | None = None,
    epoch: int | None = None,
) -> list[Event]:
    """``store.append`` then ``bus.publish_persisted`` with the highest stored seq, and the
    stored events when they are one run of seqs (so this process's streams need not read them
    back)."""
    stored = await store.append(session_id, events, now, expected_seq=expected_seq, epoch=epoch)
    if stored:
        ordered = sorted(stored, key=lambda e: e.seq)
        last = ordered[-1].seq
        run = all(b.seq == a.seq + 1 for a, b in itertools.pairwise(ordered))
        bus.publish_persisted(session_id, last, ordered if run else ())
    return stored


@dataclass(frozen=True, slots=True)
class StatusView:
    """The session's status and the time it entered it (``None``: never changed, still ``idle``)."""

    status: SessionStatus
    since: datetime | None


async def read_status(store: EventLog, session_id: str) -> StatusView:
    latest = await store.get_events(session_id, types=STATUS_EVENT_TYPES, order=Order.DESC, limit=1)
    if not latest:
        return StatusView(SessionStatus.IDLE, None)
    return StatusView(STATUS_BY_EVENT_TYPE[latest[0].type], latest[0].processed_at)


def zero_usage() -> dict[str, Any]:
    return {
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_read_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
    }


async def read_usage(store: EventLog, session_id: str) -> dict[str, Any]:
    latest = await store.get_events(session_id, types=("session.usage",), order=Order.DESC, limit=1)
    if latest:
        usage = latest[0].payload.get("usage")
        if isinstance(usage, dict):
            return usage
    return zero_usage()


async def read_active_ms(store: EventLog, session_id: str, now: datetime) -> int:
    """Milliseconds the session spent ``running``, a span still open counted up to ``now``."""
    statuses = await store.get_events(session_id, types=STATUS_EVENT_TYPES)
    return active_ms(((e.type, e.processed_at) for e in statuses), now)


async def pending_answers(store: EventLog, session_id: str) -> frozenset[str]:
    """The tool-use event ids the session waits on: those of its latest ``requires_action`` idle
    (if that is its status now) that no confirmation or result has answered since."""
    latest = await store.get_events(session_id, types=STATUS_EVENT_TYPES, order=Order.DESC, limit=1)
    if not latest or latest[0].type != "session.status_idle":
        return frozenset()
    stop = latest[0].payload.get("stop_reason")
    if not isinstance(stop, dict) or stop.get("type") != "requires_action":
        return frozenset()
    waiting = {str(i) for i in stop.get("event_ids") or ()}
    answers = await store.get_events(session_id, after_seq=latest[0].seq, types=tuple(ANSWER_ID_FIELDS))
    for answer in answers:
        waiting.discard(str(answer.payload.get(ANSWER_ID_FIELDS[answer.type])))
    return frozenset(waiting)


async def open_tool_uses(store: EventLog, session_id: str) -> frozenset[str]:
    """The ``agent.tool_use`` event ids no result answers yet (a worker-run session's toolset
    calls: its worker may answer one before the session says ``requires_action``)."""
    found = await store.get_events(
        session_id, types=("agent.tool_use", "agent.tool_result", "user.tool_result")
    )
    uses = {e.id for e in found if e.type == "agent.tool_use"}
    return frozenset(uses - {str(e.payload.get("tool_use_id")) for e in found if e.type != "agent.tool_use"})


async def check_answers(
    store: EventLog, session_id: str, events: Sequence[NewEvent], param: str, *, worker_tools: bool = False
) -> None:
    """``InvalidRequest`` (nothing is written) if any event of the batch answers a tool use the
    session does not wait on, or answers one twice: an outside runner cannot make a tool run twice
    or put words in the mouth of a call that never happened. With ``worker_tools`` (a worker-run
    session), a ``user.tool_result`` may answer any toolset call still open."""
    answering = [(i, e) for i, e in enumerate(events) if e.type in ANSWER_ID_FIELDS]
    if not answering:
        return
    waiting = set(await pending_answers(store, session_id))
    results = set(await open_tool_uses(store, session_id)) if worker_tools else set()
    for index, event in answering:
        field = ANSWER_ID_FIELDS[event.type]
        target = str(event.payload.get(field))
        where = f"{param}[{index}].{field}"
        if target not in waiting and not (event.type == "user.tool_result" and target in results):
            raise InvalidRequest(
                f"{where}: session {session_id} is not waiting for an answer to {target!r} "
                "(unknown, not awaiting confirmation or a result, or already answered)",
                param=where,
            )
        waiting.discard(target)  # a second answer in the same batch is refused too
        results.discard(target)
