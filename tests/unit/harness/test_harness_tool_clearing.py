"""Clearing old tool results before compacting (``harness/tool_clearing.py``), by the harness or by
the server (``context_management``): pure functions and the fitting ladder; the step's decisions on
whole logs are golden files (``context_old_tool_results_cleared``, ``context_edits_server_side``)."""

from __future__ import annotations

import copy
import json
from typing import Any

from harness_logs import AGENT, Log, tool_use

from control_plane.harness import event_drafts as ev
from control_plane.harness.compaction import Fitted, fit_request
from control_plane.harness.config import HarnessConfig
from control_plane.harness.context_window import ContextState
from control_plane.harness.fold import build_request, fold
from control_plane.harness.model import COMPACTION_BETA, CONTEXT_MANAGEMENT_BETA, _with_betas
from control_plane.harness.step import CallModel, step
from control_plane.harness.tool_clearing import (
    CLEAR_TOOL_USES,
    Cleared,
    clear_tool_results,
    cleared_input_tokens,
    context_management_param,
)


def _log(*sizes: int) -> Log:
    log = Log()
    log.user("Read.")
    log.running()
    for index, size in enumerate(sizes):
        ids = log.model([tool_use(f"toolu_{index}", "bash", {"command": "cat"})], "tool_use")
        log.result(ids[0], "x" * size)
    return log


def _config(budget: int, **fields: Any) -> HarnessConfig:
    return HarnessConfig(
        max_tokens=1000, context_margin_tokens=0, context_windows={"claude-test": budget + 1000}, **fields
    )


def _cleared_ids(request: dict[str, Any]) -> list[str]:
    return [
        b["tool_use_id"]
        for m in request["messages"]
        for b in m["content"]
        if b.get("type") == "tool_result" and "cleared to save context" in json.dumps(b.get("content"))
    ]


def test_the_oldest_results_beyond_keep_are_cleared_naming_their_event() -> None:
    log = _log(*[1000] * 6)
    state = fold(log.events)
    messages = build_request(AGENT, state, max_tokens=1)["messages"]
    cleared = clear_tool_results(
        messages, state.tool_event_ids(), keep=3, excess_chars=10**9, batch_chars=1
    )  # as much as possible: all but the last three
    assert cleared == Cleared(3, cleared.chars if cleared else 0) and cleared.chars > 2700
    assert _cleared_ids({"messages": messages}) == ["toolu_0", "toolu_1", "toolu_2"]
    first = next(b for m in messages for b in m["content"] if b.get("tool_use_id") == "toolu_0")
    event_id = state.tool_event_ids()["toolu_0"]
    assert first["content"] == [
        {"type": "text", "text": f"[tool result cleared to save context; 1030 characters; event {event_id}]"}
    ]


def test_the_results_the_model_has_not_seen_are_never_cleared() -> None:
    state = fold(_log(1000, 1000, 1000).events)  # the last result is staged: the request's tail
    messages = build_request(AGENT, state, max_tokens=1)["messages"]
    clear_tool_results(messages, {}, keep=0, excess_chars=10**9, batch_chars=1)
    assert _cleared_ids({"messages": messages}) == ["toolu_0", "toolu_1"]


def test_clearing_goes_by_whole_batches_and_needs_at_least_its_minimum() -> None:
    state = fold(_log(*[1000] * 8).events)
    base = build_request(AGENT, state, max_tokens=1)["messages"]
    counts = []
    for excess in range(100, 3100, 300):  # the excess grows by a third of a result per request
        messages = copy.deepcopy(base)
        cleared = clear_tool_results(messages, {}, keep=3, excess_chars=excess, batch_chars=3000)
        counts.append(cleared.tool_uses if cleared else 0)
    assert counts == [4] * 10  # one batch of 3,000 characters (four results) covers every excess
    messages = copy.deepcopy(base)
    assert (
        clear_tool_results(messages, {}, keep=3, excess_chars=1, batch_chars=1, at_least_chars=10**6) is None
    )
    assert messages == base  # nothing changed: the candidates cannot free the minimum
    assert clear_tool_results(messages, {}, keep=3, excess_chars=0, batch_chars=1) is None


