"""Outcomes, the harness side (pure): when to grade, the grader's request, the events of a verdict.

When the agent ends its turn while an outcome is open (:mod:`~control_plane.harness.outcome_state`),
the step decides to grade (:func:`next_action`): it appends ``span.outcome_evaluation_start``
(``outcome_id``, the 0-indexed ``iteration``) and asks the driver for a :class:`GradeOutcome`: one
request to the agent's model with a grader system prompt holding the rubric, the work as a bounded
transcript (the task, then the conversation's tail: texts, tool calls, tool results cut short),
and one tool the grader must call (``record_verdict``: ``result`` ``satisfied`` |
``needs_revision`` | ``failed``, ``explanation``). The driver records the answer
(:func:`evaluation_end_events`: ``span.outcome_evaluation_end`` with the grader's ``usage``, then
the cumulative ``session.usage``) before anything acts on it:

* ``needs_revision`` with evaluations left: the explanation is the next iteration's input and the
  model is called again in the same turn;
* ``needs_revision`` on the last evaluation (``max_iterations``): recorded as
  ``max_iterations_reached``; one final turn acknowledges it, then the session goes idle;
* ``satisfied`` / ``failed``: the turn ends (``end_turn``).

Crash-safe as model requests are: the start event goes in with the decision (``expected_seq``);
a harness that restarts before the end event grades again under the same start (the start's id
is derived from the outcome and the iteration, so it is the same on a replay); after the end
event, the verdict is acted on and never graded again. A retryable model error reschedules the
grading (``session.error`` ``retrying``, backoff, graded again); the last attempt's failure, or a
terminal one, is the verdict ``failed``. ``user.interrupt`` while grading: ``interrupted``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from control_plane.harness import event_drafts as ev
from control_plane.harness.agent import AgentSpec
from control_plane.harness.config import HarnessConfig
from control_plane.harness.fold import SessionState
from control_plane.harness.outcome_state import Outcome
from control_plane.sessions.outcome_evaluations import EVALUATION_END, EVALUATION_ONGOING, EVALUATION_START
from control_plane.sessions.usage import Budget, ModelPrice, usage_snapshot

__all__ = [
    "ONGOING_INTERVAL_S",
    "VERDICT_TOOL",
    "GradeOutcome",
    "evaluation_end_events",
    "grader_request",
    "grading_failure_events",
    "interrupted_evaluation",
    "next_action",
    "ongoing_event",
    "parse_verdict",
    "regrade",
]

VERDICT_TOOL = "record_verdict"
ONGOING_INTERVAL_S = 10.0  # between ``span.outcome_evaluation_ongoing`` heartbeats while grading
_TRANSCRIPT_CHARS = 60_000  # the work shown to the grader: the conversation's tail, at most this
_RESULT_CHARS = 2_000  # of each tool result
_GRADER_MAX_TOKENS = 2_048
_VERDICTS = ("satisfied", "needs_revision", "failed")
_ZERO_USAGE = {
    "input_tokens": 0,
    "output_tokens": 0,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 0,
}
_GRADER_SYSTEM = (
    "You are a strict grader. You judge whether an agent's work meets a rubric. Read the task, the "
    "rubric and the transcript of the agent's work, then call the record_verdict tool exactly once: "
    "result 'satisfied' if every criterion of the rubric is met, 'needs_revision' if some are not "
    "(the explanation says which criteria failed and why, so the agent can revise), or 'failed' if "
    "the rubric cannot apply to the work at all.\n<rubric>\n"
)


@dataclass(frozen=True, slots=True)
class GradeOutcome:
    """Ask the grader about iteration ``iteration`` of ``outcome_id`` (its start event:
    ``start_id``). ``last``: no evaluation follows this one (``needs_revision`` becomes
    ``max_iterations_reached``). ``attempt`` counts from 1 within a failure streak."""

    outcome_id: str
    iteration: int
    start_id: str
    request: dict[str, Any]
    last: bool
    attempt: int = 1


def next_action(
    agent: AgentSpec, s: SessionState, config: HarnessConfig
) -> tuple[tuple[ev.Draft, ...], GradeOutcome | None, str] | None:
    """At the end of a turn: ``(appends, effect, reason)`` when an outcome is open, else ``None``
    (the turn ends as without outcomes)."""
    outcome = s.outcomes.active(s.pending_inputs)
    if outcome is None:
        return None
    if outcome.open_start is not None:
        again = _grade(agent, s, config, outcome, outcome.open_start, outcome.open_iteration)
        return (), again, "grade again"
    if s.budget is not None and s.budget.reached(s.usage, config.price_of(agent.model)):
        return (ev.status_idle("budget_reached"),), None, "budget reached before grading"
    iteration = outcome.evaluations
    start_id = _start_id(outcome.outcome_id, iteration)
    start = ev.Draft(EVALUATION_START, {"outcome_id": outcome.outcome_id, "iteration": iteration}, start_id)
    return (start,), _grade(agent, s, config, outcome, start_id, iteration), "grade outcome"


def regrade(agent: AgentSpec, s: SessionState, config: HarnessConfig) -> GradeOutcome | None:
    """After a failed grading's backoff: grade again under the open start (``None``: none open)."""
    outcome = s.outcomes.active(s.pending_inputs)
    if outcome is None or outcome.open_start is None:
        return None
    return _grade(agent, s, config, outcome, outcome.open_start, outcome.open_iteration)


