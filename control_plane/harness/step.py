"""The harness as a pure step function: given the agent and the session log, the next actions.

``step(agent, events, config, now, mcp)`` folds the log (:mod:`~control_plane.harness.fold`) and
returns a :class:`Decision`: wait ``delay_s``, append ``appends``, then perform at most one
``effect`` (:class:`CallModel`, :class:`DispatchTool` or :class:`DispatchMcpTool`). The driver
performs it and steps again on the new log; an empty decision means there is nothing to do until
new input arrives. No I/O, no clock (``now`` is passed in), no randomness: a recorded log replays
to the same decisions.

MCP tools are data too: ``mcp`` is the :class:`~control_plane.harness.mcp_offer.McpOffer` the
driver built from the servers' tool lists just before a model call. A decision to call the model
offers its tools (and appends a ``session.error`` for each server newly found unavailable this
turn); the offer rides on the :class:`CallModel` and maps the model's ``tool_use`` names back to
``(server, tool)`` when the output is recorded (:func:`model_output_events`). Without an offer
the request carries no MCP tools: the driver asks again with one before calling the model.

What follows a toolset call is data too: the driver reports what became of it as a
:data:`ToolOutcome` (the sandbox's answer, no environment, no edge, a failed request) plus the
:class:`SandboxMove` the gateway saw, and :func:`tool_outcome_events` returns the events to append
(a repository's ``session.error``, the ``sandbox_moved`` ``session.error``, the ``agent.tool_result``
with a note of the move ahead of its content).

Priorities, in order (see the module docstring of ``fold`` for how the log is read):

1. a terminated session does nothing; with no turn open, the oldest queued input starts one
   (``session.status_running``);
2. ``user.interrupt`` during a turn ends it: an unfinished model request gets its span end, every
   unanswered toolset call an error result ("interrupted"), then ``session.status_idle`` with
   ``stop_reason end_turn``;
3. a model request left open by a crashed harness gets its span end (not counted as a failure);
4. after a failed request (``rescheduling``): wait out the backoff, ``session.status_running``, retry;
5. a turn that needs the model calls it — unless the session has a ``budget`` and its list cost
   so far (priced with ``config.model_prices``) reached it, or its model has no price: then the
   turn ends with ``session.status_idle`` ``budget_reached`` (queued inputs are flushed into the
   conversation, see ``fold``) and the model is not called again until an update raises the budget;
   a request over its model's context budget is cut, replaced by a compaction request, or ends the
   turn with ``compaction_limit_reached_error`` (:mod:`~control_plane.harness.compaction`);
6. tool uses of the latest assistant message: policy- or user-denied calls get error results,
   runnable ones (toolset and MCP) are dispatched one at a time in block order (an
   ``agent.mcp_tool_use`` left without a result by a crash is dispatched again with the same
   idempotency key), calls waiting for the client
   (custom tools, a worker-run environment's toolset calls, ``ask`` without confirmation) put the
   session in ``requires_action`` once the runnable ones are done; a partial resolution re-emits
   ``requires_action`` with the remainder; when all are answered the model is called again;
7. otherwise the turn ends (``end_turn``; ``refusal`` passes through; ``pause_turn`` continues)
   — unless an outcome is open: then the grader judges the work first (:class:`GradeOutcome`,
   :mod:`~control_plane.harness.outcomes`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol

from control_plane.harness import event_drafts as ev
from control_plane.harness.agent import AgentSpec
from control_plane.harness.compaction import CompactionPlan, Fitted, fit_request
from control_plane.harness.config import HarnessConfig
from control_plane.harness.fold import SessionState, ToolUse, build_request, fold
from control_plane.harness.mcp_offer import McpOffer, unavailable_server_events
from control_plane.harness.outcomes import GradeOutcome, interrupted_evaluation, next_action, regrade
from control_plane.harness.repository_errors import repository_error_for
from control_plane.harness.tool_clearing import Cleared
from control_plane.sessions.usage import Budget, ModelPrice, usage_snapshot
from outpost_wire.errors import ErrorCode, OutpostError, RemoteError
from outpost_wire.results import ToolResult

__all__ = [
    "CallModel",
    "Decision",
    "DispatchMcpTool",
    "DispatchTool",
    "GradeOutcome",
    "NoEnvironment",
    "SandboxMove",
    "SandboxUnavailable",
    "ToolAnswered",
    "ToolCallFailed",
    "ToolOutcome",
    "decide",
    "model_failure_events",
    "model_output_events",
    "step",
    "tool_outcome_events",
]

_INTERRUPTED = "Interrupted by the user before the tool call finished."
_DENIED = "The user denied this tool call."


@dataclass(frozen=True, slots=True)
class CallModel:
    """Stream one model request. ``attempt`` counts from 1 within a failure streak;
    ``first_of_turn``: no model request was made in this turn yet (provisioning may start);
    ``provision``: the agent uses the sandbox and the log shows no sandbox use yet."""

    request: dict[str, Any]
    attempt: int = 1
    first_of_turn: bool = False
    provision: bool = False
    mcp: McpOffer | None = None  # the MCP tools in ``request`` (None: none were offered)
    compaction: CompactionPlan | None = None  # a compaction request (context window: compaction.py)
    cleared: Cleared | None = None  # old tool results cleared in ``request`` (tool_clearing.py)

    def span_start_payload(self) -> dict[str, Any]:
        """The ``span.model_request_start`` payload: what the harness cleared, if anything."""
        return {} if self.cleared is None else {"cleared_tool_results": self.cleared.to_json()}


@dataclass(frozen=True, slots=True)
class DispatchTool:
    """Run a toolset call through the gateway; ``tool_use_id`` (the ``agent.tool_use`` event id)
    is the idempotency key, so a re-dispatch after a crash runs the tool once."""

    tool_use_id: str
    name: str
    input: dict[str, Any]


@dataclass(frozen=True, slots=True)
class DispatchMcpTool:
    """Call tool ``tool`` of MCP server ``server``; ``tool_use_id`` (the ``agent.mcp_tool_use``
    event id) is the idempotency key."""

    tool_use_id: str
    server: str
    tool: str
    input: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Decision:
    """Wait ``delay_s``, append ``appends`` (guarded by the log position the decision was made
    at), then perform ``effect``. Empty: nothing to do."""

    appends: tuple[ev.Draft, ...] = ()
    effect: CallModel | DispatchTool | DispatchMcpTool | GradeOutcome | None = None
    delay_s: float = 0.0
    reason: str = field(default="", compare=False)

    @property
    def idle(self) -> bool:
        return not self.appends and self.effect is None and self.delay_s <= 0


_RUNNING = ev.Draft(ev.SESSION_STATUS_RUNNING)


@dataclass(frozen=True)
class _Synthetic:
    """A not-yet-stored event, for folding a decision's own appends into a copy of the state."""

    id: str
    type: str
    payload: dict[str, Any] = field(default_factory=dict)


