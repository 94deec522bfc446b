"""Context beyond the window: keep every model request under its budget (see
:mod:`~control_plane.harness.context_window` for the budget and the estimate).

The step function builds the next request and passes it through :func:`fit_request` (pure), which
answers, in order:

1. the request is under the trigger (``clear_tool_uses_trigger_share`` of the budget): send it
   unchanged;
2. old tool results are cleared (:mod:`~control_plane.harness.tool_clearing`): by the harness in
   the request, or, for ``harness.context_edit_models``, by the server (every request of those
   carries ``context_management``; the harness simulates the edit to estimate): send that if it
   fits the budget;
3. oversized tool results (each over half the budget) are cut in the request, with a note; the
   log keeps them whole: send that if it fits;
4. compact: summarize the longest prefix of the conversation that ends with a user message and
   whose summarization request fits in nine tenths of the budget (more than a previous summary
   alone), keeping the rest as the recent tail. Where the model's endpoint takes the Messages
   API's ``compaction`` parameter (``harness.compaction_api_models``) the request carries it and
   the reply is a ``compaction`` block, kept verbatim; elsewhere it is an ordinary request asking
   for a summary (no tools may be called). The request keeps the system prompt and tools, so its
   prompt-cache prefix is the session's own. It carries no ``context_management`` (the API
   forbids both);
5. otherwise (nothing to compact fits, or ``compaction_max_in_a_row`` compactions without a model
   reply): ``session.error`` ``compaction_limit_reached_error`` (``exhausted``) and
   ``session.status_idle`` ``retries_exhausted``, as the hosted product ends such a turn.

The driver performs a compaction like any model request: ``span.model_request_start`` is in the
log before the call, and the reply is appended at once with its span end, the
``agent.thread_context_compacted`` event (:func:`compaction_events`) and the cumulative
``session.usage``. A harness that dies before that append leaves an open span: the next one closes
it and compacts again (the unfinished call was not recorded as finished, as for any model turn);
one that dies after it folds the event and never asks again. Near the budget the driver first
counts the request exactly where the endpoint offers ``count_tokens`` (:func:`counted_over_budget`).
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from control_plane.harness import event_drafts as ev
from control_plane.harness.agent import AgentSpec
from control_plane.harness.config import HarnessConfig
from control_plane.harness.context_window import chars_of
from control_plane.harness.fold import SessionState
from control_plane.harness.model import ModelError
from control_plane.harness.tool_clearing import Cleared, clear_tool_results, context_management_param
from control_plane.sessions.usage import Budget, ModelPrice, usage_snapshot

__all__ = [
    "COMPACTION_LIMIT_ERROR",
    "SUMMARIZE_INSTRUCTIONS",
    "CompactionPlan",
    "Fitted",
    "compaction_events",
    "counted_over_budget",
    "estimate_tokens",
    "fit_request",
    "request_chars",
]

log = logging.getLogger(__name__)

COMPACTION_LIMIT_ERROR = "compaction_limit_reached_error"
SUMMARIZE_INSTRUCTIONS = (
    "The conversation above is about to leave your context window. Write a summary of it for your own "
    "later use: the task and its requirements, what was done and found (files, commands, results, "
    "decisions), what failed, and what remains to do. Be specific and complete; reply with the summary "
    "only and do not call tools."
)
TRUNCATED_NOTE = (
    "[Outpost cut this tool result to fit the model's context window: {omitted} characters omitted. "
    "The whole result is kept in the session's event log.]"
)
#: A compaction request aims at this share of the budget (room for the estimate's error).
_COMPACTION_TARGET = 0.9
#: Below this share of the budget the fast estimate decides alone; above it, the exact one.
_FAST_SHARE = 0.9
#: The driver counts a request exactly above this share of the budget.
COUNT_FROM_SHARE = 0.8
#: Characters per message for its role and framing.
_MESSAGE_OVERHEAD = 32


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    """A compaction request: it summarizes the first ``messages`` messages of the conversation;
    ``api``: with the Messages API's ``compaction`` parameter."""

    messages: int
    api: bool


@dataclass(frozen=True, slots=True)
class Fitted:
    """The request to send; ``compaction``: it is a compaction request."""

    request: dict[str, Any]
    compaction: CompactionPlan | None = None
    cleared: Cleared | None = None  # old tool results the harness cleared in ``request``


def request_chars(request: Mapping[str, Any]) -> int:
    """The characters of ``request`` as the estimate counts them (system, tools, content blocks)."""
    total = chars_of(request.get("system")) + chars_of(request.get("tools"))
    for message in request.get("messages") or ():
        total += _message_chars(message)
    return total


def _message_chars(message: Mapping[str, Any]) -> int:
    content = message.get("content")
    if isinstance(content, list):
        return _MESSAGE_OVERHEAD + sum(chars_of(b) for b in content)
    return _MESSAGE_OVERHEAD + chars_of(content)


