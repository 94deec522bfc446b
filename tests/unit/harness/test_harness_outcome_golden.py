"""Golden logs of outcomes: recorded session logs with ``user.define_outcome`` and evaluations, and
the decision the step function must make on each (``golden/outcomes/``).

As ``test_harness_golden.py``: ``UPDATE_GOLDEN=1 pytest tests/unit/harness/test_harness_outcome_golden.py``
re-records; review the diff. The evaluation events are built with the harness's own
``evaluation_end_events`` / ``grading_failure_events`` from the step's :class:`GradeOutcome`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from harness_logs import AGENT_JSON, SESSION, Log, text, tool_use

from control_plane.harness import event_drafts as ev
from control_plane.harness.agent import AgentSpec
from control_plane.harness.config import HarnessConfig
from control_plane.harness.outcomes import GradeOutcome, evaluation_end_events, grading_failure_events
from control_plane.harness.step import CallModel, Decision, step
from control_plane.store.base import Event

GOLDEN = Path(__file__).parent / "golden" / "outcomes"
# Pinned, not the shipped defaults: the golden logs record the retry delays and max_tokens this
# config yields (a backoff is a delay written in the log, not waited for), so a change of a
# default must not rewrite them; the defaults run untouched in tests/e2e/test_shipped_defaults.py.
CONFIG = HarnessConfig(model_attempts=3, model_backoff_initial_s=1.0, max_tokens=1024)
RUBRIC = "1. The answer names the capital of France.\n2. It cites a source."
OUTCOME_ID = "outc_0123456789abcdef01234567"


def verdict(result: str, explanation: str) -> dict[str, Any]:
    """A grader's answer: a ``record_verdict`` call."""
    return {
        "id": f"msg_grader_{result}",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [
            tool_use("toolu_verdict", "record_verdict", {"result": result, "explanation": explanation})
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 50, "output_tokens": 9},
    }


def _define(log: Log, max_iterations: int = 3) -> None:
    log.add(
        "user.define_outcome",
        {
            "outcome_id": OUTCOME_ID,
            "description": "What is the capital of France?",
            "rubric": {"type": "text", "content": RUBRIC},
            "max_iterations": max_iterations,
        },
    )


def _grading(log: Log) -> GradeOutcome:
    """Append the step's grading start; returns the grading it asks for."""
    decision = step(log.agent, log.events, CONFIG, log.now)
    assert isinstance(decision.effect, GradeOutcome), decision.reason
    for draft in decision.appends:
        log.draft(draft)
    return decision.effect


def _graded(log: Log, result: str, explanation: str) -> None:
    call = _grading(log)
    usage = {
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
    }
    for draft in evaluation_end_events(call, verdict(result, explanation), usage):
        log.draft(draft)


def _first_turn(log: Log) -> None:
    _define(log)


def _grade_at_end_turn(log: Log) -> None:
    _define(log)
    log.running()
    log.model([text("Paris.")], "end_turn")


def _needs_revision_next_call(log: Log) -> None:
    _grade_at_end_turn(log)
    _graded(log, "needs_revision", "Criterion 2 failed: no source is cited.")


def _satisfied_ends_turn(log: Log) -> None:
    _needs_revision_next_call(log)
    log.model([text("Paris (source: the CIA World Factbook).")], "end_turn")
    _graded(log, "satisfied", "Both criteria are met.")


def _second_grading(log: Log) -> None:
    _needs_revision_next_call(log)
    log.model([text("Paris (source: the CIA World Factbook).")], "end_turn")


def _max_iterations_reached_ack(log: Log) -> None:
    _define(log, max_iterations=1)
    log.running()
    log.model([text("Paris.")], "end_turn")
    _graded(log, "needs_revision", "Criterion 2 failed: no source is cited.")  # the last: reached


def _after_ack_ends_turn(log: Log) -> None:
    _max_iterations_reached_ack(log)
    log.model([text("Understood: the source is still missing.")], "end_turn")


def _crash_while_grading(log: Log) -> None:
    _grade_at_end_turn(log)
    _grading(log)  # the start is in the log, the verdict never came


def _interrupted_while_grading(log: Log) -> None:
    _crash_while_grading(log)
    log.interrupt()


def _grading_retry_after_backoff(log: Log) -> None:
    _grade_at_end_turn(log)
    call = _grading(log)
    failure = grading_failure_events(
        call, CONFIG, error_type="model_overloaded_error", message="overloaded", retryable=True
    )
    for draft in failure:
        log.draft(draft)
    log.now = log.now.replace(second=log.now.second + 5)  # the backoff (1 s) has passed


def _next_message_after_satisfied(log: Log) -> None:
    _satisfied_ends_turn(log)
    log.idle()
    log.user("Thanks! And Spain?")


SCENARIOS: dict[str, Callable[[Log], None]] = {
    "outcome_first_turn": _first_turn,
    "outcome_grade_at_end_turn": _grade_at_end_turn,
    "outcome_needs_revision_next_call": _needs_revision_next_call,
    "outcome_second_grading": _second_grading,
    "outcome_satisfied_ends_turn": _satisfied_ends_turn,
    "outcome_max_iterations_reached_ack": _max_iterations_reached_ack,
    "outcome_after_ack_ends_turn": _after_ack_ends_turn,
    "outcome_crash_while_grading": _crash_while_grading,
    "outcome_interrupted_while_grading": _interrupted_while_grading,
    "outcome_grading_retry_after_backoff": _grading_retry_after_backoff,
    "outcome_next_message_after_satisfied": _next_message_after_satisfied,
}


