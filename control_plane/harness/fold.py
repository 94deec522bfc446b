"""Fold a session's event log into the state the harness decides from (pure: no I/O, no clock).

The conversation sent to the model is rebuilt from the log alone:

* a **turn** starts at a ``session.status_running`` while no turn is open; it consumes the oldest
  unconsumed ``user.message``, one per turn, in log order; input arriving during a turn waits for a
  later turn. A ``system.message`` (always sent right after a message or tool result) joins the
  ``user.message`` before it, or the next request's user content after a tool result;
* each ``span.model_request_start`` commits what is staged for the model (tool results of the
  previous assistant message, in ``tool_use`` order, then consumed user content) as a user message;
  the start event is appended with ``expected_seq``, so the log prefix before it is exactly what the
  request was built from and a replay rebuilds the same request;
* each ``span.model_request_end`` carrying ``assistant_message`` adds that complete message as the
  assistant turn (original ``tool_use`` ids, thinking signatures) and opens its tool uses;
* a tool use is answered by the first ``agent.tool_result`` / ``user.tool_result`` /
  ``user.custom_tool_result`` / ``agent.mcp_tool_result`` naming its event id; later answers are
  ignored. An ``agent.mcp_tool_use`` names the MCP server and the server's own tool name; the
  model's ``tool_use`` block keeps the namespaced name it called;
* a ``session.error`` about an MCP server (``mcp_*`` with ``mcp_server_name``) marks the server
  unavailable for the rest of the turn; it is not a failed model request, and neither is one
  about a repository the edge could not clone (``repository_*``), nor one saying the sandbox moved
  (``sandbox_moved``) or the environment has no connected edge (``edge_unavailable``);
* a turn ends at ``session.status_idle`` (except ``requires_action``, which only pauses it). When it
  ends by ``user.interrupt``, the inputs queued before the interrupt are folded into the
  conversation without a turn of their own (control returns to the user); on ``retries_exhausted``
  and ``budget_reached`` every queued input is folded in that way ("queued inputs flushed"). Tool
  uses of an ended turn that never got an answer are answered, for the model, with a synthesized
  error result;
* an ``agent.thread_context_compacted`` replaces the messages it summarized with one message holding
  its summary (:mod:`~control_plane.harness.context_window`; the log keeps them);
* the session's ``budget`` is the one it was created with (given to :func:`fold`) until a
  ``session.updated`` carrying ``budget`` replaces it (``null``: removed);
* outcomes (``user.define_outcome``, ``span.outcome_evaluation_*``): see
  :mod:`~control_plane.harness.outcome_state`.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from control_plane.harness import event_drafts as ev
from control_plane.harness.agent import AgentSpec
from control_plane.harness.context_window import ContextState, compacted_messages
from control_plane.harness.outcome_state import OutcomeTracker
from control_plane.harness.tool_clearing import cleared_input_tokens
from control_plane.sessions.usage import Budget

__all__ = ["Answer", "SessionState", "ToolUse", "build_request", "fold"]

_USAGE_KEYS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
_UNANSWERED = "The tool call did not complete: the turn was stopped before it returned a result."
# Fields of response content blocks that a request must not carry back.
_INPUT_FIELDS: dict[str, tuple[str, ...]] = {
    "text": ("type", "text", "citations"),
    "thinking": ("type", "thinking", "signature"),
    "redacted_thinking": ("type", "data"),
    "tool_use": ("type", "id", "name", "input"),
}


@dataclass(slots=True)
class Answer:
    """The result of a tool use: tool-result content blocks and ``is_error``."""

    content: list[dict[str, Any]]
    is_error: bool
    source: str  # the type of the event that answered


@dataclass(slots=True)
class ToolUse:
    """One ``tool_use`` block of an assistant message and what became of it."""

    event_id: str  # the agent.tool_use / agent.custom_tool_use event: idempotency key and answer key
    block_id: str  # the model's tool_use id
    name: str
    input: dict[str, Any]
    custom: bool
    permission: str  # allow | ask | deny (custom tools: allow)
    mcp_server: str | None = None  # agent.mcp_tool_use: the server (``name`` is its tool's name)
    answer: Answer | None = None
    confirmation: str | None = None  # allow | deny, from user.tool_confirmation
    deny_message: str | None = None


@dataclass(slots=True)
class SessionState:
    """Everything the step function needs, folded from the log."""

    terminated: bool = False
    in_turn: bool = False
    status: str | None = None  # running | idle | rescheduling | terminated; None before any status
    requires_action: tuple[str, ...] | None = None  # event ids of the last requires_action idle
    messages: list[dict[str, Any]] = field(default_factory=list)  # committed conversation
    staged: list[dict[str, Any]] = field(default_factory=list)  # user content for the next request
    open_tools: list[ToolUse] = field(default_factory=list)  # tool uses of the latest assistant message
    pending_inputs: deque[list[dict[str, Any]]] = field(default_factory=deque)
    interrupt_pending: bool = False
    open_span: str | None = None  # span.model_request_start without its end
    model_due: bool = False  # the turn needs a model request (start, or after a failed one)
    failures: int = 0  # consecutive failed model requests (session.error retrying) in this turn
    rescheduled_at: datetime | None = None  # processed_at of the latest session.status_rescheduled
    last_stop_reason: str | None = None  # of the latest assistant message in this turn
    usage: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_USAGE_KEYS, 0))
    sandbox_used: bool = False  # an agent.tool_result exists (a sandbox was made at some point)
    mcp_down: set[str] = field(default_factory=set)  # MCP servers reported unavailable this turn
    budget: Budget | None = None  # the session's spend ceiling (None: uncapped)
    context: ContextState = field(default_factory=ContextState)  # the context window (context_window.py)
    outcomes: OutcomeTracker = field(default_factory=OutcomeTracker)  # outcomes and their evaluations
    last_seq: int = 0
    _tools: dict[str, ToolUse] = field(default_factory=dict)
    _tool_events: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    _absorb_on_end: int = 0
    _prev_input: list[dict[str, Any]] | None = None  # the user.message just folded, for system.message

    def fork_for_status(self) -> SessionState:
        """A copy into which ``session.status_*`` events may be folded without changing this state
        (a decision looks ahead at its own status append): shallow, but owning the containers the
        status handlers change (``staged``, ``pending_inputs``, ``mcp_down``). The conversation is
        shared: a deep copy of the whole state per turn cost more than the rest of the decision."""
        fork = copy.copy(self)
        fork.staged = list(self.staged)
        fork.pending_inputs = deque(self.pending_inputs)
        fork.mcp_down = set(self.mcp_down)
        return fork

    # -- folding --------------------------------------------------------------------------------
    def apply(self, event: ev.LogEvent) -> None:
        """Fold one event in (events must come in log order)."""
        seq = getattr(event, "seq", None)
        if isinstance(seq, int):
            self.last_seq = seq
        handler = _HANDLERS.get(event.type)
        if handler is not None:
            handler(self, event)
        if event.type != ev.USER_MESSAGE:
            self._prev_input = None

    def _input(self, event: ev.LogEvent) -> None:
        blocks = _content_blocks(event.payload.get("content"))
        self.pending_inputs.append(blocks)
        self._prev_input = blocks

    def _system_message(self, event: ev.LogEvent) -> None:
        blocks = _content_blocks(event.payload.get("content"))
        target = self._prev_input
        if target is not None and any(p is target for p in self.pending_inputs):
            target.extend(blocks)
        else:
            self.staged.extend(blocks)

    def _interrupt(self, event: ev.LogEvent) -> None:
        if self.in_turn and not self.interrupt_pending:
            self.interrupt_pending = True
            self._absorb_on_end = len(self.pending_inputs)

    def _running(self, event: ev.LogEvent) -> None:
        if not self.in_turn:
            self.in_turn = True
            self.model_due = True
            self.failures = 0
            self.last_stop_reason = None
            if self.pending_inputs:
                self.staged.extend(self.pending_inputs.popleft())
        self.status = "running"
        self.requires_action = None

    def _rescheduled(self, event: ev.LogEvent) -> None:
        self.status = "rescheduling"
        self.rescheduled_at = getattr(event, "processed_at", None)

    def _idle(self, event: ev.LogEvent) -> None:
        self.status = "idle"
        stop = event.payload.get("stop_reason")
        stop_type = stop.get("type") if isinstance(stop, Mapping) else None
        if stop_type == "requires_action" and self.in_turn:
            ids = stop.get("event_ids") if isinstance(stop, Mapping) else None
            self.requires_action = tuple(str(i) for i in ids or ())
            return
        absorb = len(self.pending_inputs) if stop_type in _FLUSHING_STOPS else 0
        if self.interrupt_pending:
            absorb = self._absorb_on_end
        for _ in range(min(absorb, len(self.pending_inputs))):
            self.staged.extend(self.pending_inputs.popleft())
        self._end_turn()

    def _terminated(self, event: ev.LogEvent) -> None:
        self.terminated = True
        self.status = "terminated"
        self._end_turn()

    def _end_turn(self) -> None:
        self.mcp_down.clear()
        self.in_turn = False
        self.interrupt_pending = False
        self.requires_action = None
        self.model_due = False
        self._absorb_on_end = 0

    def _span_start(self, event: ev.LogEvent) -> None:
        self.open_span = event.id
        self._commit_staged()
        # Context window: the size of what this request sent (less the tool results it cleared).
        cleared = event.payload.get("cleared_tool_results")
        chars = cleared.get("characters") if isinstance(cleared, Mapping) else None
        self.context.request_started(chars if isinstance(chars, int) else 0)

    def _span_end(self, event: ev.LogEvent) -> None:
        payload = event.payload
        if payload.get("model_request_start_id") == self.open_span:
            self.open_span = None
        usage = payload.get("model_usage")
        if isinstance(usage, Mapping):
            for key in _USAGE_KEYS:
                value = usage.get(key)
                if isinstance(value, int):
                    self.usage[key] += value
        message = payload.get("assistant_message")
        if not isinstance(message, Mapping):
            self.model_due = True
            return
        self.model_due = False
        self.failures = 0
        # Context window: calibrate the estimate (with what server-side edits cleared).
        self.context.replied(usage, cleared_input_tokens(payload.get("context_management")))
        stop_reason = message.get("stop_reason")
        self.last_stop_reason = stop_reason if isinstance(stop_reason, str) else None
        content = [b for b in message.get("content") or () if isinstance(b, Mapping)]
        event_ids = payload.get("content_event_ids") or []
        self._push("assistant", [_input_block(b) for b in content])
        self.open_tools = []
        for index, block in enumerate(content):
            if block.get("type") != "tool_use" or index >= len(event_ids):
                continue
            event_id = str(event_ids[index])
            kind, tool_payload = self._tool_events.get(event_id, (ev.AGENT_TOOL_USE, {}))
            custom = kind == ev.AGENT_CUSTOM_TOOL_USE
            mcp = kind == ev.AGENT_MCP_TOOL_USE
            tool = ToolUse(
                event_id=event_id,
                block_id=str(block.get("id")),
                name=str(tool_payload.get("name") if mcp else block.get("name")),
                input=dict(block.get("input") or {}),
                custom=custom,
                permission="allow" if custom else str(tool_payload.get("evaluated_permission", "allow")),
                mcp_server=str(tool_payload.get("mcp_server_name")) if mcp else None,
            )
            self.open_tools.append(tool)
            self._tools[event_id] = tool

    def _compacted(self, event: ev.LogEvent) -> None:
        """Context window: later requests start from the summary (context_window.py)."""
        messages = compacted_messages(self.messages, event.payload)
        self.context.compacted_to(messages, messages is not self.messages)
        self.messages = messages

    def _updated(self, event: ev.LogEvent) -> None:
        if "budget" in event.payload:
            self.budget = Budget.from_json(event.payload["budget"])

    def _tool_use(self, event: ev.LogEvent) -> None:
        self._tool_events[event.id] = (event.type, event.payload)

    def _answer(self, event: ev.LogEvent) -> None:
        tool = self._tools.get(str(event.payload.get(_ANSWER_KEYS.get(event.type, "tool_use_id"))))
        if event.type == ev.AGENT_TOOL_RESULT:
            self.sandbox_used = True
        if tool is None or tool.answer is not None:
            return
        tool.answer = Answer(
            _content_blocks(event.payload.get("content")), bool(event.payload.get("is_error")), event.type
        )

    def _confirmation(self, event: ev.LogEvent) -> None:
        tool = self._tools.get(str(event.payload.get("tool_use_id")))
        if tool is None or tool.confirmation is not None:
            return
        result = event.payload.get("result")
        tool.confirmation = "allow" if result == "allow" else "deny"
        message = event.payload.get("deny_message")
        tool.deny_message = message if isinstance(message, str) and message else None

    def _error(self, event: ev.LogEvent) -> None:
        error = event.payload.get("error")
        if not isinstance(error, Mapping):
            return
        server = error.get("mcp_server_name")
        if str(error.get("type", "")).startswith("mcp_") and isinstance(server, str):
            if self.in_turn:
                self.mcp_down.add(server)
            return
        if str(error.get("type", "")).startswith("repository_"):
            return  # a clone failed at the edge (reported with the tool error), not the model
        if "sandbox_moved" in error:
            return  # the hands moved to another edge, not a failed model request
        if "edge_unavailable" in error:
            return  # no edge to run tools on, not a failed model request
        retry = error.get("retry_status")
        if isinstance(retry, Mapping) and retry.get("type") == "retrying":
            self.failures += 1

    # -- outcomes (control_plane/harness/outcome_state.py) ---------------------------------------
    def _define_outcome(self, event: ev.LogEvent) -> None:
        self.pending_inputs.append(self.outcomes.define(event))  # input, like a user.message

    def _evaluation_start(self, event: ev.LogEvent) -> None:
        self.outcomes.start(event)

    def _evaluation_end(self, event: ev.LogEvent) -> None:
        feedback = self.outcomes.end(event, self.usage)
        self.failures = 0
        if feedback is not None and self.in_turn:  # another iteration: the model revises
            self.staged.extend(feedback)
            self.model_due = True

    # -- the conversation -----------------------------------------------------------------------
    def _staged_user_blocks(self) -> list[dict[str, Any]]:
        blocks = [_tool_result_block(t) for t in self.open_tools]
        return blocks + [copy.deepcopy(b) for b in self.staged]

    def _commit_staged(self) -> None:
        blocks = self._staged_user_blocks()
        self.open_tools = []
        self.staged = []
        self._push("user", blocks)

    def _push(self, role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        self.context.pushed(blocks)
        if self.messages and self.messages[-1]["role"] == role:
            self.messages[-1]["content"].extend(blocks)
        else:
            self.messages.append({"role": role, "content": blocks})

    def tool_event_ids(self) -> dict[str, str]:
        """The event id of every tool use, by the model's ``tool_use`` id."""
        return {tool.block_id: event_id for event_id, tool in self._tools.items()}

    def conversation(self) -> list[dict[str, Any]]:
        """The messages for the next model request (a deep copy; staged content included)."""
        messages = copy.deepcopy(self.messages)
        staged = self._staged_user_blocks()
        if staged:
            if messages and messages[-1]["role"] == "user":
                messages[-1]["content"].extend(staged)
            else:
                messages.append({"role": "user", "content": staged})
        return messages


