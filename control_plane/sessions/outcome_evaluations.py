"""Outcomes, the session side: ``user.define_outcome`` as the API accepts it, and the session's
``outcome_evaluations`` read from its log.

A client defines an outcome with ``user.define_outcome`` (``description``, ``rubric`` — text, or
a file uploaded through ``/v1/files`` — and ``max_iterations``, 1 to 20, default 3). The event is
stored with a server ``outcome_id`` (``outc_`` + 24 hex digits) and its effective
``max_iterations``; a file rubric is resolved to its text when the event is accepted, as the hosted
product does (the stored rubric is ``{"type": "text", "content"}``; the Outpost field
``rubric_file_id`` keeps the file's id). The harness does the rest
(:mod:`control_plane.harness.outcomes`).

One outcome at a time: an outcome is refused (400) while an earlier one has not reached a
terminal result, and a batch may define at most one.

``outcome_evaluations`` (one entry per outcome, in the order they were defined) is derived from
the log, never kept apart from it: ``pending`` until a turn starts after the definition,
``running`` while the agent works (or revises after ``needs_revision``), ``evaluating`` between
``span.outcome_evaluation_start`` and its end, then the terminal result (``satisfied``,
``max_iterations_reached``, ``failed``, ``interrupted``) with ``completed_at``. ``iteration`` is the
0-indexed cycle the outcome is on; ``explanation`` the grader's latest.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any, Protocol

from control_plane.errors import InvalidRequest, NotFound
from control_plane.sessions.events import rfc3339
from control_plane.store.base import Event, EventLog, NewEvent, Resource

__all__ = [
    "DEFAULT_MAX_ITERATIONS",
    "DEFINE_OUTCOME",
    "EVALUATION_END",
    "EVALUATION_ONGOING",
    "EVALUATION_START",
    "MAX_ITERATIONS",
    "MAX_RUBRIC_CHARS",
    "TERMINAL_RESULTS",
    "RubricFiles",
    "define_outcome_payload",
    "outcome_evaluations",
    "prepare_outcomes",
    "read_outcome_evaluations",
]

DEFINE_OUTCOME = "user.define_outcome"
EVALUATION_START = "span.outcome_evaluation_start"
EVALUATION_ONGOING = "span.outcome_evaluation_ongoing"
EVALUATION_END = "span.outcome_evaluation_end"
DEFAULT_MAX_ITERATIONS = 3
MAX_ITERATIONS = 20
MAX_RUBRIC_CHARS = 262_144  # the SDK's documented cap on a text rubric
TERMINAL_RESULTS = frozenset({"satisfied", "max_iterations_reached", "failed", "interrupted"})
_OUTCOME_EVENTS = (DEFINE_OUTCOME, EVALUATION_START, EVALUATION_END, "session.status_running")


class RubricFiles(Protocol):
    """Where a file rubric's text is read (``control_plane.files.FileService`` fits)."""

    async def content(self, file_id: str) -> tuple[Resource, AsyncIterator[bytes]]: ...


def new_outcome_id() -> str:
    return "outc_" + secrets.token_hex(12)


def define_outcome_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """A validated ``user.define_outcome`` payload as stored: a fresh ``outcome_id`` and the
    effective ``max_iterations``."""
    stored = {"outcome_id": new_outcome_id(), **payload}
    stored.setdefault("max_iterations", DEFAULT_MAX_ITERATIONS)
    return stored


