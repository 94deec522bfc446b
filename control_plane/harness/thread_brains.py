"""Many brains on one log: the threads of a multiagent session, each its own stateless brain.

A session whose agent has a ``multiagent`` roster (resolved at session creation:
``control_plane.agents.multiagent``) runs one **primary thread** (the coordinator: the session's
agent) and a **subagent thread** per delegation. All threads share the session's one log:

* every event of a subagent thread carries ``session_thread_id`` (so the session stream shows it
  "cross-posted"); the primary thread's events carry none;
* a subagent thread's turn is bracketed by ``session.thread_status_running`` /
  ``session.thread_status_idle`` (and ``_rescheduled`` / ``_terminated``), its input is an
  ``agent.thread_message_received``.

:class:`SessionThreads` routes each event of the log to the thread it belongs to and folds it
there with the ordinary :mod:`~control_plane.harness.fold` (the subagent's status events and
received messages are read as ``session.status_*`` / ``user.message`` of its own log), so the
ordinary :func:`~control_plane.harness.step.decide` runs unchanged per thread.
:func:`decide_threads` asks each thread in turn (primary first, then subagents in creation order)
and returns the first with something to do; :meth:`SessionThreads.outgoing` turns the drafts of
a subagent's decision into its thread events. Nothing here does I/O.

Delegation (the coordinator's "hands to other brains"): the coordinator's model sees one tool per
roster member, ``call_agent_<name>`` (input ``{"message": str, "sandbox"?: "shared" | "own"}``).
Its ``agent.tool_use`` is never sent to a sandbox; instead, in one append (guarded by the log
position, with ids derived from the tool-use event id, so a crash replays nothing twice):
``session.thread_created`` (the thread id is derived from the tool-use event id),
``agent.thread_message_sent`` (primary) and ``agent.thread_message_received`` (the new thread).
The subagent thread then runs its own turns. Once it is at rest (idle, not waiting for an action,
or terminated), the coordinator appends ``agent.thread_message_sent`` (on the subagent thread: its
reply), ``agent.thread_message_received`` (primary) and the ``agent.tool_result`` of the call,
carrying the subagent's last message (and a note naming the thread). Several calls in one
assistant message start their threads together. A call naming ``session_thread_id`` (an existing
thread of its agent, at rest) is a follow-up: the same append without ``session.thread_created``
delivers its message to that thread, and its result is recorded the same way; a follow-up is
known delivered by its derived ``agent.thread_message_received`` id. Roster agents get the
session's skills offer (``skill_offers``), as the primary does.

Interrupts: ``user.interrupt`` without ``session_thread_id`` interrupts every thread; with one,
only that thread. ``session.updated`` and ``session.status_terminated`` reach every thread. Usage
is the session's: the threads share one running total (a subagent's ``session.usage`` snapshot is
the session's cumulative usage; budgets hold for the whole session).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from control_plane.harness import event_drafts as ev
from control_plane.harness.agent import AgentSpec, CustomTool
from control_plane.harness.config import HarnessConfig
from control_plane.harness.fold import SessionState, ToolUse
from control_plane.harness.mcp_offer import McpOffer
from control_plane.harness.step import Decision, decide
from control_plane.sessions.thread_views import primary_thread_id, thread_sandbox_key
from control_plane.sessions.usage import Budget

__all__ = [
    "DELEGATE_PREFIX",
    "THREAD_CREATED",
    "THREAD_MESSAGE_RECEIVED",
    "THREAD_MESSAGE_SENT",
    "THREAD_STATUS_TYPES",
    "RosterMember",
    "SessionThreads",
    "Thread",
    "decide_threads",
    "primary_thread_id",
    "roster_of",
    "spawned_thread_id",
]

DELEGATE_PREFIX = "call_agent_"
THREAD_CREATED = "session.thread_created"
THREAD_MESSAGE_SENT = "agent.thread_message_sent"
THREAD_MESSAGE_RECEIVED = "agent.thread_message_received"
#: A subagent thread's status events, by the session status event the fold knows.
THREAD_STATUS_TYPES: dict[str, str] = {
    ev.SESSION_STATUS_RUNNING: "session.thread_status_running",
    ev.SESSION_STATUS_IDLE: "session.thread_status_idle",
    ev.SESSION_STATUS_RESCHEDULED: "session.thread_status_rescheduled",
    ev.SESSION_STATUS_TERMINATED: "session.thread_status_terminated",
}
_SESSION_STATUS_OF = {v: k for k, v in THREAD_STATUS_TYPES.items()}
_TO_ALL = frozenset({ev.SESSION_UPDATED, ev.SESSION_STATUS_TERMINATED})
_TOOL_USES = frozenset({ev.AGENT_TOOL_USE, ev.AGENT_CUSTOM_TOOL_USE, ev.AGENT_MCP_TOOL_USE})
#: Client answers to a tool use, and the payload field naming it.
_ANSWERS = {
    ev.USER_TOOL_CONFIRMATION: "tool_use_id",
    ev.USER_TOOL_RESULT: "tool_use_id",
    ev.USER_CUSTOM_TOOL_RESULT: "custom_tool_use_id",
}
_SANDBOX_MODES = ("shared", "own")
_DELEGATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "message": {"type": "string", "description": "What to ask of the agent (its whole brief)."},
        "sandbox": {
            "type": "string",
            "enum": list(_SANDBOX_MODES),
            "description": (
                "shared (default): the agent works in this session's sandbox, seeing your files; "
                "own: it gets a sandbox of its own. Not with session_thread_id."
            ),
        },
        "session_thread_id": {
            "type": "string",
            "description": (
                "To send a follow-up to a thread this agent already worked in (the id a previous "
                "result of this tool named), keeping what it knows; omit to start a new thread."
            ),
        },
    },
    "required": ["message"],
}


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:24]


def spawned_thread_id(tool_use_id: str) -> str:
    """The id of the thread a coordinator's ``call_agent_*`` call (its event id) spawns."""
    return "sthr_" + _digest("spawned", tool_use_id)