def decision_json(decision: Decision) -> dict[str, Any]:
    effect: dict[str, Any] | None = None
    if isinstance(decision.effect, CallModel):
        effect = {
            "kind": "call_model",
            "attempt": decision.effect.attempt,
            "request": decision.effect.request,
        }
    elif isinstance(decision.effect, GradeOutcome):
        grade = decision.effect
        effect = {
            "kind": "grade_outcome",
            "outcome_id": grade.outcome_id,
            "iteration": grade.iteration,
            "start_id": grade.start_id,
            "last": grade.last,
            "attempt": grade.attempt,
            "request": grade.request,
        }
    else:
        assert decision.effect is None, decision.effect
    return {
        "appends": [{"type": d.type, "payload": d.payload, "id": d.id} for d in decision.appends],
        "effect": effect,
        "delay_s": decision.delay_s,
    }


def _record(name: str) -> dict[str, Any]:
    agent = AgentSpec.from_json(AGENT_JSON)
    log = Log(agent=agent)
    SCENARIOS[name](log)
    decision = step(agent, log.events, CONFIG, log.now)
    return {
        "scenario": name,
        "agent": AGENT_JSON,
        "now": log.now.isoformat(),
        "events": [
            {"id": e.id, "type": e.type, "payload": e.payload, "processed_at": e.processed_at.isoformat()}
            for e in log.events
        ],
        "expected": decision_json(decision),
    }


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_outcome_golden_log(name: str) -> None:
    path = GOLDEN / f"{name}.json"
    if os.environ.get("UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(_record(name), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    golden = json.loads(path.read_text(encoding="utf-8"))
    events = [
        Event(
            id=e["id"],
            session_id=SESSION,
            seq=i,
            type=e["type"],
            payload=e["payload"],
            processed_at=datetime.fromisoformat(e["processed_at"]),
        )
        for i, e in enumerate(golden["events"], start=1)
    ]
    agent = AgentSpec.from_json(golden["agent"])
    decision = step(agent, events, CONFIG, datetime.fromisoformat(golden["now"]))
    assert decision_json(decision) == golden["expected"]


def test_every_outcome_golden_file_has_a_scenario() -> None:
    assert sorted(p.stem for p in GOLDEN.glob("*.json")) == sorted(SCENARIOS)


def _decided(name: str) -> Decision:
    log = Log(agent=AgentSpec.from_json(AGENT_JSON))
    SCENARIOS[name](log)
    return step(log.agent, log.events, CONFIG, log.now)


def test_what_the_goldens_mean() -> None:
    """The decisions, said plainly (the golden files hold the whole requests)."""
    first = _decided("outcome_first_turn")
    assert [d.type for d in first.appends] == [ev.SESSION_STATUS_RUNNING]
    assert isinstance(first.effect, CallModel)
    sent = json.dumps(first.effect.request["messages"])
    assert "capital of France" in sent and "It cites a source" in sent

    grade = _decided("outcome_grade_at_end_turn")
    assert [(d.type, d.payload) for d in grade.appends] == [
        ("span.outcome_evaluation_start", {"outcome_id": OUTCOME_ID, "iteration": 0})
    ]
    assert isinstance(grade.effect, GradeOutcome) and grade.effect.start_id == grade.appends[0].id
    assert grade.effect.request["tool_choice"] == {"type": "tool", "name": "record_verdict"}
    assert RUBRIC in grade.effect.request["system"] and not grade.effect.last

    revise = _decided("outcome_needs_revision_next_call")
    assert isinstance(revise.effect, CallModel) and not revise.appends
    assert "no source is cited" in json.dumps(revise.effect.request["messages"][-1])

    second = _decided("outcome_second_grading")
    assert isinstance(second.effect, GradeOutcome) and second.effect.iteration == 1
    assert second.appends[0].id != grade.appends[0].id

    assert [d.type for d in _decided("outcome_satisfied_ends_turn").appends] == [ev.SESSION_STATUS_IDLE]
    ack = _decided("outcome_max_iterations_reached_ack")
    assert isinstance(ack.effect, CallModel) and "no evaluations are left" in json.dumps(ack.effect.request)
    assert [d.payload for d in _decided("outcome_after_ack_ends_turn").appends] == [
        {"stop_reason": {"type": "end_turn"}}
    ]

    crash = _decided("outcome_crash_while_grading")
    assert not crash.appends and isinstance(crash.effect, GradeOutcome)
    interrupted = _decided("outcome_interrupted_while_grading")
    assert [(d.type, d.payload.get("result")) for d in interrupted.appends] == [
        ("span.outcome_evaluation_end", "interrupted"),
        (ev.SESSION_STATUS_IDLE, None),
    ]
    retry = _decided("outcome_grading_retry_after_backoff")
    assert [d.type for d in retry.appends] == [ev.SESSION_STATUS_RUNNING]
    assert isinstance(retry.effect, GradeOutcome) and retry.effect.attempt == 2

    after = _decided("outcome_next_message_after_satisfied")
    assert isinstance(after.effect, CallModel)  # a plain turn: the outcome is over