_RUNNING_EVENT = _Synthetic("pending-status-running", ev.SESSION_STATUS_RUNNING)


def step(
    agent: AgentSpec,
    events: Sequence[ev.LogEvent],
    config: HarnessConfig,
    now: datetime | None = None,
    mcp: McpOffer | None = None,
    budget: Budget | None = None,
) -> Decision:
    """Fold ``events`` of a session created with ``budget`` and decide (``now`` is only needed
    while a retry backoff runs)."""
    return decide(agent, fold(events, budget), config, now, mcp)


def decide(
    agent: AgentSpec,
    s: SessionState,
    config: HarnessConfig,
    now: datetime | None = None,
    mcp: McpOffer | None = None,
) -> Decision:
    """The next actions for a folded session (see the module docstring for the priorities)."""
    if s.terminated:
        return Decision(reason="terminated")
    if not s.in_turn:
        if s.pending_inputs:
            # Start the turn and make its first model call in one decision: the running status
            # and the span start then share one durable append (the model request waits on one
            # commit, not two). The request is built from the state as it will be once
            # ``session.status_running`` is folded in.
            started = s.fork_for_status()
            started.apply(_RUNNING_EVENT)
            return _model_decision((_RUNNING,), agent, started, config, mcp, "start turn")
        return Decision(reason="idle")
    if s.interrupt_pending:
        drafts: list[ev.Draft] = []
        if s.open_span is not None:
            drafts.append(ev.span_end_failed(s.open_span))
        for tool in s.open_tools:
            if tool.answer is None and not tool.custom:
                drafts.append(_unrun_result(tool, _INTERRUPTED, "interrupted"))
        drafts.extend(interrupted_evaluation(s))  # outcomes: an evaluation in progress ends
        drafts.append(ev.status_idle("end_turn"))
        return Decision(tuple(drafts), reason="interrupted")
    if s.open_span is not None:
        return Decision((ev.span_end_failed(s.open_span),), reason="close span of a crashed request")
    if s.status == "rescheduling":
        delay = config.backoff_s(s.failures)
        if now is not None and s.rescheduled_at is not None:
            delay = max(0.0, (s.rescheduled_at - now).total_seconds() + delay)
        if delay > 0:
            return Decision(delay_s=delay, reason="retry backoff")
        grading = regrade(agent, s, config)  # outcomes: a failed grading is retried
        if grading is not None:
            return Decision((_RUNNING,), grading, reason="retry grading")
        return _model_decision((_RUNNING,), agent, s, config, mcp, "retry model")
    if s.model_due:
        return _model_decision((), agent, s, config, mcp, "call model")
    if s.open_tools:
        return _decide_tools(agent, s, config, mcp)
    if s.last_stop_reason == "pause_turn":
        return _model_decision((), agent, s, config, mcp, "continue paused turn")
    if s.last_stop_reason == "refusal":
        return Decision((ev.status_idle("refusal"),), reason="refusal")
    graded = next_action(agent, s, config)  # outcomes: the grader judges the work first
    if graded is not None:
        return Decision(graded[0], graded[1], reason=graded[2])
    return Decision((ev.status_idle("end_turn"),), reason="end turn")