def test_the_harness_clears_before_it_compacts_and_the_log_stays_whole() -> None:
    log = _log(*[1000] * 6)
    state = fold(log.events)
    config = _config(2600)  # ~2,300 tokens in the request: over the trigger (2,080), under the budget
    request = build_request(AGENT, state, max_tokens=1000)
    fitted = fit_request(AGENT, state, config, request)
    assert isinstance(fitted, Fitted) and fitted.compaction is None and fitted.cleared is not None
    assert _cleared_ids(fitted.request) and "context_management" not in fitted.request
    assert all(
        len(e.payload["content"][0]["text"]) == 1000 for e in log.events if e.type == ev.AGENT_TOOL_RESULT
    )
    assert "x" * 1000 in json.dumps(state.conversation())  # the fold's conversation is untouched
    # Deterministic: the same log decides the same request (a restarted harness rebuilds it).
    first = step(AGENT, log.events, config)
    again = step(AGENT, list(log.events), config)
    assert first == again and isinstance(first.effect, CallModel)
    assert first.effect.span_start_payload() == {"cleared_tool_results": fitted.cleared.to_json()}


def test_a_context_edit_model_is_sent_context_management_and_nothing_cleared_by_the_harness() -> None:
    state = fold(_log(*[1000] * 6).events)
    config = _config(2600, context_edit_models=("claude-test",))
    fitted = fit_request(AGENT, state, config, build_request(AGENT, state, max_tokens=1000))
    assert isinstance(fitted, Fitted) and fitted.cleared is None and not _cleared_ids(fitted.request)
    budget = config.context_budget("claude-test")
    assert fitted.request["context_management"] == context_management_param(
        trigger_tokens=int(budget * 0.8), keep=3, at_least_tokens=int(budget * 0.05)
    )
    [edit] = fitted.request["context_management"]["edits"]
    assert edit["type"] == CLEAR_TOOL_USES and edit["keep"] == {"type": "tool_uses", "value": 3}


def test_a_compaction_request_carries_no_context_management() -> None:
    state = fold(_log(*[3000] * 8).events)  # far over the budget even with old results cleared
    config = _config(2000, context_edit_models=("claude-test",))
    fitted = fit_request(AGENT, state, config, build_request(AGENT, state, max_tokens=1000))
    assert isinstance(fitted, Fitted) and fitted.compaction is not None
    assert "context_management" not in fitted.request


def test_the_estimate_calibrates_on_what_was_sent() -> None:
    harness = ContextState(message_chars=10_000)
    harness.request_started(cleared_chars=6_000)  # the harness cleared 6,000 characters
    harness.replied({"input_tokens": 1_000})
    assert harness.calibration == (4_000, 1_000)
    server = ContextState(message_chars=10_000)
    server.request_started()
    server.replied({"input_tokens": 1_000}, cleared_tokens=1_500)  # the server cleared 1,500 tokens
    assert server.calibration == (10_000, 2_500)
    applied = {
        "applied_edits": [{"type": CLEAR_TOOL_USES, "cleared_tool_uses": 2, "cleared_input_tokens": 7}]
    }
    assert cleared_input_tokens(applied) == 7 and cleared_input_tokens(None) == 0


def test_the_fold_reads_both_records_of_clearing() -> None:
    log = _log(100)
    log.add(ev.SPAN_MODEL_REQUEST_START, {"cleared_tool_results": {"tool_uses": 1, "characters": 50}})
    state = fold(log.events)
    assert state.context.sent_chars == state.context.message_chars - 50


def test_the_beta_header_names_every_beta_the_request_uses() -> None:
    headers = {"x": "y"}
    plain = {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    assert _with_betas(headers, plain) == headers
    managed = {**plain, "context_management": {"edits": []}}
    assert _with_betas(headers, managed)["anthropic-beta"] == CONTEXT_MANAGEMENT_BETA
    both = {**managed, "compaction": {"type": "summarize"}}
    assert _with_betas(headers, both)["anthropic-beta"] == f"{COMPACTION_BETA},{CONTEXT_MANAGEMENT_BETA}"
