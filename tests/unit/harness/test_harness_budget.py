"""The step's budget decisions beyond the golden logs (``test_harness_golden.py``, ``budget_*``)."""

from __future__ import annotations

from typing import Any

from harness_logs import AGENT_JSON, Log, text

from control_plane.harness import event_drafts as ev
from control_plane.harness.agent import AgentSpec
from control_plane.harness.config import HarnessConfig
from control_plane.harness.step import step
from control_plane.sessions.usage import Budget


# -- the step's decision ----------------------------------------------------------------------------
def _tool_results_in(agent_json: dict[str, Any]) -> Log:
    log = Log(agent=AgentSpec.from_json(agent_json))
    log.user("What is in /work?")
    log.running()
    log.model(
        [text("Listing it."), {"type": "tool_use", "id": "t1", "name": "bash", "input": {}}], "tool_use"
    )
    tool_id = next(e.id for e in log.events if e.type == ev.AGENT_TOOL_USE)
    log.result(tool_id, "README.md")
    return log


def test_a_model_without_price_reaches_any_budget() -> None:
    log = _tool_results_in(AGENT_JSON)  # claude-test: not in the shipped table
    decision = step(log.agent, log.events, HarnessConfig(), log.now, budget=Budget(10**9))
    assert [d.type for d in decision.appends] == [ev.SESSION_STATUS_IDLE]
    assert decision.appends[0].payload == {"stop_reason": {"type": "budget_reached"}}
    assert decision.effect is None
    assert step(log.agent, log.events, HarnessConfig(), log.now).effect is not None  # no budget: go on


def test_a_removed_budget_lets_the_model_be_called() -> None:
    log = _tool_results_in(AGENT_JSON)
    log.add(ev.SESSION_UPDATED, {"budget": None})
    decision = step(log.agent, log.events, HarnessConfig(), log.now, budget=Budget(1))
    assert decision.effect is not None