def _decide_tools(agent: AgentSpec, s: SessionState, config: HarnessConfig, mcp: McpOffer | None) -> Decision:
    unanswered = [t for t in s.open_tools if t.answer is None]
    refused = [_refusal(t) for t in unanswered if _is_refused(t)]
    if refused:
        return Decision(tuple(refused), reason="refuse tool calls")
    waiting = [
        t
        for t in unanswered
        if t.custom
        or (t.permission == "ask" and t.confirmation is None)
        or (agent.worker_tools and t.mcp_server is None)  # a worker-run environment's toolset call
    ]
    runnable = [t for t in unanswered if t not in waiting]
    waiting_ids = tuple(t.event_id for t in waiting)
    if s.status == "idle":  # paused on requires_action
        if waiting:
            if waiting_ids != s.requires_action:
                return Decision((ev.status_idle("requires_action", waiting_ids),), reason="requires action")
            return Decision(reason="waiting for the client")
        return Decision((_RUNNING,), reason="actions resolved")
    if runnable:
        tool = runnable[0]
        if tool.mcp_server is not None:
            effect = DispatchMcpTool(tool.event_id, tool.mcp_server, tool.name, dict(tool.input))
            return Decision(effect=effect, reason="dispatch MCP")
        return Decision(effect=DispatchTool(tool.event_id, tool.name, dict(tool.input)), reason="dispatch")
    if waiting:
        return Decision((ev.status_idle("requires_action", waiting_ids),), reason="requires action")
    return _model_decision((), agent, s, config, mcp, "tool results in")


def _is_refused(tool: ToolUse) -> bool:
    if tool.custom:
        return False
    return tool.permission == "deny" or (tool.permission == "ask" and tool.confirmation == "deny")


def _refusal(tool: ToolUse) -> ev.Draft:
    if tool.permission == "deny":
        text = f"Tool {tool.name!r} is not available to this agent."
    else:
        text = tool.deny_message or _DENIED
    return _unrun_result(tool, text, "denied")


def _unrun_result(tool: ToolUse, text: str, outcome: str) -> ev.Draft:
    """The error result of a call that was not made (refused, or the turn was interrupted)."""
    if tool.mcp_server is not None:
        return ev.mcp_tool_result(
            tool.event_id,
            ev.text_content(text),
            is_error=True,
            server=tool.mcp_server,
            tool=tool.name,
            outcome=outcome,
        )
    return ev.tool_result(tool.event_id, ev.text_content(text), is_error=True)


def _model_decision(
    appends: tuple[ev.Draft, ...],
    agent: AgentSpec,
    s: SessionState,
    config: HarnessConfig,
    mcp: McpOffer | None,
    reason: str,
) -> Decision:
    """Call the model after ``appends`` and the errors of MCP servers newly found unavailable;
    or, the budget reached, end the turn after ``appends`` instead."""
    if s.budget is not None and s.budget.reached(s.usage, config.price_of(agent.model)):
        return Decision((*appends, ev.status_idle("budget_reached")), reason="budget reached")
    errors = unavailable_server_events(mcp, s.mcp_down)
    call = _call_model(agent, s, config, mcp)
    # Context beyond the window (compaction.py): send as is, cut, compact, or stop at the limit.
    fitted = fit_request(agent, s, config, call.request)
    if not isinstance(fitted, Fitted):
        return Decision(appends + errors + fitted, reason="compaction limit reached")
    if fitted.compaction is not None:
        call = replace(call, request=fitted.request, compaction=fitted.compaction, provision=False)
        reason = "compact the context"
    elif fitted.cleared is not None:
        call = replace(call, cleared=fitted.cleared)
    return Decision(appends + errors, call, reason=reason)