def estimate_tokens(chars: int, ratio: float) -> int:
    return math.ceil(chars / ratio)


def _prefix_chars(request: Mapping[str, Any]) -> int:
    return chars_of(request.get("system")) + chars_of(request.get("tools"))


def _fast_chars(s: SessionState, prefix: int) -> int:
    """An estimate of the next request's characters from the fold's running count (no dump of
    the conversation)."""
    staged = sum(chars_of(b) for b in s.staged)
    staged += sum(chars_of(t.answer.content) if t.answer else 64 for t in s.open_tools)
    return prefix + s.context.message_chars + staged + _MESSAGE_OVERHEAD * (len(s.messages) + 1)


def fit_request(
    agent: AgentSpec, s: SessionState, config: HarnessConfig, request: dict[str, Any]
) -> Fitted | tuple[ev.Draft, ...]:
    """``request`` (built by the step from ``s``) fitted to the budget of ``agent``'s model, or
    the events that end the turn when it cannot be (see the module docstring)."""
    budget = config.context_budget(agent.model)
    prefix = _prefix_chars(request)
    ratio = s.context.ratio(prefix)
    if s.context.compacted:
        _mark_summary(request)
    server_edits = config.clear_tool_uses and config.context_edits(agent.model)
    trigger = budget * config.clear_tool_uses_trigger_share if config.clear_tool_uses else budget
    if server_edits:
        request["context_management"] = context_management_param(
            trigger_tokens=int(trigger),
            keep=config.clear_tool_uses_keep,
            at_least_tokens=int(budget * config.clear_tool_uses_at_least_share),
        )
    if estimate_tokens(_fast_chars(s, prefix), ratio) <= min(trigger, budget * _FAST_SHARE):
        return Fitted(request)
    chars = request_chars(request)
    if estimate_tokens(chars, ratio) <= trigger:
        return Fitted(request)
    messages: list[dict[str, Any]] = request["messages"]
    cleared: Cleared | None = None
    if config.clear_tool_uses:
        # Clearing old tool results comes first (tool_clearing.py): the server's, or the harness's.
        batch = int(budget * config.clear_tool_uses_at_least_share * ratio)
        clear = {"keep": config.clear_tool_uses_keep, "excess_chars": chars - int(trigger * ratio)}
        if server_edits:  # estimated as the server will clear (no less)
            simulated = clear_tool_results(
                copy.deepcopy(messages), s.tool_event_ids(), **clear, batch_chars=batch, at_least_chars=batch
            )
            if estimate_tokens(chars - (simulated.chars if simulated else 0), ratio) <= budget:
                return Fitted(request)
            # Not enough: the harness clears (a compaction request carries no context_management).
            del request["context_management"]
        cleared = clear_tool_results(messages, s.tool_event_ids(), **clear, batch_chars=batch)
        if cleared is not None and estimate_tokens(request_chars(request), ratio) <= budget:
            return Fitted(request, cleared=cleared)
    cap = int(budget * ratio / 2)
    if _truncate_results(messages, cap) and estimate_tokens(request_chars(request), ratio) <= budget:
        return Fitted(request, cleared=cleared)
    if s.context.compactions_in_a_row < config.compaction_max_in_a_row:
        count = _compactable(request, prefix, ratio, budget, first=2 if s.context.compacted else 1)
        if count is not None:
            api = config.compaction_api(agent.model)
            return Fitted(_compaction_request(request, count, api), CompactionPlan(count, api))
        why = "the conversation cannot be compacted within the model's context budget"
    else:
        why = (
            f"the context was compacted {s.context.compactions_in_a_row} times in a row without a model reply"
        )
    message = (
        f"Compaction could not bring the next model request within its budget of {budget} tokens: {why}."
    )
    return (
        ev.session_error(COMPACTION_LIMIT_ERROR, message, "exhausted"),
        ev.status_idle("retries_exhausted"),
    )


def _mark_summary(request: Mapping[str, Any]) -> None:
    """A cache breakpoint on the summary: the prefix up to it is stable until the next compaction."""
    messages = request.get("messages") or []
    if messages and messages[0]["content"]:
        messages[0]["content"][0]["cache_control"] = {"type": "ephemeral"}


def _truncate_results(messages: list[dict[str, Any]], cap: int) -> bool:
    """Cut the text of each tool result over ``cap`` characters to ``cap`` (in place); whether
    any was cut."""
    cut = False
    for message in messages:
        if message["role"] != "user":
            continue
        for block in message["content"]:
            if block.get("type") != "tool_result" or chars_of(block.get("content")) <= cap:
                continue
            content = block.get("content")
            text = (
                content
                if isinstance(content, str)
                else "".join(
                    str(b.get("text", ""))
                    for b in content or ()
                    if isinstance(b, Mapping) and b.get("type") == "text"
                )
            )
            kept = text[: max(0, cap - 400)]
            note = TRUNCATED_NOTE.format(omitted=chars_of(content) - len(kept))
            block["content"] = [{"type": "text", "text": kept}, {"type": "text", "text": note}]
            cut = True
    return cut


