"""The step function with MCP tools: offering them, recording their use, permissions, resume."""

from __future__ import annotations

from typing import Any

from harness_logs import DOCS_DOWN, DOCS_TOOLS, MCP_AGENT, TICKETS_TOOLS, Log, text, tool_use

from control_plane.harness import event_drafts as ev
from control_plane.harness.config import HarnessConfig
from control_plane.harness.fold import fold
from control_plane.harness.mcp_offer import McpOffer, build_offer, servers_to_list
from control_plane.harness.step import CallModel, Decision, DispatchMcpTool, step
from control_plane.mcp.models import ServerTools

CONFIG = HarnessConfig(model_attempts=3, model_backoff_initial_s=1.0, max_tokens=1000)
OFFER = build_offer(MCP_AGENT, [TICKETS_TOOLS, DOCS_TOOLS])


def mcp_log() -> Log:
    return Log(agent=MCP_AGENT)


def decide(log: Log, mcp: McpOffer | None = None) -> Decision:
    return step(log.agent, log.events, CONFIG, log.now, mcp)


def call(decision: Decision) -> CallModel:
    assert isinstance(decision.effect, CallModel), decision
    return decision.effect


def tool_names(decision: Decision) -> list[str]:
    return [t["name"] for t in call(decision).request["tools"]]


def events_of(log: Log, type: str) -> list[Any]:
    return [e for e in log.events if e.type == type]


def started(log: Log, prompt: str = "Close ticket 7.") -> None:
    log.user(prompt)
    log.running()


# -- offering ---------------------------------------------------------------------------------------


def test_mcp_tools_sit_between_the_toolset_and_custom_tools_sorted_and_filtered() -> None:
    log = mcp_log()
    log.user("hi")
    decision = decide(log, OFFER)
    assert [d.type for d in decision.appends] == [ev.SESSION_STATUS_RUNNING]
    assert tool_names(decision) == [
        "bash",
        "mcp__tickets__close_ticket",  # each server's tools by name; delete_ticket is disabled
        "mcp__tickets__lookup_ticket",
        "mcp__docs__fetch_page",
        "mcp__docs__search",
        "lookup_ticket",
    ]
    tools = call(decision).request["tools"]
    assert tools[1] == {
        "name": "mcp__tickets__close_ticket",
        "description": "Close a ticket.",
        "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
    }
    assert "description" not in tools[3]  # fetch_page has none
    assert [("cache_control" in t) for t in tools] == [False] * 5 + [True]
    assert call(decision).mcp is OFFER


def test_the_order_is_stable_whatever_order_the_servers_list_in() -> None:
    shuffled = [
        ServerTools("docs", tuple(reversed(DOCS_TOOLS.tools))),
        ServerTools("tickets", tuple(reversed(TICKETS_TOOLS.tools))),
    ]
    assert build_offer(MCP_AGENT, shuffled) == OFFER
    assert build_offer(MCP_AGENT, shuffled).tools_param() == OFFER.tools_param()


def test_without_an_offer_the_request_has_no_mcp_tools() -> None:
    log = mcp_log()
    started(log)
    assert tool_names(decide(log)) == ["bash", "lookup_ticket"]


def test_an_unavailable_server_is_reported_once_per_turn_and_left_out() -> None:
    log = mcp_log()
    log.user("hi")
    offer = build_offer(MCP_AGENT, [TICKETS_TOOLS, DOCS_DOWN])
    decision = decide(log, offer)
    assert [d.type for d in decision.appends] == [ev.SESSION_STATUS_RUNNING, ev.SESSION_ERROR]
    assert decision.appends[1].payload == {
        "error": {
            "type": "mcp_connection_failed_error",
            "message": "cannot connect to https://docs.example.test/mcp",
            "retry_status": {"type": "retrying"},
            "mcp_server_name": "docs",
        }
    }
    assert "mcp__docs__search" not in tool_names(decision)
    for draft in decision.appends:
        log.draft(draft)

    # Later in the turn: not listed again, not reported again, and not a failed model request.
    assert [s.name for s in servers_to_list(MCP_AGENT, _state_down(log))] == ["tickets"]
    log.model([tool_use("toolu_01", "mcp__tickets__lookup_ticket", {"id": "7"})], "tool_use", offer)
    mcp_use = events_of(log, ev.AGENT_MCP_TOOL_USE)[0]
    log.draft(_result(mcp_use.id, "open"))
    again = decide(log, build_offer(MCP_AGENT, [TICKETS_TOOLS]))
    assert again.appends == ()
    assert call(again).attempt == 1

    # A new turn lists it again.
    log.model([text("It is open.")], "end_turn")
    log.idle()
    assert _state_down(log) == set()
    assert [s.name for s in servers_to_list(MCP_AGENT, _state_down(log))] == ["tickets", "docs"]


def _state_down(log: Log) -> set[str]:
    return set(fold(log.events).mcp_down)


def _result(use_id: str, t: str, *, is_error: bool = False) -> ev.Draft:
    return ev.mcp_tool_result(
        use_id,
        [text(t)],
        is_error=is_error,
        server="tickets",
        tool="lookup_ticket",
        outcome="ok",
        latency_ms=3.5,
    )


# -- recording and dispatching ------------------------------------------------------------------


