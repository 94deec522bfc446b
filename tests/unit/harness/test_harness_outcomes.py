"""Pure builders of the events for a model request's outcome, the agent's tools, the config."""

from __future__ import annotations

from typing import Any

import pytest
from anthropic.types.beta.beta_managed_agents_session_usage_event import BetaManagedAgentsSessionUsageEvent
from harness_logs import AGENT, AGENT_JSON, message, resolved_agent, text, tool_use
from pydantic import ValidationError

from control_plane.harness import event_drafts as ev
from control_plane.harness.agent import AUTO_ALLOWED_TOOLS, AgentSpec, permission_of
from control_plane.harness.config import HarnessConfig
from control_plane.harness.step import model_failure_events, model_output_events
from control_plane.sessions.usage import Budget, ModelPrice

CONFIG = HarnessConfig(model_attempts=3)
ZERO = {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}


def test_consecutive_text_blocks_share_one_agent_message() -> None:
    msg = message(
        [
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            text("Part one. "),
            text("Part two."),
            tool_use("toolu_1", "bash", {"command": "ls"}),
            text("After."),
        ],
        "tool_use",
    )
    ids = ["e_think", "e_msg", "e_msg", "e_tool", "e_after"]
    drafts = model_output_events(AGENT, msg, ids, "e_start", ZERO)
    assert [(d.type, d.id) for d in drafts] == [
        (ev.AGENT_THINKING, "e_think"),
        (ev.AGENT_MESSAGE, "e_msg"),
        (ev.AGENT_TOOL_USE, "e_tool"),
        (ev.AGENT_MESSAGE, "e_after"),
        (ev.SPAN_MODEL_REQUEST_END, None),
        (ev.SESSION_USAGE, None),
    ]
    assert drafts[0].payload == {}
    assert drafts[1].payload == {"content": [text("Part one. "), text("Part two.")]}
    end = drafts[4].payload
    assert end["assistant_message"] == msg
    assert end["content_event_ids"] == ids
    assert end["is_error"] is False
    assert end["model_usage"] == {
        "input_tokens": 100,
        "output_tokens": 7,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def test_session_usage_is_cumulative() -> None:
    before = {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_read_input_tokens": 3,
        "cache_creation_input_tokens": 1,
    }
    drafts = model_output_events(AGENT, message([text("x")], "end_turn"), ["e1"], "s", before)
    # The SDK's snapshot shape: cache writes as the 5-minute breakdown; no price, no list_cost.
    assert drafts[-1].payload == {
        "usage": {
            "input_tokens": 110,
            "output_tokens": 12,
            "cache_read_input_tokens": 3,
            "cache_creation": {"ephemeral_5m_input_tokens": 1, "ephemeral_1h_input_tokens": 0},
        },
        "budget": None,
    }


def test_session_usage_carries_list_cost_and_budget() -> None:
    price = ModelPrice(
        input_usd_per_mtok=3,
        output_usd_per_mtok=15,
        cache_write_usd_per_mtok=3.75,
        cache_read_usd_per_mtok=0.3,
    )
    drafts = model_output_events(
        AGENT, message([text("x")], "end_turn"), ["e1"], "s", ZERO, price=price, budget=Budget(500)
    )
    payload = drafts[-1].payload
    # 100 input tokens at $3/MTok + 7 output at $15/MTok = $0.000405: 0 cents, rounded.
    assert payload["usage"]["list_cost"] == {"amount": "0", "currency": "USD"}
    assert payload["budget"] == {"type": "limit", "max_list_cost": {"amount": "500", "currency": "USD"}}
    BetaManagedAgentsSessionUsageEvent.model_validate(
        {"id": "sevt_1", "type": "session.usage", "processed_at": "2026-04-01T12:00:00Z", **payload}
    )


def test_event_ids_must_match_the_blocks() -> None:
    with pytest.raises(ValueError):
        model_output_events(AGENT, message([text("x")], "end_turn"), [], "s", ZERO)


@pytest.mark.parametrize(
    ("attempt", "retryable", "expected"),
    [
        (1, True, ("retrying", ev.SESSION_STATUS_RESCHEDULED)),
        (2, True, ("retrying", ev.SESSION_STATUS_RESCHEDULED)),
        (3, True, ("exhausted", ev.SESSION_STATUS_IDLE)),
        (1, False, ("terminal", ev.SESSION_STATUS_TERMINATED)),
    ],
)
def test_model_failure_events(attempt: int, retryable: bool, expected: tuple[str, str]) -> None:
    drafts = model_failure_events(
        attempt=attempt,
        config=CONFIG,
        error_type="model_overloaded_error",
        message="busy",
        retryable=retryable,
        start_id="e_start",
    )
    assert drafts[0] == ev.span_end_failed("e_start")
    assert drafts[1].type == ev.SESSION_ERROR
    assert drafts[1].payload == {
        "error": {"type": "model_overloaded_error", "message": "busy", "retry_status": {"type": expected[0]}}
    }
    assert drafts[2].type == expected[1]
    if expected[1] == ev.SESSION_STATUS_IDLE:
        assert drafts[2].payload == {"stop_reason": {"type": "retries_exhausted"}}


def test_toolset_resolution_and_permissions() -> None:
    tools: list[dict[str, Any]] = [
        {
            "type": "agent_toolset_20260401",
            "default_config": {"enabled": False},
            "configs": [
                {"name": "grep", "enabled": True, "permission_policy": {"type": "auto"}},
                {"name": "bash", "enabled": True, "permission_policy": {"type": "always_ask"}},
                {"name": "web_fetch", "enabled": True},
            ],
        },
    ]
    agent = AgentSpec.from_json(resolved_agent("claude-x", tools))
    assert agent.model == "claude-x"
    assert agent.system is None and agent.system_param() is None
    assert [t.name for t in agent.toolset] == ["bash", "grep"]
    assert agent.permission("bash").permission == "ask"
    assert agent.permission("grep").permission == "allow"
    assert agent.permission("read").kind == "unknown"
    assert agent.permission("read").permission == "deny"
    drafts = model_output_events(
        agent, message([tool_use("t", "grep", {"pattern": "x"})], "tool_use"), ["e"], "s", ZERO
    )
    assert drafts[0].payload["evaluation"] == {"type": "auto", "evaluated_permission": {"type": "allow"}}


def test_auto_never_fails_open() -> None:
    """``auto`` allows only the tools that cannot change anything; everything else asks."""
    tools: list[dict[str, Any]] = [
        {
            "type": "agent_toolset_20260401",
            "default_config": {"enabled": True, "permission_policy": {"type": "auto"}},
        },
    ]
    agent = AgentSpec.from_json(resolved_agent("claude-x", tools))
    permissions = {t.name: agent.permission(t.name).permission for t in agent.toolset}
    assert permissions == {
        "bash": "ask",
        "read": "allow",
        "write": "ask",
        "edit": "ask",
        "glob": "allow",
        "grep": "allow",
    }
    assert {"read", "glob", "grep"} == AUTO_ALLOWED_TOOLS
    assert permission_of("auto") == "ask"  # an MCP tool under auto
    assert permission_of("auto", "bash") == "ask"
    assert permission_of("something_new", "read") == "ask"
    drafts = model_output_events(
        agent, message([tool_use("t", "bash", {"command": "rm -rf /"})], "tool_use"), ["e"], "s", ZERO
    )
    assert drafts[0].payload["evaluated_permission"] == "ask"
    assert drafts[0].payload["evaluation"] == {"type": "auto", "evaluated_permission": {"type": "ask"}}


def test_tools_param_is_stable_and_copies() -> None:
    agent = AgentSpec.from_json(AGENT_JSON)
    first = agent.tools_param()
    first[0]["input_schema"]["properties"].clear()
    assert agent.tools_param() == AGENT.tools_param()
    assert agent.tools_param()[0]["input_schema"]["properties"]
    assert agent.uses_sandbox


def test_agent_without_model_or_with_unresolved_tools_is_rejected() -> None:
    with pytest.raises(ValueError):
        AgentSpec.from_json({"tools": []})
    unresolved = {"type": "agent_toolset_20260401", "configs": [{"name": "bash"}]}
    with pytest.raises(ValueError):
        AgentSpec.from_json({"model": "m", "tools": [unresolved]})


def test_config_backoff_and_validation() -> None:
    config = HarnessConfig(model_backoff_initial_s=0.5, model_backoff_max_s=3.0)
    assert [config.backoff_s(k) for k in range(0, 5)] == [0.0, 0.5, 1.0, 2.0, 3.0]
    with pytest.raises(ValidationError):
        HarnessConfig(model_backoff_initial_s=5.0, model_backoff_max_s=1.0)
    with pytest.raises(ValidationError):
        HarnessConfig.model_validate({"lease_ttl_s": 1.0, "surprise": True})
