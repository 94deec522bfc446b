"""The pure step function, decision by decision, on golden-style logs built in the test."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest
from harness_logs import AGENT, Log, text, tool_use

from control_plane.harness import event_drafts as ev
from control_plane.harness.config import HarnessConfig
from control_plane.harness.fold import fold
from control_plane.harness.step import CallModel, Decision, DispatchTool, step

CONFIG = HarnessConfig(
    model_attempts=3, model_backoff_initial_s=1.0, model_backoff_max_s=8.0, max_tokens=1000
)


def decide(log: Log, **kwargs: Any) -> Decision:
    return step(log.agent, log.events, CONFIG, kwargs.get("now", log.now))


def call(decision: Decision) -> CallModel:
    assert isinstance(decision.effect, CallModel), decision
    return decision.effect


def types(decision: Decision) -> list[str]:
    return [d.type for d in decision.appends]


# -- first turn -----------------------------------------------------------------------------------


def test_empty_log_is_idle() -> None:
    assert decide(Log()).idle


def test_user_message_starts_a_turn_and_calls_the_model_in_one_decision() -> None:
    log = Log()
    log.user("hello")
    decision = decide(log)
    assert types(decision) == [ev.SESSION_STATUS_RUNNING]
    # The model call is the one the started turn would make: same request, first of the turn.
    log.running()
    assert decision.effect == call(decide(log))


def test_started_turn_calls_the_model_with_system_tools_and_message() -> None:
    log = Log()
    log.user("hello")
    log.running()
    effect = call(decide(log))
    assert effect.attempt == 1
    assert effect.first_of_turn and effect.provision
    request = effect.request
    assert request["model"] == "claude-test"
    assert request["max_tokens"] == 1000
    assert request["system"] == [
        {"type": "text", "text": "You are a careful engineer.", "cache_control": {"type": "ephemeral"}}
    ]
    # Stable order: toolset tools in canonical order (glob disabled), then custom tools.
    assert [t["name"] for t in request["tools"]] == ["bash", "edit", "read", "write", "grep", "lookup_ticket"]
    assert all("cache_control" not in t for t in request["tools"][:-1])
    assert request["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert request["tools"][0]["input_schema"]["properties"]["command"] == {
        "type": "string",
        "description": "Shell command to execute.",
    }
    assert request["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "hello", "cache_control": {"type": "ephemeral"}}],
        }
    ]


def test_request_is_identical_when_replayed() -> None:
    log = Log()
    log.user("hello")
    log.running()
    assert decide(log) == decide(log)


# -- tool use -------------------------------------------------------------------------------------


def _bash_turn() -> tuple[Log, str]:
    log = Log()
    log.user("list files")
    log.running()
    ids = log.model([text("Let me look."), tool_use("toolu_A", "bash", {"command": "ls"})], "tool_use")
    return log, ids[1]


def test_model_output_events_record_the_complete_message() -> None:
    log, tool_event = _bash_turn()
    assert [e.type for e in log.events] == [
        ev.USER_MESSAGE,
        ev.SESSION_STATUS_RUNNING,
        ev.SPAN_MODEL_REQUEST_START,
        ev.AGENT_MESSAGE,
        ev.AGENT_TOOL_USE,
        ev.SPAN_MODEL_REQUEST_END,
        ev.SESSION_USAGE,
    ]
    tool = next(e for e in log.events if e.type == ev.AGENT_TOOL_USE)
    assert tool.id == tool_event
    assert tool.payload == {
        "name": "bash",
        "input": {"command": "ls"},
        "evaluated_permission": "allow",
        "toolset_name": "agent_toolset_20260401",
        "evaluation": {"type": "always_allow"},
    }
    end = next(e for e in log.events if e.type == ev.SPAN_MODEL_REQUEST_END)
    start = next(e for e in log.events if e.type == ev.SPAN_MODEL_REQUEST_START)
    assert end.payload["model_request_start_id"] == start.id
    assert end.payload["assistant_message"]["content"][1]["id"] == "toolu_A"
    assert end.payload["content_event_ids"][1] == tool_event
    usage = next(e for e in log.events if e.type == ev.SESSION_USAGE)
    assert usage.payload["usage"]["output_tokens"] == 7


def test_tool_use_is_dispatched_with_its_event_id_as_key() -> None:
    log, tool_event = _bash_turn()
    decision = decide(log)
    assert decision == Decision(effect=DispatchTool(tool_event, "bash", {"command": "ls"}))


def test_resume_after_crash_mid_tool_redispatches_the_same_key() -> None:
    log, tool_event = _bash_turn()
    first = decide(log)
    # The harness crashed during the call: nothing new in the log. A fresh brain decides the same.
    resumed = step(AGENT, list(log.events), CONFIG, log.now + timedelta(minutes=5))
    assert resumed == first
    assert isinstance(resumed.effect, DispatchTool) and resumed.effect.tool_use_id == tool_event


def test_tool_result_leads_to_the_next_model_call_with_original_ids() -> None:
    log, tool_event = _bash_turn()
    log.result(tool_event, "a.txt\nb.txt")
    effect = call(decide(log))
    assert not effect.first_of_turn and not effect.provision
    assert effect.request["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "list files"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_A", "name": "bash", "input": {"command": "ls"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_A",
                    "content": [{"type": "text", "text": "a.txt\nb.txt"}],
                    "cache_control": {"type": "ephemeral"},
                }
            ],
        },
    ]


def test_user_tool_result_from_a_self_hosted_client_satisfies_a_tool_use() -> None:
    log, tool_event = _bash_turn()
    log.add(ev.USER_TOOL_RESULT, {"tool_use_id": tool_event, "content": [text("done")], "is_error": False})
    assert isinstance(decide(log).effect, CallModel)


def test_later_answers_to_the_same_tool_use_are_ignored() -> None:
    log, tool_event = _bash_turn()
    log.result(tool_event, "first")
    log.add(ev.USER_TOOL_RESULT, {"tool_use_id": tool_event, "content": [text("second")]})
    messages = call(decide(log)).request["messages"]
    assert messages[-1]["content"][0]["content"] == [{"type": "text", "text": "first"}]


def test_tools_run_one_at_a_time_in_block_order() -> None:
    log = Log()
    log.user("two things")
    log.running()
    ids = log.model(
        [tool_use("toolu_1", "bash", {"command": "a"}), tool_use("toolu_2", "read", {"file_path": "x"})],
        "tool_use",
    )
    assert decide(log).effect == DispatchTool(ids[0], "bash", {"command": "a"})
    log.result(ids[0], "A")
    assert decide(log).effect == DispatchTool(ids[1], "read", {"file_path": "x"})
    log.result(ids[1], "X")
    messages = call(decide(log)).request["messages"]
    assert [b["tool_use_id"] for b in messages[-1]["content"]] == ["toolu_1", "toolu_2"]


def test_unknown_tool_is_refused_without_running() -> None:
    log = Log()
    log.user("hack")
    log.running()
    ids = log.model([tool_use("toolu_X", "glob", {"pattern": "*"})], "tool_use")
    tool = next(e for e in log.events if e.type == ev.AGENT_TOOL_USE)
    assert tool.payload["evaluated_permission"] == "deny"
    decision = decide(log)
    assert decision.effect is None
    assert decision.appends == (
        ev.tool_result(ids[0], [text("Tool 'glob' is not available to this agent.")], is_error=True),
    )


# -- finished turns are never requested again ----------------------------------------------------


def test_resume_after_finished_model_turn_does_not_call_the_model() -> None:
    log = Log()
    log.user("hi")
    log.running()
    log.model([text("Hello!")], "end_turn")
    decision = decide(log)
    assert decision.effect is None
    assert decision.appends == (ev.status_idle("end_turn"),)
    log.draft(decision.appends[0])
    assert decide(log).idle


def test_refusal_passes_through_and_pause_turn_continues() -> None:
    log = Log()
    log.user("hi")
    log.running()
    log.model([text("thinking about it")], "pause_turn")
    assert isinstance(decide(log).effect, CallModel)
    log.model([text("no")], "refusal")
    assert decide(log).appends == (ev.status_idle("refusal"),)


def test_open_span_of_a_crashed_request_is_closed_then_the_model_called() -> None:
    log = Log()
    log.user("hi")
    log.running()
    start = log.add(ev.SPAN_MODEL_REQUEST_START)
    decision = decide(log)
    assert decision.appends == (ev.span_end_failed(start),)
    log.draft(decision.appends[0])
    effect = call(decide(log))
    assert effect.attempt == 1  # a crash is not a model failure
    assert effect.request["messages"] == [
        {"role": "user", "content": [{**text("hi"), "cache_control": {"type": "ephemeral"}}]}
    ]


# -- custom tools and permissions -----------------------------------------------------------------


def test_custom_tool_requires_action_then_resumes_on_the_result() -> None:
    log = Log()
    log.user("ticket 7?")
    log.running()
    ids = log.model([tool_use("toolu_C", "lookup_ticket", {"id": "7"})], "tool_use")
    assert log.events[-3].type == ev.AGENT_CUSTOM_TOOL_USE
    assert log.events[-3].payload == {"name": "lookup_ticket", "input": {"id": "7"}}
    decision = decide(log)
    assert decision.appends == (ev.status_idle("requires_action", [ids[0]]),)
    log.draft(decision.appends[0])
    assert decide(log).idle
    log.custom_result(ids[0], "ticket 7: open")
    assert types(decide(log)) == [ev.SESSION_STATUS_RUNNING]
    log.running()
    messages = call(decide(log)).request["messages"]
    assert messages[-1]["content"][0]["content"] == [text("ticket 7: open")]
    assert messages[-1]["content"][0]["tool_use_id"] == "toolu_C"


def test_always_ask_waits_for_confirmation_allow_runs_it() -> None:
    log = Log()
    log.user("write it")
    log.running()
    ids = log.model([tool_use("toolu_W", "write", {"file_path": "a", "content": "b"})], "tool_use")
    tool = next(e for e in log.events if e.type == ev.AGENT_TOOL_USE)
    assert tool.payload["evaluated_permission"] == "ask"
    assert decide(log).appends == (ev.status_idle("requires_action", [ids[0]]),)
    log.idle("requires_action", [ids[0]])
    log.confirm(ids[0], "allow")
    assert types(decide(log)) == [ev.SESSION_STATUS_RUNNING]
    log.running()
    assert decide(log).effect == DispatchTool(ids[0], "write", {"file_path": "a", "content": "b"})


def test_always_ask_deny_answers_with_the_deny_message_and_never_runs() -> None:
    log = Log()
    log.user("write it")
    log.running()
    ids = log.model([tool_use("toolu_W", "write", {"file_path": "a", "content": "b"})], "tool_use")
    log.idle("requires_action", [ids[0]])
    log.confirm(ids[0], "deny", "not that file")
    decision = decide(log)
    assert decision.appends == (ev.tool_result(ids[0], [text("not that file")], is_error=True),)
    assert decision.effect is None
    log.draft(decision.appends[0])
    assert types(decide(log)) == [ev.SESSION_STATUS_RUNNING]
    log.running()
    messages = call(decide(log)).request["messages"]
    assert messages[-1]["content"][0]["is_error"] is True


def test_resolving_fewer_than_all_re_emits_requires_action_with_the_remainder() -> None:
    log = Log()
    log.user("both")
    log.running()
    ids = log.model(
        [
            tool_use("toolu_1", "lookup_ticket", {"id": "1"}),
            tool_use("toolu_2", "lookup_ticket", {"id": "2"}),
        ],
        "tool_use",
    )
    log.idle("requires_action", ids)
    log.custom_result(ids[1], "two")
    assert decide(log).appends == (ev.status_idle("requires_action", [ids[0]]),)
    log.idle("requires_action", [ids[0]])
    assert decide(log).idle
    log.custom_result(ids[0], "one")
    assert types(decide(log)) == [ev.SESSION_STATUS_RUNNING]


def test_allowed_tools_run_before_the_session_asks_for_the_rest() -> None:
    log = Log()
    log.user("mixed")
    log.running()
    ids = log.model(
        [tool_use("toolu_1", "lookup_ticket", {"id": "1"}), tool_use("toolu_2", "bash", {"command": "ls"})],
        "tool_use",
    )
    assert decide(log).effect == DispatchTool(ids[1], "bash", {"command": "ls"})
    log.result(ids[1], "ok")
    assert decide(log).appends == (ev.status_idle("requires_action", [ids[0]]),)


# -- interrupt ------------------------------------------------------------------------------------


def test_interrupt_during_a_tool_answers_it_and_ends_the_turn() -> None:
    log, tool_event = _bash_turn()
    log.interrupt()
    decision = decide(log)
    assert decision.appends == (
        ev.tool_result(
            tool_event, [text("Interrupted by the user before the tool call finished.")], is_error=True
        ),
        ev.status_idle("end_turn"),
    )
    assert decision.effect is None


def test_interrupt_during_a_model_request_closes_its_span() -> None:
    log = Log()
    log.user("long story")
    log.running()
    start = log.add(ev.SPAN_MODEL_REQUEST_START)
    log.interrupt()
    assert decide(log).appends == (ev.span_end_failed(start), ev.status_idle("end_turn"))


def test_interrupt_while_idle_is_ignored() -> None:
    log = Log()
    log.interrupt()
    assert decide(log).idle


def test_interrupt_folds_inputs_queued_before_it_into_the_conversation() -> None:
    log = Log()
    log.user("first")
    log.running()
    log.user("queued before the interrupt")
    log.interrupt()
    log.user("after the interrupt")
    start = log.add(ev.SPAN_MODEL_REQUEST_START)
    log.draft(ev.span_end_failed(start))
    log.idle("end_turn")
    # Only the message sent after the interrupt starts a turn.
    assert types(decide(log)) == [ev.SESSION_STATUS_RUNNING]
    log.running()
    assert decide(log).effect is not None
    messages = call(decide(log)).request["messages"]
    assert [b["text"] for b in messages[0]["content"]] == [
        "first",
        "queued before the interrupt",
        "after the interrupt",
    ]
    log.model([text("ok")], "end_turn")
    log.idle()
    assert decide(log).idle


def test_interrupt_during_requires_action_ends_the_turn() -> None:
    log = Log()
    log.user("write it")
    log.running()
    ids = log.model([tool_use("toolu_W", "write", {"file_path": "a", "content": "b"})], "tool_use")
    log.idle("requires_action", [ids[0]])
    log.interrupt()
    decision = decide(log)
    assert types(decision) == [ev.AGENT_TOOL_RESULT, ev.SESSION_STATUS_IDLE]
    for draft in decision.appends:
        log.draft(draft)
    log.user("never mind")
    log.running()
    messages = call(decide(log)).request["messages"]
    assert messages[-1]["content"][0]["tool_use_id"] == "toolu_W"
    assert messages[-1]["content"][0]["is_error"] is True
    assert messages[-1]["content"][1]["text"] == "never mind"


# -- queued input: one turn at a time ------------------------------------------------------------


def test_two_user_messages_queued_make_two_sequential_turns() -> None:
    log = Log()
    log.user("one")
    log.user("two")
    assert types(decide(log)) == [ev.SESSION_STATUS_RUNNING]
    log.running()
    first = call(decide(log)).request["messages"]
    assert first == [{"role": "user", "content": [{**text("one"), "cache_control": {"type": "ephemeral"}}]}]
    log.model([text("reply one")], "end_turn")
    assert decide(log).appends == (ev.status_idle("end_turn"),)
    log.idle()
    assert types(decide(log)) == [ev.SESSION_STATUS_RUNNING]
    log.running()
    second = call(decide(log)).request["messages"]
    assert second == [
        {"role": "user", "content": [text("one")]},
        {"role": "assistant", "content": [text("reply one")]},
        {"role": "user", "content": [{**text("two"), "cache_control": {"type": "ephemeral"}}]},
    ]
    assert call(decide(log)).first_of_turn


def test_input_arriving_mid_turn_waits_for_the_next_turn() -> None:
    log, tool_event = _bash_turn()
    log.user("also this")
    log.result(tool_event, "ok")
    messages = call(decide(log)).request["messages"]
    assert all(b.get("text") != "also this" for m in messages for b in m["content"])
    log.model([text("done")], "end_turn")
    log.idle()
    assert types(decide(log)) == [ev.SESSION_STATUS_RUNNING]


# -- model failures -------------------------------------------------------------------------------


def test_retry_waits_out_the_backoff_then_runs_again() -> None:
    log = Log()
    log.user("hi")
    log.running()
    log.failed_model("retrying")
    rescheduled_at = log.events[-1].processed_at
    early = decide(log, now=rescheduled_at + timedelta(seconds=0.25))
    assert early.effect is None and early.appends == ()
    assert early.delay_s == pytest.approx(0.75)
    late = decide(log, now=rescheduled_at + timedelta(seconds=1))
    assert types(late) == [ev.SESSION_STATUS_RUNNING]
    assert call(late).attempt == 2
    log.running()
    log.failed_model("retrying")
    second = decide(log, now=log.events[-1].processed_at)
    assert second.delay_s == pytest.approx(2.0)


def test_success_after_a_retry_resets_the_failure_count() -> None:
    log = Log()
    log.user("hi")
    log.running()
    log.failed_model("retrying")
    log.running()
    ids = log.model([tool_use("toolu_1", "bash", {"command": "ls"})], "tool_use")
    log.result(ids[0], "ok")
    assert call(decide(log)).attempt == 1


def test_an_environment_without_edges_is_not_a_failed_model_request() -> None:
    log = Log()
    log.user("hi")
    log.running()
    log.draft(ev.edge_unavailable("env_1", 2, 30.0))  # told while the first model request runs
    ids = log.model([tool_use("toolu_1", "bash", {"command": "ls"})], "tool_use")
    log.result(ids[0], "The sandbox is unavailable: no edge", is_error=True)
    nxt = decide(log)
    assert nxt.delay_s == 0 and call(nxt).attempt == 1


def test_the_no_edge_error_names_the_environment_and_what_to_do() -> None:
    enrolled = ev.edge_unavailable("env_1", 2, 30.0).payload["error"]
    assert enrolled["type"] == "unknown_error" and enrolled["retry_status"] == {"type": "retrying"}
    assert enrolled["message"] == (
        "No edge of environment env_1 is connected: none of its 2 enrolled edge(s) has a tunnel up. "
        "Tool calls wait up to 30 s for an edge to connect, then fail; the session goes on."
    )
    assert enrolled["edge_unavailable"] == {
        "environment_id": "env_1",
        "edges_enrolled": 2,
        "edges_connected": 0,
        "edge_wait_s": 30.0,
    }
    none = ev.edge_unavailable("env_2", 0, 1.5).payload["error"]["message"]
    assert "env_2" in none and "no edge is enrolled in it (outpost-control tokens create" in none
    assert "wait up to 1.5 s" in none


def test_retries_exhausted_ends_the_turn_and_flushes_queued_input() -> None:
    log = Log()
    log.user("hi")
    log.running()
    log.user("queued")
    log.failed_model("exhausted")
    assert decide(log).idle
    log.user("again")
    assert types(decide(log)) == [ev.SESSION_STATUS_RUNNING]
    log.running()
    messages = call(decide(log)).request["messages"]
    assert [b["text"] for b in messages[0]["content"]] == ["hi", "queued", "again"]


def test_terminated_session_does_nothing() -> None:
    log = Log()
    log.user("hi")
    log.running()
    log.failed_model("terminal", "model_request_failed_error")
    log.user("anyone?")
    assert decide(log).idle


# -- inputs that are not plain messages ----------------------------------------------------------


def test_system_message_joins_the_message_it_follows_and_starts_no_turn_of_its_own() -> None:
    log = Log()
    log.user("hi")
    log.add(ev.SYSTEM_MESSAGE, {"content": [text("Be brief.")]})
    log.running()
    messages = call(decide(log)).request["messages"]
    assert [b["text"] for b in messages[0]["content"]] == ["hi", "Be brief."]
    log.model([text("Hello.")], "end_turn")
    log.idle()
    assert decide(log).idle


def test_system_message_after_a_tool_result_goes_with_the_next_request() -> None:
    log = Log()
    log.user("ticket?")
    log.running()
    ids = log.model([tool_use("toolu_C", "lookup_ticket", {"id": "1"})], "tool_use")
    log.idle("requires_action", ids)
    log.custom_result(ids[0], "open")
    log.add(ev.SYSTEM_MESSAGE, {"content": [text("The tracker is slow today.")]})
    log.running()
    last = call(decide(log)).request["messages"][-1]["content"]
    assert last[0]["type"] == "tool_result"
    assert last[1]["text"] == "The tracker is slow today."


def test_redacted_user_content_is_replaced_by_a_marker() -> None:
    log = Log()
    log.add(ev.USER_MESSAGE, {"content": [text("my key is"), {"type": "redacted"}]})
    log.running()
    content = call(decide(log)).request["messages"][0]["content"]
    assert [b["text"] for b in content] == ["my key is", "[redacted]"]


def test_a_status_fork_leaves_the_state_it_came_from_unchanged() -> None:
    """``decide`` looks ahead by folding its own ``session.status_running`` into a fork: the state
    it was given must come out as it went in (sharing what the status handlers change would start
    the turn twice)."""
    log = Log()
    log.user("first")
    log.user("second")
    state = fold(log.events)
    before = copy.deepcopy(state)
    ahead = Log()
    ahead.running()
    ahead.idle("retries_exhausted")
    fork = state.fork_for_status()
    for event in ahead.events:
        fork.apply(event)
    assert fork.staged and not fork.pending_inputs and fork.status == "idle"
    assert state == before
