"""Golden logs of multiagent sessions: recorded logs with a coordinator and its subagent threads,
and the decision :func:`~control_plane.harness.thread_brains.decide_threads` must make on each
(``golden/threads/``): which thread acts, and its appends as that thread's events.

As ``test_harness_golden.py``: ``UPDATE_GOLDEN=1 pytest tests/unit/harness/test_harness_threads_golden.py``
re-records; review the diff. Logs are built by performing the decisions themselves (a scripted
model answers each thread), as the driver does.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from harness_logs import AGENT_JSON, SESSION, Log, message, text, tool_use

from control_plane.harness import event_drafts as ev
from control_plane.harness.agent import AgentSpec
from control_plane.harness.config import HarnessConfig
from control_plane.harness.step import CallModel, Decision, model_output_events
from control_plane.harness.thread_brains import SessionThreads, Thread, decide_threads
from control_plane.store.base import Event

GOLDEN = Path(__file__).parent / "golden" / "threads"
CONFIG = HarnessConfig(model_attempts=3, model_backoff_initial_s=1.0, max_tokens=1024)


def _member(agent_id: str, name: str, system: str) -> dict[str, Any]:
    return {**AGENT_JSON, "id": agent_id, "name": name, "system": system, "tools": []}


SESSION_AGENT: dict[str, Any] = {
    **AGENT_JSON,
    "name": "lead",
    "system": "You coordinate.",
    "tools": [],
    "multiagent": {
        "type": "coordinator",
        "agents": [
            _member("agent_r", "researcher", "You research."),
            _member("agent_w", "writer", "You write."),
            {"type": "advisor", "model": "claude-test"},
        ],
    },
}


def _threads(events: list[Event]) -> SessionThreads:
    threads = SessionThreads.for_session(SESSION, AgentSpec.from_json(SESSION_AGENT), SESSION_AGENT)
    for event in events:
        threads.apply(event)
    return threads


def _decide(log: Log) -> tuple[Thread, Decision, SessionThreads]:
    threads = _threads(log.events)
    thread, decision = decide_threads(threads, CONFIG, log.now)
    return thread, decision, threads


def _perform(log: Log, answer: Callable[[Thread], dict[str, Any]] | None = None) -> Thread:
    """Perform one decision as the driver does (a model call answered by ``answer``)."""
    thread, decision, threads = _decide(log)
    assert not decision.idle, decision.reason
    drafts = list(decision.appends)
    start_id = None
    if isinstance(decision.effect, CallModel):
        start_id = log.new_id()
        drafts.append(ev.Draft(ev.SPAN_MODEL_REQUEST_START, {}, start_id))
    for draft in threads.outgoing(thread, drafts):
        log.draft(draft)
    if isinstance(decision.effect, CallModel):
        assert answer is not None and start_id is not None
        msg = answer(thread)
        ids = [log.new_id() for _ in msg["content"]]
        usage = dict(thread.state.usage)
        for draft in threads.outgoing(thread, model_output_events(thread.agent, msg, ids, start_id, usage)):
            log.draft(draft)
    return thread


def _delegating(thread: Thread) -> dict[str, Any]:
    return message(
        [
            text("Delegating."),
            tool_use("toolu_r", "call_agent_researcher", {"message": "Find the capital of France."}),
            tool_use("toolu_w", "call_agent_writer", {"message": "Write a sentence.", "sandbox": "own"}),
        ],
        "tool_use",
    )


def _reply(thread: Thread) -> dict[str, Any]:
    return message([text(f"{thread.agent_name} says: done.")], "end_turn")


def _delegate(log: Log) -> None:
    log.user("Write about Paris.")
    _perform(log, _delegating)  # running + the coordinator's model call


def _researcher_first_call(log: Log) -> None:
    _delegate(log)
    _perform(log)  # the threads are started


def _researcher_ends_turn(log: Log) -> None:
    _researcher_first_call(log)
    _perform(log, _reply)  # the researcher's running + model call


def _waiting_for_writer(log: Log) -> None:
    _researcher_ends_turn(log)
    _perform(log)  # the researcher's idle
    _perform(log)  # its reply returned to the coordinator


def _writer_reply_returns(log: Log) -> None:
    _waiting_for_writer(log)
    _perform(log, _reply)  # the writer's running + model call
    _perform(log)  # the writer's idle


def _coordinator_resumes(log: Log) -> None:
    _writer_reply_returns(log)
    _perform(log)  # the writer's reply returned


def _interrupt_one_thread(log: Log) -> None:
    _researcher_first_call(log)
    thread, decision, threads = _decide(log)
    start = log.new_id()
    for draft in threads.outgoing(
        thread, [*decision.appends, ev.Draft(ev.SPAN_MODEL_REQUEST_START, {}, start)]
    ):
        log.draft(draft)  # the researcher's request is in flight ...
    log.add(ev.USER_INTERRUPT, {"session_thread_id": thread.id})  # ... when the user stops it


def _interrupt_all(log: Log) -> None:
    _researcher_ends_turn(log)
    log.interrupt()


def _bad_delegation_input(log: Log) -> None:
    log.user("Ask the advisor.")
    _perform(log, lambda t: message([tool_use("toolu_a", "call_agent_advisor", {"brief": "?"})], "tool_use"))


def _thread_of(log: Log, name: str) -> str:
    return next(
        str(e.payload["session_thread_id"])
        for e in log.events
        if e.type == "session.thread_created" and e.payload["agent_name"] == name
    )


def _follow_up(log: Log) -> None:
    """After the coordinator's first answer, the user asks more; it follows up in the researcher's
    thread (a call naming its ``session_thread_id``)."""
    _coordinator_resumes(log)
    _perform(log, lambda t: message([text("Paris it is.")], "end_turn"))  # the coordinator answers
    _perform(log)  # idle
    log.user("And its population?")
    researcher = _thread_of(log, "researcher")
    _perform(
        log,
        lambda t: message(
            [
                tool_use(
                    "toolu_f",
                    "call_agent_researcher",
                    {"message": "Population?", "session_thread_id": researcher},
                )
            ],
            "tool_use",
        ),
    )


def _follow_up_runs(log: Log) -> None:
    _follow_up(log)
    _perform(log)  # the follow-up delivered to the researcher's thread


def _follow_up_returns(log: Log) -> None:
    _follow_up_runs(log)
    _perform(log, lambda t: message([text("About 2.1 million.")], "end_turn"))
    _perform(log)  # the researcher's idle


def _follow_up_refused(log: Log) -> None:
    _coordinator_resumes(log)
    _perform(log, lambda t: message([text("Paris it is.")], "end_turn"))
    _perform(log)
    log.user("More.")
    writer = _thread_of(log, "writer")
    calls = [
        tool_use("toolu_x", "call_agent_researcher", {"message": "?", "session_thread_id": "sthr_nope"}),
        tool_use("toolu_y", "call_agent_researcher", {"message": "?", "session_thread_id": writer}),
    ]
    _perform(log, lambda t: message(calls, "tool_use"))


SCENARIOS: dict[str, Callable[[Log], None]] = {
    "threads_delegate_starts_threads": _delegate,
    "threads_subagent_first_call": _researcher_first_call,
    "threads_subagent_ends_turn": _researcher_ends_turn,
    "threads_waiting_subagent_runs": _waiting_for_writer,
    "threads_reply_returns": _writer_reply_returns,
    "threads_coordinator_resumes": _coordinator_resumes,
    "threads_interrupt_one_thread": _interrupt_one_thread,
    "threads_interrupt_all": _interrupt_all,
    "threads_bad_delegation_input": _bad_delegation_input,
    "threads_follow_up_delivered": _follow_up,
    "threads_follow_up_runs": _follow_up_runs,
    "threads_follow_up_returns": _follow_up_returns,
    "threads_follow_up_refused": _follow_up_refused,
}


def decision_json(thread: Thread, decision: Decision, threads: SessionThreads) -> dict[str, Any]:
    effect: dict[str, Any] | None = None
    if isinstance(decision.effect, CallModel):
        effect = {
            "kind": "call_model",
            "attempt": decision.effect.attempt,
            "request": decision.effect.request,
        }
    else:
        assert decision.effect is None, decision.effect
    appends = threads.outgoing(thread, decision.appends)
    return {
        "thread": "primary" if thread.primary else thread.agent_name,
        "appends": [{"type": d.type, "payload": d.payload, "id": d.id} for d in appends],
        "effect": effect,
        "delay_s": decision.delay_s,
    }


def _record(name: str) -> dict[str, Any]:
    log = Log(agent=AgentSpec.from_json(SESSION_AGENT))
    SCENARIOS[name](log)
    thread, decision, threads = _decide(log)
    return {
        "scenario": name,
        "agent": SESSION_AGENT,
        "now": log.now.isoformat(),
        "events": [
            {"id": e.id, "type": e.type, "payload": e.payload, "processed_at": e.processed_at.isoformat()}
            for e in log.events
        ],
        "expected": decision_json(thread, decision, threads),
    }


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_threads_golden_log(name: str) -> None:
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
    agent = golden["agent"]
    threads = SessionThreads.for_session(SESSION, AgentSpec.from_json(agent), agent)
    for event in events:
        threads.apply(event)
    thread, decision = decide_threads(threads, CONFIG, datetime.fromisoformat(golden["now"]))
    assert decision_json(thread, decision, threads) == golden["expected"]


def test_every_threads_golden_file_has_a_scenario() -> None:
    assert sorted(p.stem for p in GOLDEN.glob("*.json")) == sorted(SCENARIOS)


def _decided(name: str) -> dict[str, Any]:
    return _record(name)["expected"]


def test_what_the_goldens_mean() -> None:
    """The decisions, said plainly (the golden files hold the whole requests)."""
    start = _decided("threads_delegate_starts_threads")
    assert start["thread"] == "primary" and start["effect"] is None
    kinds = [a["type"] for a in start["appends"]]
    assert (
        kinds == ["session.thread_created", "agent.thread_message_sent", "agent.thread_message_received"] * 2
    )
    request = _record("threads_delegate_starts_threads")
    first_call = next(e for e in request["events"] if e["type"] == "agent.tool_use")
    assert (
        first_call["payload"]["evaluated_permission"] == "allow"
        and "toolset_name" not in first_call["payload"]
    )

    sub = _decided("threads_subagent_first_call")
    assert sub["thread"] == "researcher" and [a["type"] for a in sub["appends"]] == [
        "session.thread_status_running"
    ]
    assert sub["effect"]["request"]["system"][0]["text"] == "You research."
    assert sub["effect"]["request"]["messages"][0]["content"][0]["text"] == "Find the capital of France."

    ends = _decided("threads_subagent_ends_turn")
    assert ends["thread"] == "researcher"
    assert [a["type"] for a in ends["appends"]] == ["session.thread_status_idle"]
    assert ends["appends"][0]["payload"]["agent_name"] == "researcher"

    waiting = _decided("threads_waiting_subagent_runs")  # the coordinator waits: the writer runs
    assert waiting["thread"] == "writer" and waiting["effect"]["kind"] == "call_model"

    back = _decided("threads_reply_returns")
    assert back["thread"] == "primary"
    assert [a["type"] for a in back["appends"]] == [
        "agent.thread_message_sent",
        "agent.thread_message_received",
        "agent.tool_result",
    ]
    reply, note = back["appends"][2]["payload"]["content"]
    assert reply == {"type": "text", "text": "writer says: done."}
    assert note["text"].startswith(
        f"[session_thread_id: {back['appends'][0]['payload']['session_thread_id']} "
    )

    resumed = _decided("threads_coordinator_resumes")
    assert resumed["thread"] == "primary" and resumed["effect"]["kind"] == "call_model"
    results = [
        b for b in resumed["effect"]["request"]["messages"][-1]["content"] if b["type"] == "tool_result"
    ]
    assert [r["tool_use_id"] for r in results] == ["toolu_r", "toolu_w"]

    one = _decided("threads_interrupt_one_thread")
    assert one["thread"] == "researcher"
    assert [a["type"] for a in one["appends"]] == ["span.model_request_end", "session.thread_status_idle"]

    everyone = _decided("threads_interrupt_all")
    assert everyone["thread"] == "primary"  # the coordinator's turn ends first; each thread then its own
    assert [a["type"] for a in everyone["appends"]][-1] == "session.status_idle"

    follow = _decided("threads_follow_up_delivered")  # no new thread: the message to the researcher's
    assert follow["thread"] == "primary" and follow["effect"] is None
    assert [a["type"] for a in follow["appends"]] == [
        "agent.thread_message_sent",
        "agent.thread_message_received",
    ]
    runs = _decided("threads_follow_up_runs")  # the researcher runs again, with its whole history
    assert runs["thread"] == "researcher" and runs["effect"]["kind"] == "call_model"
    said = json.dumps(runs["effect"]["request"]["messages"])
    assert (
        "Find the capital of France." in said and "researcher says: done." in said and "Population?" in said
    )
    returns = _decided("threads_follow_up_returns")
    assert returns["thread"] == "primary"
    assert returns["appends"][2]["payload"]["content"][0]["text"] == "About 2.1 million."
    refused = _decided("threads_follow_up_refused")
    assert [a["type"] for a in refused["appends"]] == ["agent.tool_result"] * 2
    assert all(a["payload"]["is_error"] for a in refused["appends"])
    assert "no subagent thread 'sthr_nope'" in refused["appends"][0]["payload"]["content"][0]["text"]
    assert "runs the agent 'writer'" in refused["appends"][1]["payload"]["content"][0]["text"]

    bad = _decided("threads_bad_delegation_input")
    assert [a["type"] for a in bad["appends"]] == ["agent.tool_result"]
    assert bad["appends"][0]["payload"]["is_error"] is True


def test_a_client_answer_reaches_the_subagent_whose_call_it_answers() -> None:
    """A subagent's custom tool call waits for the client; the client's result, with or without
    ``session_thread_id``, is folded into that thread (which then calls its model again)."""
    ask = {"type": "custom", "name": "ask_human", "description": "Ask.", "input_schema": {"type": "object"}}
    agent = {
        **SESSION_AGENT,
        "multiagent": {
            "type": "coordinator",
            "agents": [{**_member("agent_r", "researcher", "R."), "tools": [ask]}],
        },
    }
    log = Log(agent=AgentSpec.from_json(agent))
    log.user("Go.")

    def perform(answer: Callable[[Thread], dict[str, Any]] | None = None) -> tuple[Thread, Decision]:
        threads = SessionThreads.for_session(SESSION, AgentSpec.from_json(agent), agent)
        for event in log.events:
            threads.apply(event)
        thread, decision = decide_threads(threads, CONFIG, log.now)
        drafts = list(decision.appends)
        start = log.new_id()
        if isinstance(decision.effect, CallModel):
            drafts.append(ev.Draft(ev.SPAN_MODEL_REQUEST_START, {}, start))
        for draft in threads.outgoing(thread, drafts):
            log.draft(draft)
        if isinstance(decision.effect, CallModel) and answer is not None:
            msg = answer(thread)
            ids = [log.new_id() for _ in msg["content"]]
            for draft in threads.outgoing(
                thread, model_output_events(thread.agent, msg, ids, start, dict(thread.state.usage))
            ):
                log.draft(draft)
        return thread, decision

    perform(
        lambda t: message([tool_use("toolu_r", "call_agent_researcher", {"message": "Ask."})], "tool_use")
    )
    perform()  # the thread starts
    perform(lambda t: message([tool_use("toolu_h", "ask_human", {})], "tool_use"))
    thread, decision = perform()  # requires_action, on the researcher's thread
    assert [d.type for d in decision.appends] == [ev.SESSION_STATUS_IDLE] and not thread.primary
    custom_use = next(e for e in log.events if e.type == ev.AGENT_CUSTOM_TOOL_USE)
    assert custom_use.payload["session_thread_id"] == thread.id
    log.custom_result(custom_use.id, "42")  # no session_thread_id: found by the call it answers
    thread, decision = perform()
    assert not thread.primary and [d.type for d in decision.appends] == [ev.SESSION_STATUS_RUNNING]
    thread, decision = perform(_reply)
    assert not thread.primary and isinstance(decision.effect, CallModel)
    assert "42" in json.dumps(decision.effect.request["messages"][-1])


def test_in_a_worker_run_environment_every_thread_leaves_toolset_calls_to_the_worker() -> None:
    """A worker-run session's coordinator and its subagents all wait for ``user.tool_result``
    (the worker's) instead of dispatching toolset calls to an edge."""
    import dataclasses

    agent = dataclasses.replace(AgentSpec.from_json(SESSION_AGENT), worker_tools=True)
    threads = SessionThreads.for_session(SESSION, agent, SESSION_AGENT)
    assert threads.primary.agent.worker_tools
    assert threads.roster and all(member.agent.worker_tools for member in threads.roster)
    plain = SessionThreads.for_session(SESSION, AgentSpec.from_json(SESSION_AGENT), SESSION_AGENT)
    assert not any(member.agent.worker_tools for member in plain.roster)


def test_roster_agents_are_offered_the_sessions_skills() -> None:
    """As the primary is (the skills are in the sandbox the subagents work in); not the advisor."""
    offers = [{"skill_id": "skill_1", "version": "1", "name": "pdf", "description": "Read PDFs."}]
    threads = SessionThreads.for_session(
        SESSION, AgentSpec.from_json(SESSION_AGENT), SESSION_AGENT, skill_offers=offers
    )
    prompts = {m.name: json.dumps(m.agent.system_param()) for m in threads.roster}
    assert "/mnt/skills/pdf/SKILL.md" in prompts["researcher"] and "You research." in prompts["researcher"]
    assert "/mnt/skills/pdf/SKILL.md" in prompts["writer"]
    assert "skills" not in prompts["advisor"]
