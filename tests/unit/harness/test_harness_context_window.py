"""The context budget, the calibrated estimate, the conversation after a compaction and the
fitting ladder (cut, compact, limit) — pure functions; the step's decisions on whole logs are
golden files (``context_*``)."""

from __future__ import annotations

from typing import Any

import pytest
from harness_logs import AGENT, Log, message, text, tool_use

from control_plane.harness import event_drafts as ev
from control_plane.harness.compaction import (
    COMPACTION_LIMIT_ERROR,
    CompactionPlan,
    Fitted,
    compaction_events,
    fit_request,
    request_chars,
)
from control_plane.harness.config import HarnessConfig
from control_plane.harness.context_window import (
    DEFAULT_CHARS_PER_TOKEN,
    MAX_CHARS_PER_TOKEN,
    SUMMARY_PREFIX,
    ContextState,
    compacted_messages,
    window_for,
)
from control_plane.harness.fold import build_request, fold


def test_the_budget_is_the_window_minus_output_and_margin() -> None:
    config = HarnessConfig(max_tokens=8192, context_margin_tokens=4096)
    assert config.context_budget("claude-opus-4-6") == 200_000 - 8192 - 4096
    assert config.context_budget("claude-opus-4-6-20260101") == 200_000 - 8192 - 4096  # dated
    assert config.context_budget("some-other-model") == 100_000 - 8192 - 4096  # conservative
    small = HarnessConfig(max_tokens=100, context_margin_tokens=0, context_windows={"m": 50})
    assert small.context_budget("m") == 1


def test_compaction_api_models_match_dated_ids() -> None:
    config = HarnessConfig(compaction_api_models=["claude-x"])
    assert config.compaction_api("claude-x") and config.compaction_api("claude-x-20260101")
    assert not config.compaction_api("claude-y")
    assert window_for({"a": 1}, "a-20250101") == 1 and window_for({"a": 1}, "b") is None


def test_the_ratio_is_learned_from_the_last_reply_and_clamped() -> None:
    state = ContextState()
    assert state.ratio(1000) == DEFAULT_CHARS_PER_TOKEN
    state.message_chars = 3000
    state.request_started()
    state.replied({"input_tokens": 900, "cache_read_input_tokens": 100})
    assert state.ratio(1000) == pytest.approx(4000 / 1000)
    state.request_started()
    state.replied({"input_tokens": 10})  # 400 chars per token: a wrong reply cannot loosen it
    assert state.ratio(1000) == MAX_CHARS_PER_TOKEN
    state.counted = (9000, 1000)  # an exact count wins, unclamped
    assert state.ratio(1000) == 9.0


def test_the_fold_rebuilds_the_calibration_from_the_log() -> None:
    log = Log()
    log.user("Hello.")
    log.running()
    log.model([text("Hi.")], "end_turn")
    state = fold(log.events)
    assert state.context.calibration is not None
    assert state.context.calibration[1] == 100  # harness_logs' replies report 100 input tokens
    assert state.context.message_chars > 0


def test_a_harness_summary_replaces_the_compacted_messages() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [text("task")]},
        {"role": "assistant", "content": [text("a")]},
        {"role": "user", "content": [text("b")]},
        {"role": "assistant", "content": [text("c")]},
    ]
    out = compacted_messages(messages, {"summary": "S", "compacted_messages": 3})
    assert out == [
        {"role": "user", "content": [text(SUMMARY_PREFIX + "S")]},
        {"role": "assistant", "content": [text("c")]},
    ]
    assert compacted_messages(messages, {"summary": None, "compacted_messages": 3}) is messages


def test_an_endpoint_compaction_block_is_sent_back_verbatim_first() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [text("task")]},
        {"role": "assistant", "content": [text("c")]},
    ]
    block = {"type": "compaction", "content": "S", "signature": "sig", "encrypted_content": None}
    out = compacted_messages(messages, {"summary": "S", "compaction_block": block, "compacted_messages": 1})
    assert out == [
        {
            "role": "assistant",
            "content": [{"type": "compaction", "content": "S", "signature": "sig"}, text("c")],
        }
    ]


def _state_with_results(*sizes: int) -> Any:
    log = Log()
    log.user("Read.")
    log.running()
    for index, size in enumerate(sizes):
        ids = log.model([tool_use(f"toolu_{index}", "bash", {"command": "cat"})], "tool_use")
        log.result(ids[0], "x" * size)
    return fold(log.events)


def _config(budget: int, **fields: Any) -> HarnessConfig:
    return HarnessConfig(
        max_tokens=1000, context_margin_tokens=0, context_windows={"claude-test": budget + 1000}, **fields
    )


def _request(state: Any) -> dict[str, Any]:
    return build_request(AGENT, state, max_tokens=1000)


def test_a_request_under_the_budget_is_sent_unchanged() -> None:
    state = _state_with_results(100)
    request = _request(state)
    fitted = fit_request(AGENT, state, _config(100_000), request)
    assert fitted == Fitted(_request(state))


def test_over_the_budget_the_oldest_messages_are_compacted() -> None:
    state = _state_with_results(3000, 3000, 3000)
    request = _request(state)
    budget = request_chars(request) // 4 - 200
    fitted = fit_request(AGENT, state, _config(budget), request)
    assert isinstance(fitted, Fitted) and fitted.compaction is not None
    assert fitted.compaction.api is False
    assert fitted.request["messages"][-1]["role"] == "user"
    assert len(fitted.request["messages"]) == fitted.compaction.messages
    assert request_chars(fitted.request) / 4 <= budget


def test_compactions_in_a_row_stop_at_the_limit() -> None:
    state = _state_with_results(3000, 3000, 3000)
    state.context.compactions_in_a_row = 3
    request = _request(state)
    fitted = fit_request(AGENT, state, _config(request_chars(request) // 4 - 200), request)
    assert isinstance(fitted, tuple)
    assert [d.type for d in fitted] == [ev.SESSION_ERROR, ev.SESSION_STATUS_IDLE]
    assert fitted[0].payload["error"]["type"] == COMPACTION_LIMIT_ERROR
    assert "3 times in a row" in fitted[0].payload["error"]["message"]


def test_compaction_events_record_the_summary_and_the_block() -> None:
    reply = message([{"type": "compaction", "content": "S", "signature": "sig"}], "compaction")
    drafts = compaction_events(CompactionPlan(4, api=True), reply, "sevt_start", {"input_tokens": 5})
    assert [d.type for d in drafts] == [
        ev.SPAN_MODEL_REQUEST_END,
        ev.AGENT_THREAD_CONTEXT_COMPACTED,
        ev.SESSION_USAGE,
    ]
    assert drafts[0].payload["model_usage"]["input_tokens"] == 100
    assert drafts[1].payload == {
        "compacted_messages": 4,
        "summary": "S",
        "compaction_block": {"type": "compaction", "content": "S", "signature": "sig"},
    }
    assert drafts[2].payload["usage"]["input_tokens"] == 105
    empty = compaction_events(CompactionPlan(2, api=False), message([], "end_turn"), "s", {})
    assert empty[1].payload["summary"] is None


def test_a_failed_compaction_counts_towards_the_limit_and_keeps_the_conversation() -> None:
    log = Log()
    log.user("Read.")
    log.running()
    before = fold(log.events).conversation()
    start = log.add(ev.SPAN_MODEL_REQUEST_START)
    for draft in compaction_events(CompactionPlan(1, api=False), message([], "end_turn"), start, {}):
        log.draft(draft)
    state = fold(log.events)
    assert state.conversation() == before
    assert state.context.compactions_in_a_row == 1 and not state.context.compacted
    assert state.model_due