# Turn ends that fold every queued input into the conversation (they get no turn of their own).
_FLUSHING_STOPS = frozenset({"retries_exhausted", "budget_reached"})

_ANSWER_KEYS = {
    ev.USER_CUSTOM_TOOL_RESULT: "custom_tool_use_id",
    ev.AGENT_MCP_TOOL_RESULT: "mcp_tool_use_id",
}

_HANDLERS = {
    ev.USER_MESSAGE: SessionState._input,
    ev.SYSTEM_MESSAGE: SessionState._system_message,
    ev.USER_INTERRUPT: SessionState._interrupt,
    ev.SESSION_STATUS_RUNNING: SessionState._running,
    ev.SESSION_STATUS_RESCHEDULED: SessionState._rescheduled,
    ev.SESSION_STATUS_IDLE: SessionState._idle,
    ev.SESSION_STATUS_TERMINATED: SessionState._terminated,
    ev.SPAN_MODEL_REQUEST_START: SessionState._span_start,
    ev.SPAN_MODEL_REQUEST_END: SessionState._span_end,
    ev.AGENT_TOOL_USE: SessionState._tool_use,
    ev.AGENT_CUSTOM_TOOL_USE: SessionState._tool_use,
    ev.AGENT_MCP_TOOL_USE: SessionState._tool_use,
    ev.AGENT_MCP_TOOL_RESULT: SessionState._answer,
    ev.AGENT_TOOL_RESULT: SessionState._answer,
    ev.USER_TOOL_RESULT: SessionState._answer,
    ev.USER_CUSTOM_TOOL_RESULT: SessionState._answer,
    ev.USER_TOOL_CONFIRMATION: SessionState._confirmation,
    ev.SESSION_ERROR: SessionState._error,
    ev.SESSION_UPDATED: SessionState._updated,
    ev.AGENT_THREAD_CONTEXT_COMPACTED: SessionState._compacted,
    # outcomes (control_plane/harness/outcome_state.py)
    "user.define_outcome": SessionState._define_outcome,
    "span.outcome_evaluation_start": SessionState._evaluation_start,
    "span.outcome_evaluation_end": SessionState._evaluation_end,
}