def _event_id(tool_use_id: str, what: str) -> str:
    return "sevt_" + _digest(what, tool_use_id)


@dataclass(frozen=True, slots=True)
class RosterMember:
    """An agent the coordinator may delegate to: its name, tool name and spec."""

    name: str
    tool_name: str
    agent: AgentSpec


def roster_of(
    agent: Mapping[str, Any], *, memory: str | None = None, skill_offers: Any = None
) -> tuple[RosterMember, ...]:
    """The roster of a session's resolved agent snapshot (``multiagent.agents`` as the session
    stores them: full agent snapshots and advisors); empty without ``multiagent``. Roster agents
    are offered the session's skills (``skill_offers``: those in the sandbox), as the primary is;
    an advisor (no tools, no sandbox) is not."""
    multiagent = agent.get("multiagent")
    if not isinstance(multiagent, Mapping):
        return ()
    members: list[RosterMember] = []
    taken: set[str] = set()
    for entry in _roster_entries(multiagent):
        if entry.get("type") == "advisor":
            name = "advisor"
            spec = AgentSpec(model=str(entry.get("model")), system=None)
        else:
            name = str(entry.get("name") or entry.get("id"))
            spec = AgentSpec.from_json(entry, memory=memory, skill_offers=skill_offers)
        slug = re.sub(r"[^a-zA-Z0-9_-]", "_", name)[:48] or "agent"
        tool_name, n = DELEGATE_PREFIX + slug, 2
        while tool_name in taken:
            tool_name, n = f"{DELEGATE_PREFIX}{slug}_{n}", n + 1
        taken.add(tool_name)
        members.append(RosterMember(name, tool_name, spec))
    return tuple(members)