def interrupted_evaluation(s: SessionState) -> tuple[ev.Draft, ...]:
    """The end of an evaluation the user interrupted (nothing when none is open)."""
    outcome = s.outcomes.active(s.pending_inputs)
    if outcome is None or outcome.open_start is None:
        return ()
    explanation = "The user interrupted the session while the outcome was being evaluated."
    return (_end(outcome.outcome_id, outcome.open_start, outcome.open_iteration, "interrupted", explanation),)


def _start_id(outcome_id: str, iteration: int) -> str:
    """The start event's id: unique in the session (the outcome id is random), and the same on a
    replay of the same log."""
    digest = hashlib.sha256(f"{outcome_id}/{iteration}/start".encode()).hexdigest()
    return "sevt_" + digest[:24]


def _grade(
    agent: AgentSpec, s: SessionState, config: HarnessConfig, outcome: Outcome, start_id: str, iteration: int
) -> GradeOutcome:
    return GradeOutcome(
        outcome_id=outcome.outcome_id,
        iteration=iteration,
        start_id=start_id,
        request=grader_request(agent, s, outcome),
        last=iteration + 1 >= outcome.max_iterations,
        attempt=s.failures + 1,
    )


def grader_request(agent: AgentSpec, s: SessionState, outcome: Outcome) -> dict[str, Any]:
    """The Messages request that asks the grader for a verdict through ``record_verdict``."""
    transcript = _transcript(s.conversation())
    prompt = (
        f"<task>\n{outcome.description}\n</task>\n<transcript>\n{transcript}\n</transcript>\n"
        f"Grade the work against the rubric and call {VERDICT_TOOL}."
    )
    tool = {
        "name": VERDICT_TOOL,
        "description": "Record the verdict on the agent's work.",
        "input_schema": {
            "type": "object",
            "properties": {
                "result": {"type": "string", "enum": list(_VERDICTS)},
                "explanation": {"type": "string"},
            },
            "required": ["result", "explanation"],
        },
    }
    return {
        "model": agent.model,
        "max_tokens": _GRADER_MAX_TOKENS,
        "system": _GRADER_SYSTEM + outcome.rubric + "\n</rubric>",
        "messages": [{"role": "user", "content": [{"type": "text", "text": prompt}]}],
        "tools": [tool],
        "tool_choice": {"type": "tool", "name": VERDICT_TOOL},
    }


def _transcript(messages: Sequence[Mapping[str, Any]]) -> str:
    """The conversation as text, its tail only (at most ``_TRANSCRIPT_CHARS``)."""
    parts: list[str] = []
    size = 0
    for message in reversed(messages):
        role = "Agent" if message.get("role") == "assistant" else "User"
        lines = [_block_text(role, b) for b in message.get("content") or () if isinstance(b, Mapping)]
        text = "\n".join(line for line in lines if line)
        if size + len(text) > _TRANSCRIPT_CHARS:
            parts.append("[earlier work omitted]")
            break
        parts.append(text)
        size += len(text)
    return "\n\n".join(reversed(parts))