def fold(events: Iterable[ev.LogEvent], budget: Budget | None = None) -> SessionState:
    """The state after ``events`` (in log order) of a session created with ``budget``."""
    state = SessionState(budget=budget)
    for event in events:
        state.apply(event)
    return state


def build_request(
    agent: AgentSpec,
    state: SessionState,
    *,
    max_tokens: int,
    mcp_tools: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The Messages API request for the next model call (``cache_control`` on the system prompt,
    the last tool and the last block of the last user message). ``mcp_tools``: the definitions
    of the MCP tools offered (they go between the toolset's tools and the custom tools)."""
    messages = state.conversation()
    if messages and messages[-1]["role"] == "user" and messages[-1]["content"]:
        messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    request: dict[str, Any] = {"model": agent.model, "max_tokens": max_tokens, "messages": messages}
    system = agent.system_param()
    if system is not None:
        request["system"] = system
    tools = agent.tools_param(mcp_tools)
    if tools:
        request["tools"] = tools
    return request


def _content_blocks(content: Any) -> list[dict[str, Any]]:
    """Content blocks of an input event as model input (a ``redacted`` block becomes a marker)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        return []
    blocks = []
    for block in content:
        if not isinstance(block, Mapping):
            continue
        if block.get("type") == "redacted":
            blocks.append({"type": "text", "text": "[redacted]"})
        else:
            blocks.append(copy.deepcopy(dict(block)))
    return blocks


def _input_block(block: Mapping[str, Any]) -> dict[str, Any]:
    """A response content block as request input (response-only fields dropped)."""
    fields = _INPUT_FIELDS.get(str(block.get("type")))
    if fields is None:
        return copy.deepcopy(dict(block))
    return {k: copy.deepcopy(block[k]) for k in fields if block.get(k) is not None}


def _tool_result_block(tool: ToolUse) -> dict[str, Any]:
    answer = tool.answer or Answer([{"type": "text", "text": _UNANSWERED}], True, "")
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool.block_id}
    if answer.content:
        block["content"] = copy.deepcopy(answer.content)
    if answer.is_error:
        block["is_error"] = True
    return block