def _roster_entries(multiagent: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    if multiagent.get("type") == "coordinator":
        entries = multiagent.get("agents")
    else:  # multiagent_20261001: the predefined subagents, then the advisor
        subagents = multiagent.get("subagents")
        entries = subagents.get("predefined_agents") if isinstance(subagents, Mapping) else None
        advisor = multiagent.get("advisor")
        if isinstance(advisor, Mapping) and advisor.get("type") == "enabled":
            entries = [*(entries or ()), {"type": "advisor", "model": advisor.get("model")}]
    return [e for e in entries or () if isinstance(e, Mapping)]


def delegate_tools(roster: Sequence[RosterMember]) -> tuple[CustomTool, ...]:
    """The coordinator's delegation tools (``call_agent_<name>``), in roster order."""
    return tuple(
        CustomTool(
            name=m.tool_name,
            description=(
                f"Delegate a task to the agent {m.name!r}: it works on it in a thread of its own and "
                "its final answer comes back as this tool's result."
            ),
            input_schema=_DELEGATE_SCHEMA,
        )
        for m in roster
    )


@dataclass
class Thread:
    """One brain: its agent and the state folded from its events."""

    id: str
    agent_name: str
    agent: AgentSpec
    state: SessionState
    primary: bool = False
    parent_id: str | None = None
    sandbox: str = "shared"  # shared | own (the hands it works with)


@dataclass(frozen=True)
class _View:
    """A stored event as its thread's fold reads it."""

    id: str
    type: str
    payload: dict[str, Any]
    seq: int | None = None
    processed_at: datetime | None = None


@dataclass
class SessionThreads:
    """The threads of a session, folded from its log (one thread for a single-agent session)."""

    session_id: str
    primary: Thread
    roster: tuple[RosterMember, ...] = ()
    threads: dict[str, Thread] = field(default_factory=dict)  # subagent threads, in creation order
    _calls: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)  # thread id → (tool, input)
    _tool_owner: dict[str, Thread] = field(default_factory=dict)  # a subagent's tool-use event id → it
    _received: set[str] = field(default_factory=set)  # ids of the messages subagent threads received

    @classmethod
    def for_session(
        cls,
        session_id: str,
        agent: AgentSpec,
        snapshot: Mapping[str, Any],
        *,
        memory: str | None = None,
        skill_offers: Any = None,
    ) -> SessionThreads:
        """The threads of session ``session_id`` whose agent (parsed as ``agent``) is ``snapshot``;
        ``memory`` / ``skill_offers``: the session's, for the roster agents' prompts."""
        roster = roster_of(snapshot, memory=memory, skill_offers=skill_offers)
        if agent.worker_tools:  # a worker-run environment: every thread's toolset calls go to the worker
            roster = tuple(replace(m, agent=replace(m.agent, worker_tools=True)) for m in roster)
        if roster:
            agent = replace(agent, delegates=delegate_tools(roster))
        name = str(snapshot.get("name") or "agent")
        primary = Thread(primary_thread_id(session_id), name, agent, SessionState(), primary=True)
        return cls(session_id, primary, roster)

    @property
    def all(self) -> list[Thread]:
        return [self.primary, *self.threads.values()]

    @property
    def last_seq(self) -> int:
        return self.primary.state.last_seq

    def set_budget(self, budget: Budget | None) -> None:
        for thread in self.all:
            thread.state.budget = budget

    def member(self, tool_name: str) -> RosterMember | None:
        return next((m for m in self.roster if m.tool_name == tool_name), None)

    # -- folding ------------------------------------------------------------------------------
    def apply(self, event: ev.LogEvent) -> None:
        """Fold one stored event into the thread(s) it belongs to (events in log order)."""
        tid = event.payload.get("session_thread_id")
        if event.type == THREAD_CREATED and isinstance(tid, str):
            self._created(tid, event)
        elif event.type == ev.USER_INTERRUPT and tid is not None:
            target = self.primary if tid == self.primary.id else self.threads.get(str(tid))
            if target is not None:
                target.state.apply(event)
        elif event.type in _TO_ALL or event.type == ev.USER_INTERRUPT:
            for thread in self.all:
                thread.state.apply(event)
        elif isinstance(tid, str) and tid != self.primary.id:
            owner = self.threads.get(tid)
            if owner is not None:
                owner.state.apply(_as_own(event))
                if event.type == THREAD_MESSAGE_RECEIVED:
                    self._received.add(event.id)
                if event.type in _TOOL_USES:
                    self._tool_owner[event.id] = owner
        elif event.type in _ANSWERS and str(event.payload.get(_ANSWERS[event.type])) in self._tool_owner:
            # a client's answer to a subagent's call that does not name the thread: the call's thread
            self._tool_owner[str(event.payload.get(_ANSWERS[event.type]))].state.apply(event)
        else:
            self.primary.state.apply(event)
            if event.type == ev.AGENT_TOOL_USE and self.member(str(event.payload.get("name"))) is not None:
                self._calls[spawned_thread_id(event.id)] = (
                    str(event.payload.get("name")),
                    dict(event.payload.get("input") or {}),
                )
        seq = getattr(event, "seq", None)
        if isinstance(seq, int):
            for thread in self.all:
                thread.state.last_seq = seq

    def _created(self, tid: str, event: ev.LogEvent) -> None:
        tool, call_input = self._calls.get(tid, ("", {}))
        member = self.member(tool) or next(
            (m for m in self.roster if m.name == event.payload.get("agent_name")), None
        )
        if member is None or tid in self.threads:
            return
        state = SessionState(budget=self.primary.state.budget)
        state.usage = self.primary.state.usage  # one running total for the session
        sandbox = "own" if call_input.get("sandbox") == "own" else "shared"
        self.threads[tid] = Thread(
            tid, member.name, member.agent, state, parent_id=self.primary.id, sandbox=sandbox
        )

    # -- appending ----------------------------------------------------------------------------
    def outgoing(self, thread: Thread, drafts: Sequence[ev.Draft]) -> list[ev.Draft]:
        """The drafts of ``thread``'s decision as that thread's events (the primary's unchanged):
        status events become ``session.thread_status_*``; all but ``session.usage`` carry
        ``session_thread_id``."""
        if thread.primary:
            return list(drafts)
        out: list[ev.Draft] = []
        for draft in drafts:
            payload = dict(draft.payload)
            kind = THREAD_STATUS_TYPES.get(draft.type, draft.type)
            if draft.type in THREAD_STATUS_TYPES:
                payload["agent_name"] = thread.agent_name
            if draft.type != ev.SESSION_USAGE:
                payload["session_thread_id"] = thread.id
            out.append(ev.Draft(kind, payload, draft.id))
        return out

    def interrupts(self, event: ev.LogEvent, thread: Thread) -> bool:
        """Whether ``user.interrupt`` ``event`` interrupts ``thread``."""
        tid = event.payload.get("session_thread_id")
        return tid is None or tid == thread.id

    def sandbox_key(self, thread: Thread) -> str:
        """The key of the sandbox ``thread`` works in: the session's, or its own."""
        if thread.sandbox == "shared":
            return self.session_id
        return thread_sandbox_key(self.session_id, thread.id)