def _call_model(agent: AgentSpec, s: SessionState, config: HarnessConfig, mcp: McpOffer | None) -> CallModel:
    first = s.last_stop_reason is None and s.failures == 0
    mcp_tools = mcp.tools_param() if mcp is not None else []
    return CallModel(
        request=build_request(agent, s, max_tokens=config.max_tokens, mcp_tools=mcp_tools),
        attempt=s.failures + 1,
        first_of_turn=first,
        provision=first and agent.uses_sandbox and not s.sandbox_used,
        mcp=mcp,
    )


# -- events for the outcome of a model request ---------------------------------------------------


def model_output_events(
    agent: AgentSpec,
    message: Mapping[str, Any],
    block_event_ids: Sequence[str],
    start_id: str,
    usage_before: Mapping[str, int],
    mcp: McpOffer | None = None,
    *,
    price: ModelPrice | None = None,
    budget: Budget | None = None,
) -> tuple[ev.Draft, ...]:
    """The events for a finished model request, appended together (all or nothing).

    One event per content block run: consecutive text blocks share one ``agent.message`` (their
    ids in ``block_event_ids`` are equal), thinking blocks become ``agent.thinking``, tool uses
    ``agent.tool_use`` (with ``evaluated_permission``), ``agent.mcp_tool_use`` (a name of the
    request's MCP offer ``mcp``; with ``mcp_server_name``, the tool's own ``name`` and
    ``evaluated_permission``) or ``agent.custom_tool_use``; then
    ``span.model_request_end`` carrying the complete message, then the cumulative
    ``session.usage`` (``usage_before`` plus this request; ``list_cost`` when the model has a
    ``price``; the session's ``budget``, ``null`` when it has none)."""
    content = [b for b in message.get("content") or () if isinstance(b, Mapping)]
    if len(block_event_ids) != len(content):
        raise ValueError("one event id per content block is required")
    drafts: list[ev.Draft] = []
    texts: dict[str, ev.Draft] = {}
    for block, event_id in zip(content, block_event_ids, strict=True):
        kind = block.get("type")
        if kind == "text":
            existing = texts.get(event_id)
            if existing is None:
                texts[event_id] = existing = ev.Draft(ev.AGENT_MESSAGE, {"content": []}, event_id)
                drafts.append(existing)
            existing.payload["content"].append({"type": "text", "text": str(block.get("text", ""))})
        elif kind in ("thinking", "redacted_thinking"):
            drafts.append(ev.Draft(ev.AGENT_THINKING, {}, event_id))
        elif kind == "tool_use":
            drafts.append(_tool_use_event(agent, block, event_id, mcp))
    usage = _model_usage(message.get("usage"))
    span_end = {
        "model_request_start_id": start_id,
        "model_usage": usage,
        "is_error": False,
        "assistant_message": dict(message),
        "content_event_ids": list(block_event_ids),
    }
    if isinstance(message.get("context_management"), Mapping):  # the server's edits (applied_edits)
        span_end["context_management"] = dict(message["context_management"])
    drafts.append(ev.Draft(ev.SPAN_MODEL_REQUEST_END, span_end))
    total = {k: int(usage_before.get(k, 0)) + usage[k] for k in usage}
    snapshot = {"usage": usage_snapshot(total, price), "budget": budget.to_json() if budget else None}
    drafts.append(ev.Draft(ev.SESSION_USAGE, snapshot))
    return tuple(drafts)


def _tool_use_event(
    agent: AgentSpec, block: Mapping[str, Any], event_id: str, mcp: McpOffer | None
) -> ev.Draft:
    name = str(block.get("name"))
    tool_input = dict(block.get("input") or {})
    offered = mcp.lookup(name) if mcp is not None else None
    if offered is not None:
        mcp_payload = {
            "mcp_server_name": offered.server,
            "name": offered.tool,
            "input": tool_input,
            "evaluated_permission": offered.permission,
            "evaluation": _evaluation(offered.policy, offered.permission),
        }
        return ev.Draft(ev.AGENT_MCP_TOOL_USE, mcp_payload, event_id)
    permission = agent.permission(name)
    if permission.kind == "custom":
        return ev.Draft(ev.AGENT_CUSTOM_TOOL_USE, {"name": name, "input": tool_input}, event_id)
    payload: dict[str, Any] = {
        "name": name,
        "input": tool_input,
        "evaluated_permission": permission.permission,
    }
    if permission.kind == "toolset":
        payload["toolset_name"] = ev.TOOLSET_NAME
        if permission.policy is not None:
            payload["evaluation"] = _evaluation(permission.policy, permission.permission)
    return ev.Draft(ev.AGENT_TOOL_USE, payload, event_id)


