"""Outcomes as the fold reads them (pure): the outcomes defined in the log and their evaluations.

:class:`OutcomeTracker` is part of :class:`~control_plane.harness.fold.SessionState`. What it
changes in the turn it says to the fold, which applies it:

* ``user.define_outcome`` is input like a ``user.message``: queued, it starts a turn (one per
  turn) and its text goes to the model — the description, then the rubric it will be graded
  against (:func:`outcome_input`);
* ``span.outcome_evaluation_start`` opens an evaluation (a crash before its end grades again,
  under the same start event);
* ``span.outcome_evaluation_end`` closes it. Its ``usage`` (the grader's tokens) counts toward
  the session's usage. ``needs_revision`` and ``max_iterations_reached`` feed the explanation
  back as the next request's user content (:func:`revision_input`) and the model is due again, in
  the same turn; the other results end the outcome.

The outcome the harness works on is the latest defined whose input a turn has consumed and whose
result is not terminal (:meth:`OutcomeTracker.active`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from control_plane.harness import event_drafts as ev
from control_plane.sessions.outcome_evaluations import (
    DEFAULT_MAX_ITERATIONS,
    TERMINAL_RESULTS,
)

__all__ = ["Outcome", "OutcomeTracker", "outcome_input", "revision_input"]

_USAGE_KEYS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


@dataclass(slots=True)
class Outcome:
    """One ``user.define_outcome`` and what became of it."""

    outcome_id: str
    description: str
    rubric: str
    max_iterations: int
    input_blocks: list[dict[str, Any]]  # the queued input (identity says whether a turn took it)
    evaluations: int = 0  # finished evaluations (the next one's iteration)
    open_start: str | None = None  # span.outcome_evaluation_start without its end
    open_iteration: int = 0
    result: str | None = None  # the latest evaluation's result


@dataclass(slots=True)
class OutcomeTracker:
    outcomes: list[Outcome] = field(default_factory=list)
    _by_id: dict[str, Outcome] = field(default_factory=dict)

    def define(self, event: ev.LogEvent) -> list[dict[str, Any]]:
        """Record a ``user.define_outcome``; returns the input blocks to queue."""
        payload = event.payload
        rubric = payload.get("rubric")
        text = str(rubric.get("content", "")) if isinstance(rubric, Mapping) else ""
        iterations = payload.get("max_iterations")
        outcome = Outcome(
            outcome_id=str(payload.get("outcome_id")),
            description=str(payload.get("description", "")),
            rubric=text,
            max_iterations=iterations if isinstance(iterations, int) else DEFAULT_MAX_ITERATIONS,
            input_blocks=[],
        )
        outcome.input_blocks = outcome_input(outcome)
        self.outcomes.append(outcome)
        self._by_id[outcome.outcome_id] = outcome
        return outcome.input_blocks

    def start(self, event: ev.LogEvent) -> None:
        outcome = self._by_id.get(str(event.payload.get("outcome_id")))
        if outcome is not None and outcome.result not in TERMINAL_RESULTS:
            outcome.open_start = event.id
            iteration = event.payload.get("iteration")
            outcome.open_iteration = iteration if isinstance(iteration, int) else outcome.evaluations

    def end(self, event: ev.LogEvent, usage: dict[str, int]) -> list[dict[str, Any]] | None:
        """Close an evaluation, adding the grader's tokens to ``usage``; returns the content to
        feed the model for another iteration, or ``None``."""
        payload = event.payload
        spent = payload.get("usage")
        if isinstance(spent, Mapping):
            for key in _USAGE_KEYS:
                value = spent.get(key)
                if isinstance(value, int):
                    usage[key] = usage.get(key, 0) + value
        outcome = self._by_id.get(str(payload.get("outcome_id")))
        if outcome is None or outcome.result in TERMINAL_RESULTS:
            return None
        outcome.open_start = None
        outcome.evaluations += 1
        outcome.result = str(payload.get("result"))
        if outcome.result in ("needs_revision", "max_iterations_reached"):
            return revision_input(outcome.result, str(payload.get("explanation", "")))
        return None

    def active(self, pending: Collection[list[dict[str, Any]]]) -> Outcome | None:
        """The outcome being worked on: the latest defined, its input taken by a turn (not in
        ``pending``), its result not terminal."""
        if not self.outcomes:
            return None
        latest = self.outcomes[-1]
        if latest.result in TERMINAL_RESULTS or any(p is latest.input_blocks for p in pending):
            return None
        return latest


def outcome_input(outcome: Outcome) -> list[dict[str, Any]]:
    """What the model is given for an outcome: the task, then the rubric it is graded against."""
    return [
        {"type": "text", "text": outcome.description},
        {
            "type": "text",
            "text": (
                "When you end your turn, your work is graded against this rubric; if it falls "
                "short you will be told what to revise.\n<rubric>\n" + outcome.rubric + "\n</rubric>"
            ),
        },
    ]


def revision_input(result: str, explanation: str) -> list[dict[str, Any]]:
    """The grader's explanation as the next iteration's input."""
    if result == "max_iterations_reached":
        head = (
            "[Outcome evaluation: the rubric is still not met and no evaluations are left. Briefly "
            "acknowledge what remains unmet; no further evaluation follows.]"
        )
    else:
        head = "[Outcome evaluation: needs revision. Revise your work to meet the rubric.]"
    return [{"type": "text", "text": f"{head}\n{explanation}"}]