def _as_own(event: ev.LogEvent) -> _View:
    """A subagent thread's event as its own fold reads it."""
    kind = _SESSION_STATUS_OF.get(event.type, event.type)
    if event.type == THREAD_MESSAGE_RECEIVED:
        kind = ev.USER_MESSAGE
    return _View(
        event.id,
        kind,
        event.payload,
        getattr(event, "seq", None),
        getattr(event, "processed_at", None),
    )


# -- deciding ---------------------------------------------------------------------------------------


def decide_threads(
    threads: SessionThreads,
    config: HarnessConfig,
    now: datetime | None = None,
    mcp: McpOffer | None = None,
    *,
    only: Thread | None = None,
) -> tuple[Thread, Decision]:
    """The thread with something to do and its decision (``only``: that thread's; ``mcp``: the
    offer for it). A retry backoff of one thread does not hold the others up: the shortest wait
    is returned only when no thread has anything else to do."""
    waiting: tuple[Thread, Decision] | None = None
    for thread in [only] if only is not None else threads.all:
        decision = decide(thread.agent, thread.state, config, now, mcp)
        if thread.primary and threads.roster:
            decision = _delegations(threads, decision)
        if decision.idle:
            continue
        if decision.appends or decision.effect is not None:
            return thread, decision
        if waiting is None or decision.delay_s < waiting[1].delay_s:
            waiting = (thread, decision)
    return waiting or (threads.primary, Decision(reason="idle"))


def _delegations(threads: SessionThreads, decision: Decision) -> Decision:
    """The coordinator's decision with its ``call_agent_*`` calls handled: threads started (or
    follow-ups delivered) for new calls, results recorded for calls whose thread is at rest; empty
    while they all work."""
    effect = decision.effect
    if effect is None or threads.member(getattr(effect, "name", "")) is None:
        return decision
    state = threads.primary.state
    calls = [t for t in state.open_tools if t.answer is None and threads.member(t.name) is not None]
    drafts: list[ev.Draft] = []
    claimed: set[str] = set()  # threads given a follow-up in this message
    for call in calls:
        if "session_thread_id" in call.input:
            drafts.extend(_follow_up(threads, call, claimed))
            continue
        thread = threads.threads.get(spawned_thread_id(call.event_id))
        if thread is None:
            drafts.extend(_start(threads, call))
        elif _at_rest(thread.state):
            drafts.extend(_finish(threads, call, thread))
    if drafts:
        return Decision(tuple(drafts), reason="delegate")
    return Decision(reason="waiting for subagents")


def _start(threads: SessionThreads, call: ToolUse) -> list[ev.Draft]:
    member = threads.member(call.name)
    assert member is not None
    message = call.input.get("message")
    sandbox = call.input.get("sandbox", "shared")
    if not isinstance(message, str) or not message.strip() or sandbox not in _SANDBOX_MODES:
        return [_refused(call, _USAGE)]
    tid = spawned_thread_id(call.event_id)
    return [
        ev.Draft(
            THREAD_CREATED,
            {"session_thread_id": tid, "agent_name": member.name, "workflow_run_id": None},
            _event_id(call.event_id, "created"),
        ),
        *_deliver(threads, call, tid, member.name, message),
    ]