def _compactable(
    request: Mapping[str, Any], prefix: int, ratio: float, budget: int, *, first: int
) -> int | None:
    """The most messages (at least ``first``, ending with a user message) whose summarization
    request fits in the compaction target."""
    limit = budget * _COMPACTION_TARGET
    running = prefix + chars_of(SUMMARIZE_INSTRUCTIONS) + _MESSAGE_OVERHEAD
    best: int | None = None
    for index, message in enumerate(request["messages"]):
        running += _message_chars(message)
        if estimate_tokens(running, ratio) > limit:
            break
        if message["role"] == "user" and index + 1 >= first:
            best = index + 1
    return best


def _compaction_request(request: Mapping[str, Any], count: int, api: bool) -> dict[str, Any]:
    messages = copy.deepcopy(request["messages"][:count])
    out: dict[str, Any] = {"model": request["model"], "max_tokens": request["max_tokens"]}
    for key in ("system", "tools"):  # never context_management: the API forbids it with compaction
        if key in request:
            out[key] = request[key]
    if api:
        out["messages"] = messages
        out["compaction"] = {"type": "summarize"}
        return out
    last = messages[-1]
    last["content"] = [*last["content"], {"type": "text", "text": SUMMARIZE_INSTRUCTIONS}]
    out["messages"] = messages
    if "tools" in out:
        out["tool_choice"] = {"type": "none"}
    return out


# -- the driver's side -------------------------------------------------------------------------


def compaction_events(
    plan: CompactionPlan,
    message: Mapping[str, Any],
    start_id: str,
    usage_before: Mapping[str, int],
    *,
    price: ModelPrice | None = None,
    budget: Budget | None = None,
) -> tuple[ev.Draft, ...]:
    """The events for a finished compaction request (appended together): the span end, the
    ``agent.thread_context_compacted`` with the summary (``null``: the model gave none; the fold
    then keeps the conversation, and the attempt counts towards the limit), the cumulative
    ``session.usage``."""
    content = [b for b in message.get("content") or () if isinstance(b, Mapping)]
    payload: dict[str, Any] = {"compacted_messages": plan.messages}
    block = next((dict(b) for b in content if b.get("type") == "compaction"), None)
    if block is not None:
        payload["summary"] = block.get("content") or None
        payload["compaction_block"] = block
    else:
        text = "".join(str(b.get("text", "")) for b in content if b.get("type") == "text").strip()
        payload["summary"] = text or None
    raw = message.get("usage")
    raw = raw if isinstance(raw, Mapping) else {}
    keys = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    usage = {k: int(raw.get(k) or 0) for k in keys}
    span_end = {"model_request_start_id": start_id, "model_usage": usage, "is_error": False}
    total = {k: int(usage_before.get(k, 0)) + usage[k] for k in usage}
    snapshot = {"usage": usage_snapshot(total, price), "budget": budget.to_json() if budget else None}
    return (
        ev.Draft(ev.SPAN_MODEL_REQUEST_END, span_end),
        ev.Draft(ev.AGENT_THREAD_CONTEXT_COMPACTED, payload),
        ev.Draft(ev.SESSION_USAGE, snapshot),
    )


async def counted_over_budget(
    model: object, config: HarnessConfig, model_id: str, s: SessionState, request: Mapping[str, Any]
) -> bool:
    """Near the budget, count ``request`` with the endpoint's ``count_tokens`` (when the model
    client offers it and ``harness.count_tokens`` is on) and keep the count in ``s`` (it replaces
    the estimate's ratio until the next reply). True when the request is over the budget: the
    step must decide again."""
    counter = getattr(model, "count_tokens", None)
    if not config.count_tokens or counter is None:
        return False
    budget = config.context_budget(model_id)
    prefix = _prefix_chars(request)
    ratio = s.context.ratio(prefix)
    if estimate_tokens(_fast_chars(s, prefix), ratio) < budget * COUNT_FROM_SHARE:
        return False  # the fast estimate bounds the request from above: far from the budget
    chars = request_chars(request)
    if estimate_tokens(chars, ratio) < budget * COUNT_FROM_SHARE:
        return False
    # Counted as written (before any server-side edit): the count calibrates the estimate of it.
    request = {k: v for k, v in request.items() if k != "context_management"}
    try:
        tokens = await counter(request)
    except ModelError as exc:
        log.warning("counting a request's tokens failed (the estimate decides): %s", exc)
        return False
    if not isinstance(tokens, int) or tokens <= 0:
        return False
    s.context.counted = (chars, tokens)
    return tokens > budget