def _block_text(role: str, block: Mapping[str, Any]) -> str:
    kind = block.get("type")
    if kind == "text":
        return f"{role}: {block.get('text', '')}"
    if kind == "tool_use":
        called = json.dumps(block.get("input"), ensure_ascii=False)[:_RESULT_CHARS]
        return f"Agent called {block.get('name')}: {called}"
    if kind == "tool_result":
        content = block.get("content")
        texts = [c for c in content or () if isinstance(c, Mapping) and c.get("type") == "text"]
        result = "\n".join(str(c.get("text", "")) for c in texts)
        if len(result) > _RESULT_CHARS:
            result = result[:_RESULT_CHARS] + " [cut]"
        error = " (error)" if block.get("is_error") else ""
        return f"Tool result{error}: {result}"
    return ""


def parse_verdict(message: Mapping[str, Any]) -> tuple[str, str]:
    """``(result, explanation)`` from the grader's answer: its ``record_verdict`` call (else a JSON
    object in its text); an answer without a verdict is ``failed``."""
    for block in message.get("content") or ():
        if not isinstance(block, Mapping) or block.get("type") != "tool_use":
            continue
        if block.get("name") == VERDICT_TOOL:
            verdict = _verdict(block.get("input"))
            if verdict is not None:
                return verdict
    for block in message.get("content") or ():
        if isinstance(block, Mapping) and block.get("type") == "text":
            try:
                verdict = _verdict(json.loads(str(block.get("text", ""))))
            except ValueError:
                continue
            if verdict is not None:
                return verdict
    return "failed", "The grader gave no verdict."


def _verdict(data: Any) -> tuple[str, str] | None:
    if not isinstance(data, Mapping) or data.get("result") not in _VERDICTS:
        return None
    return str(data["result"]), str(data.get("explanation") or "")


def _end(
    outcome_id: str,
    start_id: str,
    iteration: int,
    result: str,
    explanation: str,
    usage: Mapping[str, int] | None = None,
) -> ev.Draft:
    payload = {
        "outcome_id": outcome_id,
        "outcome_evaluation_start_id": start_id,
        "iteration": iteration,
        "result": result,
        "explanation": explanation,
        "usage": dict(usage or _ZERO_USAGE),
    }
    return ev.Draft(EVALUATION_END, payload)


def evaluation_end_events(
    call: GradeOutcome,
    message: Mapping[str, Any],
    usage_before: Mapping[str, int],
    *,
    price: ModelPrice | None = None,
    budget: Budget | None = None,
) -> tuple[ev.Draft, ...]:
    """The events of a finished grading, appended together: ``span.outcome_evaluation_end``
    (``needs_revision`` on the last evaluation becomes ``max_iterations_reached``), then the
    cumulative ``session.usage`` (the grader's tokens count)."""
    result, explanation = parse_verdict(message)
    if result == "needs_revision" and call.last:
        result = "max_iterations_reached"
    raw = message.get("usage")
    raw = raw if isinstance(raw, Mapping) else {}
    usage = {k: int(raw.get(k) or 0) for k in _ZERO_USAGE}
    end = _end(call.outcome_id, call.start_id, call.iteration, result, explanation, usage)
    total = {k: int(usage_before.get(k, 0)) + usage[k] for k in usage}
    snapshot = {"usage": usage_snapshot(total, price), "budget": budget.to_json() if budget else None}
    return end, ev.Draft(ev.SESSION_USAGE, snapshot)


def grading_failure_events(
    call: GradeOutcome, config: HarnessConfig, *, error_type: str, message: str, retryable: bool
) -> tuple[ev.Draft, ...]:
    """A failed grader request: retryable with attempts left, ``session.error`` (``retrying``) and
    ``session.status_rescheduled`` (graded again after the backoff); else the verdict ``failed`` and
    the turn's end."""
    if retryable and call.attempt < config.model_attempts:
        return ev.session_error(error_type, message, "retrying"), ev.Draft(ev.SESSION_STATUS_RESCHEDULED)
    explanation = f"The grader's model request failed ({error_type}): {message}"
    end = _end(call.outcome_id, call.start_id, call.iteration, "failed", explanation)
    return end, ev.status_idle("end_turn")


def ongoing_event(call: GradeOutcome) -> ev.Draft:
    """The heartbeat appended while a grading runs."""
    return ev.Draft(EVALUATION_ONGOING, {"outcome_id": call.outcome_id, "iteration": call.iteration})