def _evaluation(policy: str, permission: str) -> dict[str, Any]:
    if policy == "auto":
        return {"type": "auto", "evaluated_permission": {"type": permission}}
    return {"type": policy}


def _model_usage(usage: Any) -> dict[str, int]:
    usage = usage if isinstance(usage, Mapping) else {}
    keys = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    return {k: int(usage.get(k) or 0) for k in keys}


def model_failure_events(
    *,
    attempt: int,
    config: HarnessConfig,
    error_type: str,
    message: str,
    retryable: bool,
    start_id: str | None,
) -> tuple[ev.Draft, ...]:
    """The events for a failed model request (attempt ``attempt`` of ``config.model_attempts``):

    * retryable with attempts left: ``session.error`` (``retrying``) + ``session.status_rescheduled``;
    * retryable, attempts used up: ``session.error`` (``exhausted``) + ``session.status_idle``
      (``retries_exhausted``);
    * not retryable: ``session.error`` (``terminal``) + ``session.status_terminated``.

    A ``span.model_request_end`` with ``is_error`` closes the request's span first."""
    drafts: list[ev.Draft] = [] if start_id is None else [ev.span_end_failed(start_id)]
    if not retryable:
        drafts += [ev.session_error(error_type, message, "terminal"), ev.Draft(ev.SESSION_STATUS_TERMINATED)]
    elif attempt < config.model_attempts:
        drafts += [
            ev.session_error(error_type, message, "retrying"),
            ev.Draft(ev.SESSION_STATUS_RESCHEDULED),
        ]
    else:
        drafts += [ev.session_error(error_type, message, "exhausted"), ev.status_idle("retries_exhausted")]
    return tuple(drafts)


# -- events for the outcome of a toolset call ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolAnswered:
    """The sandbox ran the call; ``result.is_error`` when the tool itself failed."""

    result: ToolResult


@dataclass(frozen=True, slots=True)
class NoEnvironment:
    """The session has no environment: there is no sandbox to run the call in."""


@dataclass(frozen=True, slots=True)
class SandboxUnavailable:
    """No edge of the environment could take the call; ``detail`` says why."""

    detail: str


@dataclass(frozen=True, slots=True)
class ToolCallFailed:
    """The request failed; ``detail`` is the error's text. ``code`` and ``message`` are the edge's
    typed error when it sent one (a repository it could not clone is reported on its own)."""

    detail: str
    code: ErrorCode | None = None
    message: str = ""

    @classmethod
    def of(cls, exc: OutpostError) -> ToolCallFailed:
        if isinstance(exc, RemoteError):
            return cls(str(exc), exc.code, exc.message)
        return cls(str(exc))


ToolOutcome = ToolAnswered | NoEnvironment | SandboxUnavailable | ToolCallFailed


class SandboxMove(Protocol):
    """A session's sandbox made anew on another edge (``control_plane.tunnel.SandboxMove`` fits)."""

    @property
    def from_edge_id(self) -> str: ...
    @property
    def to_edge_id(self) -> str: ...
    @property
    def reason(self) -> str: ...


def tool_outcome_events(
    call: DispatchTool, outcome: ToolOutcome, move: SandboxMove | None = None
) -> tuple[ev.Draft, ...]:
    """The events that follow toolset call ``call``, in order:

    * for a repository the edge could not clone, its typed ``session.error`` (``retrying``);
    * when the sandbox was made anew on another edge (``move``), the ``sandbox_moved``
      ``session.error``;
    * the ``agent.tool_result``: the sandbox's answer, or an error text for the model; after a
      move, a note of it comes first (the model learns its files and shell are new)."""
    drafts: list[ev.Draft] = []
    content: list[dict[str, Any]]
    match outcome:
        case ToolAnswered(result):
            content, is_error = result.to_json(), result.is_error
        case NoEnvironment():
            content, is_error = ev.text_content("The session has no environment to run tools in."), True
        case SandboxUnavailable(detail):
            content, is_error = ev.text_content(f"The sandbox is unavailable: {detail}"), True
        case ToolCallFailed(detail, code, message):
            content, is_error = ev.text_content(f"The tool call failed: {detail}"), True
            error = repository_error_for(code, message) if code is not None else None
            if error is not None:
                drafts.append(error)
    if move is not None:
        drafts.append(ev.sandbox_moved(move.from_edge_id, move.to_edge_id, move.reason))
        content = [*ev.text_content(ev.sandbox_moved_note(move.reason)), *content]
    drafts.append(ev.tool_result(call.tool_use_id, content, is_error=is_error))
    return tuple(drafts)