def _follow_up(threads: SessionThreads, call: ToolUse, claimed: set[str]) -> list[ev.Draft]:
    """A call naming ``session_thread_id``: its message delivered to that thread (at rest, running
    the call's agent), or its result once the thread is at rest again."""
    target = call.input.get("session_thread_id")
    thread = threads.threads.get(target) if isinstance(target, str) else None
    if thread is not None and _event_id(call.event_id, "received") in threads._received:
        claimed.add(thread.id)
        return _finish(threads, call, thread) if _at_rest(thread.state) else []
    member = threads.member(call.name)
    assert member is not None
    message = call.input.get("message")
    if not isinstance(message, str) or not message.strip() or "sandbox" in call.input:
        return [_refused(call, _USAGE + " A thread keeps its sandbox: no sandbox with session_thread_id.")]
    if thread is None:
        return [_refused(call, f"This session has no subagent thread {target!r}.")]
    if thread.agent_name != member.name:
        text = f"Thread {thread.id} runs the agent {thread.agent_name!r}, not {member.name!r}."
        return [_refused(call, text)]
    if thread.state.terminated:
        return [_refused(call, f"Thread {thread.id} has ended; start a new one (omit session_thread_id).")]
    if not _at_rest(thread.state) or thread.id in claimed:
        return [_refused(call, f"Thread {thread.id} is working on another call; wait for its result.")]
    claimed.add(thread.id)
    return _deliver(threads, call, thread.id, member.name, message)


_USAGE = (
    'call_agent tools take {"message": "<non-empty text>", "sandbox"?: "shared" | "own", '
    '"session_thread_id"?: "<a thread this agent worked in>"}.'
)


def _refused(call: ToolUse, text: str) -> ev.Draft:
    return ev.tool_result(call.event_id, ev.text_content(text), is_error=True)


def _deliver(threads: SessionThreads, call: ToolUse, tid: str, name: str, message: str) -> list[ev.Draft]:
    """The call's message, sent by the primary thread and received by thread ``tid``."""
    content = ev.text_content(message)
    return [
        ev.Draft(
            THREAD_MESSAGE_SENT,
            {"to_session_thread_id": tid, "to_agent_name": name, "content": content},
            _event_id(call.event_id, "sent"),
        ),
        ev.Draft(
            THREAD_MESSAGE_RECEIVED,
            {"session_thread_id": tid, "from_session_thread_id": threads.primary.id, "content": content},
            _event_id(call.event_id, "received"),
        ),
    ]


def _at_rest(state: SessionState) -> bool:
    if state.terminated:
        return True
    return state.status == "idle" and not state.in_turn and not state.pending_inputs


def _finish(threads: SessionThreads, call: ToolUse, thread: Thread) -> list[ev.Draft]:
    reply = _last_reply(thread.state)
    if thread.state.terminated:
        text = f"The agent {thread.agent_name!r} stopped with an error before it finished."
        content, is_error = ev.text_content(reply or text), True
    else:
        content, is_error = ev.text_content(reply or "(the agent sent no text)"), False
    return [
        ev.Draft(
            THREAD_MESSAGE_SENT,
            {"session_thread_id": thread.id, "to_session_thread_id": threads.primary.id, "content": content},
            _event_id(call.event_id, "reply-sent"),
        ),
        ev.Draft(
            THREAD_MESSAGE_RECEIVED,
            {"from_session_thread_id": thread.id, "from_agent_name": thread.agent_name, "content": content},
            _event_id(call.event_id, "reply-received"),
        ),
        ev.Draft(
            ev.AGENT_TOOL_RESULT,
            {
                "tool_use_id": call.event_id,
                "content": [*content, _thread_note(call, thread)],
                "is_error": is_error,
            },
            _event_id(call.event_id, "result"),
        ),
    ]


def _thread_note(call: ToolUse, thread: Thread) -> dict[str, Any]:
    """The result's last block: how the coordinator sends this thread a follow-up."""
    text = f"[session_thread_id: {thread.id} (give it to {call.name} to follow up in this thread)]"
    return {"type": "text", "text": text}


def _last_reply(state: SessionState) -> str:
    """The text of the thread's last assistant message."""
    for message in reversed(state.messages):
        if message["role"] == "assistant":
            texts = [b.get("text", "") for b in message["content"] if b.get("type") == "text"]
            return "\n".join(t for t in texts if t)
    return ""
