"""Golden logs: recorded session logs and the decision the step function must make on each.

Each file in ``golden/`` holds an agent, a log and the expected decision; the test replays the log
through ``step`` and compares. A change in behaviour shows up as a diff of these files. To
re-record after an intended change: ``UPDATE_GOLDEN=1 pytest tests/unit/harness`` and review the
diff of ``golden/`` (only new scenarios: ``-k name``; existing files must not change). The logs
after a toolset call are built with the step's own ``tool_outcome_events`` (its cases:
``test_harness_tool_outcomes.py``). A scenario of a session created with a budget records it
(``budget``); the log's ``session.updated`` events may change it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from harness_logs import (
    AGENT_JSON,
    DOCS_DOWN,
    MCP_AGENT,
    MCP_AGENT_JSON,
    SESSION,
    TICKETS_TOOLS,
    Log,
    message,
    text,
    tool_use,
)

from control_plane.harness import event_drafts as ev
from control_plane.harness.agent import AgentSpec
from control_plane.harness.compaction import CompactionPlan, compaction_events
from control_plane.harness.config import HarnessConfig
from control_plane.harness.fold import fold
from control_plane.harness.mcp_offer import McpOffer, build_offer
from control_plane.harness.step import (
    CallModel,
    Decision,
    DispatchMcpTool,
    DispatchTool,
    ToolAnswered,
    ToolCallFailed,
    step,
    tool_outcome_events,
)
from control_plane.mcp.models import McpToolInfo, ServerTools
from control_plane.sessions.usage import Budget, ModelPrice
from control_plane.store.base import Event
from control_plane.tunnel import SandboxMove
from outpost_wire.errors import ErrorCode, RemoteError
from outpost_wire.results import ToolResult

GOLDEN = Path(__file__).parent / "golden"
# The test model's list prices are deliberately high, so a short log reaches a small budget: a
# request of ``harness_logs.message`` (100 input, 7 output tokens) costs 1.35 cents.
TEST_PRICE = ModelPrice(
    input_usd_per_mtok=100, output_usd_per_mtok=500, cache_write_usd_per_mtok=125, cache_read_usd_per_mtok=10
)
# Pinned, not the shipped defaults: the golden logs record the retry delays, max_tokens and prices
# this config yields (a backoff is a delay written in the log, not waited for), so a change of a
# default must not rewrite them; the defaults run untouched in tests/e2e/test_shipped_defaults.py.
CONFIG = HarnessConfig(
    model_attempts=3, model_backoff_initial_s=1.0, max_tokens=1024, model_prices={"claude-test": TEST_PRICE}
)


def _first_turn_start(log: Log) -> None:
    log.user("Summarize the repo.")


def _first_turn_model_call(log: Log) -> None:
    log.user("Summarize the repo.")
    log.running()


def _tool_use_dispatch(log: Log) -> None:
    log.user("What is in /work?")
    log.running()
    log.model([text("Listing it."), tool_use("toolu_01", "bash", {"command": "ls /work"})], "tool_use")


def _tool_result_next_call(log: Log) -> None:
    _tool_use_dispatch(log)
    tool_id = next(e.id for e in log.events if e.type == ev.AGENT_TOOL_USE)
    log.result(tool_id, "README.md\nsrc")


def _dispatched(log: Log) -> DispatchTool:
    """The toolset call the step dispatches after :func:`_tool_use_dispatch`."""
    _tool_use_dispatch(log)
    decision = step(log.agent, log.events, CONFIG, log.now)
    assert isinstance(decision.effect, DispatchTool) and not decision.appends
    return decision.effect


def _sandbox_moved_next_call(log: Log) -> None:
    call = _dispatched(log)
    move = SandboxMove("edge-a", "edge-b", "edge edge-a disconnected")
    for draft in tool_outcome_events(call, ToolAnswered(ToolResult.text("README.md\nsrc")), move):
        log.draft(draft)


def _repository_error_next_call(log: Log) -> None:
    call = _dispatched(log)
    failure = RemoteError(
        ErrorCode.REPOSITORY_AUTHENTICATION_FAILED, "repository https://git.internal/a.git: 401"
    )
    for draft in tool_outcome_events(call, ToolCallFailed.of(failure)):
        log.draft(draft)


def _resume_finished_turn(log: Log) -> None:
    _tool_result_next_call(log)
    log.model([text("It holds a README and src.")], "end_turn")


def _custom_tool_requires_action(log: Log) -> None:
    log.user("Status of ticket 7?")
    log.running()
    log.model([tool_use("toolu_02", "lookup_ticket", {"id": "7"})], "tool_use")


def _custom_tool_answered(log: Log) -> None:
    _custom_tool_requires_action(log)
    tool_id = next(e.id for e in log.events if e.type == ev.AGENT_CUSTOM_TOOL_USE)
    log.idle("requires_action", [tool_id])
    log.custom_result(tool_id, "open, assigned to Ana")


def _always_ask(log: Log) -> None:
    log.user("Create notes.md")
    log.running()
    ids = log.model([tool_use("toolu_03", "write", {"file_path": "notes.md", "content": "hi"})], "tool_use")
    log.idle("requires_action", ids)


def _always_ask_allow(log: Log) -> None:
    _always_ask(log)
    tool_id = next(e.id for e in log.events if e.type == ev.AGENT_TOOL_USE)
    log.confirm(tool_id, "allow")
    log.running()


def _always_ask_deny(log: Log) -> None:
    _always_ask(log)
    tool_id = next(e.id for e in log.events if e.type == ev.AGENT_TOOL_USE)
    log.confirm(tool_id, "deny", "Do not write files today.")


def _interrupt_mid_tool(log: Log) -> None:
    _tool_use_dispatch(log)
    log.interrupt()


def _two_messages_second_turn(log: Log) -> None:
    log.user("First question.")
    log.user("Second question.")
    log.running()
    log.model([text("First answer.")], "end_turn")
    log.idle()
    log.running()


def _retry_after_backoff(log: Log) -> None:
    log.user("Hello?")
    log.running()
    log.failed_model("retrying")


def _retries_exhausted(log: Log) -> None:
    _retry_after_backoff(log)
    log.running()
    log.failed_model("retrying")
    log.running()
    log.failed_model("exhausted")


def _crash_open_span(log: Log) -> None:
    log.user("Hello?")
    log.running()
    log.add(ev.SPAN_MODEL_REQUEST_START)


# -- budgets (the session's budget at creation is in ``BUDGETS``) -------------------------------
def _budget_reached_tool_results_in(log: Log) -> None:
    _tool_result_next_call(log)  # one request made: 1.35 cents, at or above the budget of 1 cent


def _budget_not_reached_tool_results_in(log: Log) -> None:
    _tool_result_next_call(log)  # 1.35 cents of 10


def _budget_reached_queued_input(log: Log) -> None:
    log.user("First question.")
    log.running()
    log.model([text("First answer.")], "end_turn")
    log.user("Second question.")  # queued during the turn
    log.idle()
    log.user("Third question.")


def _budget_raised_continues(log: Log) -> None:
    _budget_reached_queued_input(log)
    log.running()
    log.idle("budget_reached")  # the second and third questions are flushed into the conversation
    log.add(ev.SESSION_UPDATED, {"budget": Budget(100).to_json()})
    log.user("Go on, please.")


BUDGETS: dict[str, Budget] = {
    "budget_reached_tool_results_in": Budget(1),
    "budget_not_reached_tool_results_in": Budget(10),
    "budget_reached_queued_input": Budget(1),
    "budget_raised_continues": Budget(1),
}


# -- context beyond the window (a small budget, recorded in the golden file as ``config``) --------
# The agent's system prompt and tools take ~660 tokens; a budget of 2,000 tokens is outgrown by two
# tool results of 3,000 characters (the logs' replies report 100 input tokens: the calibrated
# ratio is clamped at 4 characters per token).
CONTEXT_CONFIG: dict[str, Any] = {"context_windows": {"claude-test": 2000 + 1024}, "context_margin_tokens": 0}


def _two_long_results(log: Log) -> None:
    log.user("Read the logs.")
    log.running()
    for name in ("a", "b"):
        ids = log.model([tool_use(f"toolu_{name}", "bash", {"command": f"cat {name}.log"})], "tool_use")
        log.result(ids[0], f"{name}.log: " + "x" * 3000)


def _context_compaction_after(log: Log) -> None:
    _two_long_results(log)
    start = log.add(ev.SPAN_MODEL_REQUEST_START)
    reply = message([text("Summary: a.log holds 3000 x.")], "end_turn", output_tokens=9)
    for draft in compaction_events(CompactionPlan(3, api=False), reply, start, fold(log.events).usage):
        log.draft(draft)


def _context_tool_result_cut(log: Log) -> None:
    log.user("Read the log.")
    log.running()
    ids = log.model([tool_use("toolu_a", "bash", {"command": "cat a.log"})], "tool_use")
    log.result(ids[0], "a.log: " + "x" * 12_000)


def _context_limit_reached(log: Log) -> None:
    log.user("y " * 5000)


def _five_results(log: Log) -> None:
    """Five tool results of ~250 tokens: over the trigger (80 %), not the budget; two may be cleared."""
    log.user("Read the logs.")
    log.running()
    for name in "abcde":
        ids = log.model([tool_use(f"toolu_{name}", "bash", {"command": f"cat {name}.log"})], "tool_use")
        log.result(ids[0], f"{name}.log: " + "x" * 1000)


CONTEXT_SCENARIOS: dict[str, Callable[[Log], None]] = {
    "context_old_tool_results_cleared": _five_results,
    "context_edits_server_side": _five_results,
    "context_over_budget_compacts": _two_long_results,
    "context_over_budget_compaction_api": _two_long_results,
    "context_after_compaction_next_call": _context_compaction_after,
    "context_tool_result_cut": _context_tool_result_cut,
    "context_limit_reached": _context_limit_reached,
}
CONTEXT_CONFIGS: dict[str, dict[str, Any]] = {name: dict(CONTEXT_CONFIG) for name in CONTEXT_SCENARIOS} | {
    "context_over_budget_compaction_api": CONTEXT_CONFIG | {"compaction_api_models": ["claude-test"]},
    "context_edits_server_side": CONTEXT_CONFIG | {"context_edit_models": ["claude-test"]},
}


# -- MCP scenarios (the MCP agent; the servers' listings are part of the golden file) -------------
MCP_LISTINGS = [TICKETS_TOOLS, DOCS_DOWN]


def _mcp_offer() -> McpOffer:
    return build_offer(MCP_AGENT, MCP_LISTINGS)


def _mcp_first_call(log: Log) -> None:
    log.user("Is ticket 7 open?")


def _mcp_tool_use_dispatch(log: Log) -> None:
    log.user("Is ticket 7 open?")
    log.running()
    log.draft(ev.mcp_server_error("mcp_connection_failed_error", "docs", "cannot connect"))  # reported
    log.model([tool_use("toolu_11", "mcp__tickets__lookup_ticket", {"id": "7"})], "tool_use", _mcp_offer())


def _mcp_tool_result_next_call(log: Log) -> None:
    _mcp_tool_use_dispatch(log)
    use_id = next(e.id for e in log.events if e.type == ev.AGENT_MCP_TOOL_USE)
    log.draft(
        ev.mcp_tool_result(
            use_id,
            [text("open")],
            is_error=False,
            server="tickets",
            tool="lookup_ticket",
            outcome="ok",
            latency_ms=4.0,
        )
    )


def _mcp_always_ask_deny(log: Log) -> None:
    log.user("Close ticket 7.")
    log.running()
    ids = log.model(
        [tool_use("toolu_12", "mcp__tickets__close_ticket", {"id": "7"})], "tool_use", _mcp_offer()
    )
    log.idle("requires_action", ids)
    log.confirm(ids[0], "deny", "Leave it open.")


MCP_SCENARIOS: dict[str, Callable[[Log], None]] = {
    "mcp_first_call": _mcp_first_call,
    "mcp_tool_use_dispatch": _mcp_tool_use_dispatch,
    "mcp_tool_result_next_call": _mcp_tool_result_next_call,
    "mcp_always_ask_deny": _mcp_always_ask_deny,
}

SCENARIOS: dict[str, Callable[[Log], None]] = {
    "first_turn_start": _first_turn_start,
    "first_turn_model_call": _first_turn_model_call,
    "tool_use_dispatch": _tool_use_dispatch,
    "tool_result_next_call": _tool_result_next_call,
    "sandbox_moved_next_call": _sandbox_moved_next_call,
    "repository_error_next_call": _repository_error_next_call,
    "resume_finished_turn": _resume_finished_turn,
    "custom_tool_requires_action": _custom_tool_requires_action,
    "custom_tool_answered": _custom_tool_answered,
    "always_ask_allow": _always_ask_allow,
    "always_ask_deny": _always_ask_deny,
    "interrupt_mid_tool": _interrupt_mid_tool,
    "two_messages_second_turn": _two_messages_second_turn,
    "retry_after_backoff": _retry_after_backoff,
    "retries_exhausted": _retries_exhausted,
    "crash_open_span": _crash_open_span,
    "budget_reached_tool_results_in": _budget_reached_tool_results_in,
    "budget_not_reached_tool_results_in": _budget_not_reached_tool_results_in,
    "budget_reached_queued_input": _budget_reached_queued_input,
    "budget_raised_continues": _budget_raised_continues,
    **MCP_SCENARIOS,
    **CONTEXT_SCENARIOS,
}


def decision_json(decision: Decision) -> dict[str, Any]:
    effect: dict[str, Any] | None = None
    if isinstance(decision.effect, CallModel):
        effect = {
            "kind": "call_model",
            "attempt": decision.effect.attempt,
            "first_of_turn": decision.effect.first_of_turn,
            "provision": decision.effect.provision,
            "request": decision.effect.request,
        }
        if decision.effect.cleared is not None:
            effect["cleared_tool_results"] = decision.effect.cleared.to_json()
        if decision.effect.compaction is not None:
            effect["compaction"] = {
                "messages": decision.effect.compaction.messages,
                "api": decision.effect.compaction.api,
            }
    elif isinstance(decision.effect, DispatchTool):
        effect = {
            "kind": "dispatch_tool",
            "tool_use_id": decision.effect.tool_use_id,
            "name": decision.effect.name,
            "input": decision.effect.input,
        }
    elif isinstance(decision.effect, DispatchMcpTool):
        effect = {
            "kind": "dispatch_mcp_tool",
            "tool_use_id": decision.effect.tool_use_id,
            "server": decision.effect.server,
            "tool": decision.effect.tool,
            "input": decision.effect.input,
        }
    return {
        "appends": [{"type": d.type, "payload": d.payload, "id": d.id} for d in decision.appends],
        "effect": effect,
        "delay_s": decision.delay_s,
    }


def listings_json(listings: list[ServerTools]) -> list[dict[str, Any]]:
    return [
        {
            "server": s.server,
            "tools": [
                {"name": t.name, "description": t.description, "input_schema": t.input_schema}
                for t in s.tools
            ],
            "error_type": s.error_type,
            "message": s.message,
        }
        for s in listings
    ]


def listings_from_json(data: list[dict[str, Any]]) -> list[ServerTools]:
    return [
        ServerTools(
            s["server"],
            tuple(McpToolInfo(t["name"], t["description"], t["input_schema"]) for t in s["tools"]),
            s["error_type"],
            s["message"],
        )
        for s in data
    ]


def _record(name: str) -> dict[str, Any]:
    mcp = name in MCP_SCENARIOS
    agent_json = MCP_AGENT_JSON if mcp else AGENT_JSON
    agent = AgentSpec.from_json(agent_json)
    log = Log(agent=agent)
    SCENARIOS[name](log)
    offer = build_offer(agent, MCP_LISTINGS) if mcp else None
    budget = BUDGETS.get(name)
    config = CONFIG.model_copy(update=CONTEXT_CONFIGS.get(name, {}))
    decision = step(agent, log.events, config, log.now, offer, budget)
    recorded: dict[str, Any] = {
        "scenario": name,
        "agent": agent_json,
        "now": log.now.isoformat(),
        "events": [
            {"id": e.id, "type": e.type, "payload": e.payload, "processed_at": e.processed_at.isoformat()}
            for e in log.events
        ],
        "expected": decision_json(decision),
    }
    if mcp:
        recorded["mcp_listings"] = listings_json(MCP_LISTINGS)
    if budget is not None:
        recorded["budget"] = budget.to_json()
    if name in CONTEXT_CONFIGS:
        recorded["config"] = CONTEXT_CONFIGS[name]
    return recorded


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_golden_log(name: str) -> None:
    path = GOLDEN / f"{name}.json"
    if os.environ.get("UPDATE_GOLDEN"):
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
    offer = (
        build_offer(agent, listings_from_json(golden["mcp_listings"])) if "mcp_listings" in golden else None
    )
    budget = Budget.from_json(golden.get("budget"))
    config = CONFIG.model_copy(update=golden.get("config", {}))
    decision = step(agent, events, config, datetime.fromisoformat(golden["now"]), offer, budget)
    assert decision_json(decision) == golden["expected"]


def test_every_golden_file_has_a_scenario() -> None:
    assert sorted(p.stem for p in GOLDEN.glob("*.json")) == sorted(SCENARIOS)