def test_a_namespaced_call_is_recorded_as_agent_mcp_tool_use() -> None:
    log = mcp_log()
    started(log)
    log.model(
        [
            text("Looking."),
            tool_use("toolu_01", "mcp__tickets__lookup_ticket", {"id": "7"}),
            tool_use("toolu_02", "mcp__tickets__close_ticket", {"id": "7"}),
            tool_use("toolu_03", "mcp__docs__search", {"query": "sla"}),
        ],
        "tool_use",
        OFFER,
    )
    uses = events_of(log, ev.AGENT_MCP_TOOL_USE)
    assert [u.payload for u in uses] == [
        {
            "mcp_server_name": "tickets",
            "name": "lookup_ticket",
            "input": {"id": "7"},
            "evaluated_permission": "allow",
            "evaluation": {"type": "always_allow"},
        },
        {
            "mcp_server_name": "tickets",
            "name": "close_ticket",
            "input": {"id": "7"},
            "evaluated_permission": "ask",
            "evaluation": {"type": "always_ask"},
        },
        {
            "mcp_server_name": "docs",
            "name": "search",
            "input": {"query": "sla"},
            # auto never fails open: an MCP tool under it asks (only read/glob/grep are let through)
            "evaluated_permission": "ask",
            "evaluation": {"type": "auto", "evaluated_permission": {"type": "ask"}},
        },
    ]
    assert not events_of(log, ev.AGENT_TOOL_USE)
    end = events_of(log, ev.SPAN_MODEL_REQUEST_END)[0]
    assert end.payload["content_event_ids"][1:] == [u.id for u in uses]

    # Allowed calls run first, in block order, keyed by their event id.
    decision = decide(log)
    assert decision.effect == DispatchMcpTool(uses[0].id, "tickets", "lookup_ticket", {"id": "7"})
    log.draft(_result(uses[0].id, "open"))
    # Then the ask-permission calls put the session in requires_action.
    waiting = decide(log)
    assert waiting.appends == (ev.status_idle("requires_action", [uses[1].id, uses[2].id]),)


def test_an_unknown_name_is_a_denied_agent_tool_use() -> None:
    log = mcp_log()
    started(log)
    log.model([tool_use("toolu_01", "mcp__tickets__delete_ticket", {"id": "7"})], "tool_use", OFFER)
    (use,) = events_of(log, ev.AGENT_TOOL_USE)
    assert use.payload["evaluated_permission"] == "deny"
    decision = decide(log)
    assert decision.appends[0].type == ev.AGENT_TOOL_RESULT and decision.appends[0].payload["is_error"]


def _asked(log: Log) -> str:
    started(log)
    ids = log.model([tool_use("toolu_09", "mcp__tickets__close_ticket", {"id": "7"})], "tool_use", OFFER)
    log.idle("requires_action", ids)
    return ids[0]


def test_always_ask_allowed_dispatches_after_confirmation() -> None:
    log = mcp_log()
    use_id = _asked(log)
    assert decide(log).idle  # waiting for the client
    log.confirm(use_id, "allow")
    assert [d.type for d in decide(log).appends] == [ev.SESSION_STATUS_RUNNING]
    log.running()
    assert decide(log).effect == DispatchMcpTool(use_id, "tickets", "close_ticket", {"id": "7"})


def test_always_ask_denied_is_an_error_result_and_never_runs() -> None:
    log = mcp_log()
    use_id = _asked(log)
    log.confirm(use_id, "deny", "Not on a Friday.")
    decision = decide(log)
    assert decision.effect is None
    assert decision.appends == (
        ev.mcp_tool_result(
            use_id,
            [text("Not on a Friday.")],
            is_error=True,
            server="tickets",
            tool="close_ticket",
            outcome="denied",
        ),
    )
    for draft in decision.appends:
        log.draft(draft)
    log.running()
    request = call(decide(log, OFFER)).request
    assert request["messages"][-1]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "toolu_09",
        "content": [{"type": "text", "text": "Not on a Friday."}],
        "is_error": True,
        "cache_control": {"type": "ephemeral"},
    }


def test_resume_redispatches_an_mcp_tool_use_without_result_with_the_same_key() -> None:
    log = mcp_log()
    started(log)
    log.model([tool_use("toolu_01", "mcp__tickets__lookup_ticket", {"id": "7"})], "tool_use", OFFER)
    (use,) = events_of(log, ev.AGENT_MCP_TOOL_USE)
    first = decide(log)
    # The harness crashed mid-call: a fresh brain folding the same log decides the same call.
    assert (
        decide(log)
        == first
        == Decision(effect=DispatchMcpTool(use.id, "tickets", "lookup_ticket", {"id": "7"}))
    )

    log.draft(_result(use.id, "open, assigned to Ana"))
    assert events_of(log, ev.AGENT_MCP_TOOL_RESULT)[0].payload == {
        "mcp_tool_use_id": use.id,
        "content": [text("open, assigned to Ana")],
        "is_error": False,
        "mcp_server_name": "tickets",
        "tool": "lookup_ticket",
        "outcome": "ok",
        "latency_ms": 3.5,
    }
    # A second result for the same use (a duplicate append) is ignored.
    log.draft(_result(use.id, "duplicate"))
    request = call(decide(log, OFFER)).request
    assert request["messages"][-1] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01",  # the model's own id, as for toolset tools
                "content": [text("open, assigned to Ana")],
                "cache_control": {"type": "ephemeral"},
            }
        ],
    }


def test_interrupt_during_an_mcp_call_answers_it_as_interrupted() -> None:
    log = mcp_log()
    started(log)
    log.model([tool_use("toolu_01", "mcp__tickets__lookup_ticket", {"id": "7"})], "tool_use", OFFER)
    (use,) = events_of(log, ev.AGENT_MCP_TOOL_USE)
    log.interrupt()
    decision = decide(log)
    assert [d.type for d in decision.appends] == [ev.AGENT_MCP_TOOL_RESULT, ev.SESSION_STATUS_IDLE]
    payload = decision.appends[0].payload
    assert payload["mcp_tool_use_id"] == use.id and payload["is_error"]
    assert payload["outcome"] == "interrupted" and "latency_ms" not in payload