async def prepare_outcomes(
    events: Sequence[NewEvent], store: EventLog, session_id: str | None, files: RubricFiles | None, param: str
) -> list[NewEvent]:
    """Check the batch's ``user.define_outcome`` events against the session (``session_id``
    ``None``: a new one) and resolve file rubrics to their text. ``InvalidRequest`` on a second
    outcome in the batch, an outcome still open, an unreadable rubric file."""
    indexes = [i for i, e in enumerate(events) if e.type == DEFINE_OUTCOME]
    if not indexes:
        return list(events)
    if len(indexes) > 1:
        raise InvalidRequest(f"{param}: at most one user.define_outcome per request", param=param)
    index = indexes[0]
    where = f"{param}[{index}]"
    if session_id is not None:
        for entry in await read_outcome_evaluations(store, session_id):
            if entry["result"] not in TERMINAL_RESULTS:
                raise InvalidRequest(
                    f"{where}: outcome {entry['outcome_id']} is still {entry['result']}; define the next "
                    "outcome once it has ended (or interrupt the session)",
                    param=where,
                )
    event = events[index]
    rubric = event.payload.get("rubric")
    if isinstance(rubric, dict) and rubric.get("type") == "file":
        content = await _rubric_text(str(rubric.get("file_id")), files, f"{where}.rubric.file_id")
        payload = {
            **event.payload,
            "rubric": {"type": "text", "content": content},
            "rubric_file_id": rubric.get("file_id"),
        }
        event = NewEvent(id=event.id, type=event.type, payload=payload)
    return [*events[:index], event, *events[index + 1 :]]


async def _rubric_text(file_id: str, files: RubricFiles | None, where: str) -> str:
    if files is None:
        raise InvalidRequest(f"{where}: files are not served by this control plane", param=where)
    try:
        _, chunks = await files.content(file_id)
    except NotFound:
        raise InvalidRequest(f"{where}: no file {file_id!r}", param=where) from None
    data = bytearray()
    async for chunk in chunks:
        data += chunk
        if len(data) > 4 * MAX_RUBRIC_CHARS:
            break
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidRequest(f"{where}: the rubric file is not UTF-8 text", param=where) from None
    if len(text) > MAX_RUBRIC_CHARS or not text.strip():
        raise InvalidRequest(
            f"{where}: a rubric file must hold 1 to {MAX_RUBRIC_CHARS} characters of text", param=where
        )
    return text


def outcome_evaluations(events: Iterable[Event]) -> list[dict[str, Any]]:
    """The session's ``outcome_evaluations`` from its outcome and ``session.status_running``
    events (in log order), in the SDK's ``BetaManagedAgentsOutcomeEvaluationResource`` shape."""
    entries: dict[str, dict[str, Any]] = {}
    for event in events:
        payload = event.payload
        if event.type == DEFINE_OUTCOME:
            outcome_id = str(payload.get("outcome_id"))
            entries[outcome_id] = {
                "type": "outcome_evaluation",
                "outcome_id": outcome_id,
                "description": str(payload.get("description", "")),
                "iteration": 0,
                "result": "pending",
                "explanation": None,
                "completed_at": None,
            }
            continue
        if event.type == "session.status_running":
            for entry in entries.values():
                if entry["result"] == "pending":
                    entry["result"] = "running"
            continue
        found = entries.get(str(payload.get("outcome_id")))
        if found is None or found["result"] in TERMINAL_RESULTS:
            continue
        iteration = payload.get("iteration")
        iteration = iteration if isinstance(iteration, int) else found["iteration"]
        if event.type == EVALUATION_START:
            found.update(result="evaluating", iteration=iteration)
        elif event.type == EVALUATION_END:
            result = str(payload.get("result"))
            explanation = payload.get("explanation")
            found["explanation"] = explanation if isinstance(explanation, str) else None
            if result == "needs_revision":
                found.update(result="running", iteration=iteration + 1)
            else:
                found.update(result=result, iteration=iteration, completed_at=rfc3339(event.processed_at))
    return list(entries.values())


async def read_outcome_evaluations(store: EventLog, session_id: str) -> list[dict[str, Any]]:
    """The session's ``outcome_evaluations`` (one read when it never had an outcome, two else)."""
    defined = await store.get_events(session_id, types=(DEFINE_OUTCOME,), limit=1)
    if not defined:
        return []
    return outcome_evaluations(await store.get_events(session_id, types=_OUTCOME_EVENTS))
