"""``SessionDriver``: performs the step function's decisions for one session.

The driver holds no state of its own that matters: it folds the log incrementally, asks
:func:`~control_plane.harness.step.decide` what to do, and does it: appends (fenced with the lease
epoch; the first append of a decision guarded with ``expected_seq`` at the position the decision was
made, so input that arrived meanwhile makes it decide again), model calls (streamed, deltas fanned
out on the bus, the whole outcome appended at once), tool calls through the gateway (the
``agent.tool_use`` event id is the idempotency key), MCP calls through the MCP backend (the
``agent.mcp_tool_use`` event id is the key), and session resource updates (``status``,
``usage``: :mod:`~control_plane.harness.session_mirror`). After every append it publishes
``publish_persisted``; a model's stream is fanned out as previews by
:mod:`~control_plane.harness.stream_previews`.

Round trips: the log is read once when the driver starts and again only when it may hold events
the driver has not seen (a wake arrived, an append conflicted, or the events the driver appended
do not follow the last one it knew): its own appends are folded in from the store's reply. The
session resource is written when its status changes; the usage of a model request rides on the
next status write (the API reads usage from the log, the resource's copy is for operators).

Before a model call of an agent with MCP servers, the driver lists their tools (the servers not
already found unavailable this turn) and decides again with that offer as data
(:mod:`~control_plane.harness.mcp_offer`): the step function stays pure.

No edge: before a sandbox tool call or a provision, the driver asks the gateway whether an edge of
the session's environment is connected. If none is (on any control-plane process: the store's
presence records count), the session gets one non-fatal ``session.error`` (``edge_unavailable``)
at once, while the call waits (``edge_wait_s``) for an edge; one per outage, not one per call: it
is said again only after a call has reached an edge or an edge was seen connected.

Multiagent: the driver performs the decisions of every thread of the session, focusing one at a
time (:mod:`~control_plane.harness.thread_brains`); a subagent's drafts become its thread's events.

Stopping: ``Fenced`` on an append or a lost lease stops the session's work quietly (another harness
owns it now); ``user.interrupt`` cancels the model stream or tool call in flight, and the next step
ends the turn. A model request cancelled this way leaves no assistant message: it is not billed
twice, since nothing was recorded as finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from control_plane.bus import EventBus
from control_plane.edge_counts import count_edges
from control_plane.errors import EdgeUnavailable, Fenced, GatewayDraining, NotFound, SequenceConflict
from control_plane.harness import event_drafts as ev
from control_plane.harness.agent import AgentSpec
from control_plane.harness.compaction import compaction_events, counted_over_budget
from control_plane.harness.config import HarnessConfig
from control_plane.harness.fold import SessionState
from control_plane.harness.lease import LeaseKeeper
from control_plane.harness.mcp_calls import McpBackend, call_tool, list_servers
from control_plane.harness.mcp_offer import McpOffer, build_offer, servers_to_list
from control_plane.harness.memory_writeback import MemoryWriteBack
from control_plane.harness.model import ModelClient, ModelError, StreamEvent
from control_plane.harness.outcomes import (
    ONGOING_INTERVAL_S,
    GradeOutcome,
    evaluation_end_events,
    grading_failure_events,
    ongoing_event,
)
from control_plane.harness.session_mirror import SessionMirror, StopWork
from control_plane.harness.step import (
    CallModel,
    Decision,
    DispatchMcpTool,
    DispatchTool,
    NoEnvironment,
    SandboxMove,
    SandboxUnavailable,
    ToolAnswered,
    ToolCallFailed,
    ToolOutcome,
    model_failure_events,
    model_output_events,
    tool_outcome_events,
)
from control_plane.harness.stream_previews import block_event_ids, stream_previews
from control_plane.harness.thread_brains import SessionThreads, Thread, decide_threads
from control_plane.harness.tool_gateway import RecentSessions, ToolGateway
from control_plane.sessions.log import append_and_publish
from control_plane.sessions.memory_resources import memory_prompt
from control_plane.sessions.usage import Budget
from control_plane.store.base import Event, NewEvent, Resource, Store
from outpost_wire.errors import OutpostError
from outpost_wire.results import TextBlock, ToolResult

__all__ = ["DriverContext", "RecentSessions", "SessionDriver", "ToolGateway"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_LEADING_STATUSES = frozenset({"running", "rescheduling"})
_SPECULATIVE_DELAY_S = 0.05


@dataclass
class DriverContext:
    """What every session's driver shares (owned by the ``Harness``)."""

    store: Store
    gateway: ToolGateway
    model: ModelClient
    bus: EventBus
    config: HarnessConfig
    clock: Callable[[], datetime]
    provisioned: RecentSessions = field(default_factory=RecentSessions)  # sessions known to have a sandbox
    edge_outages: RecentSessions = field(default_factory=RecentSessions)  # told their environment has no edge
    background: set[asyncio.Task[None]] = field(default_factory=set)  # speculative provisioning
    new_id: Callable[[], str] = ev.new_event_id
    mcp: McpBackend | None = None  # None: MCP servers are reported unavailable
    memory: MemoryWriteBack | None = None  # None: memory changes reported by the edge are dropped


class _Interrupted(Exception):
    """A ``user.interrupt`` arrived while an effect was in flight."""


class SessionDriver:
    """Runs one session from its log until there is nothing to do (one instance per wake)."""

    def __init__(
        self,
        ctx: DriverContext,
        session_id: str,
        lease: LeaseKeeper,
        wake: asyncio.Event,
        *,
        session: Resource | None = None,
    ) -> None:
        """``session``: the session resource if the caller already read it (while it took the
        lease, say); otherwise the driver reads it."""
        self._ctx = ctx
        self._prefetched = session
        #: The session resource's status and usage, kept in step with the log.
        self._mirror = SessionMirror(ctx.store, session_id, ctx.clock, ctx.background)
        self._sid = session_id
        self._lease = lease
        self._wake = wake
        self._state = SessionState()
        #: Multiagent: the session's threads (thread_brains.py); ``_state`` / ``_agent`` are the
        #: focused thread's (the one whose decision is being performed).
        self._threads: SessionThreads | None = None
        self._focus: Thread | None = None
        #: The folded state may lack events: read the log before the next decision.
        self._stale = True
        self._agent: AgentSpec | None = None
        self._memory: list[dict[str, Any]] = []  # the session's memory store mounts
        self.environment_id: str | None = None
        #: The session runs no more (archived, terminated or deleted): the harness forgets it.
        self.ended = False

    async def run(self) -> None:
        """Step until idle. Returns quietly when fenced, when the lease is lost or when the
        session is gone; other errors propagate."""
        try:
            await self._run()
        except StopWork as stop:
            log.info("session %s: stopping: %s", self._sid, stop)

    async def _run(self) -> None:
        body = await self._load_session()
        if body is None:
            return
        try:
            self._memory = list(body.get("memory_stores") or [])
            self._agent = AgentSpec.from_json(
                body.get("agent") or {},
                memory=memory_prompt(self._memory),
                skill_offers=body.get("skill_offers"),
            )
            if body.get("tool_runner") == "worker":  # an outside worker runs the toolset's calls
                self._agent = dataclasses.replace(self._agent, worker_tools=True)
            self._threads = threads = SessionThreads.for_session(
                self._sid,
                self._agent,
                body.get("agent") or {},
                memory=memory_prompt(self._memory),
                skill_offers=body.get("skill_offers"),
            )
        except ValueError as exc:
            log.error("session %s: cannot run: %s", self._sid, exc)
            return
        env = body.get("environment_id")
        self.environment_id = env if isinstance(env, str) and env else None
        # The budget the session was created with; a later one comes from the log (session.updated).
        self._focus, self._state = threads.primary, threads.primary.state
        if self._state.last_seq == 0:
            threads.set_budget(Budget.from_json(body.get("budget")))
        # Another process may have moved the session's sandbox while it held the session.
        self._ctx.gateway.forget_session(self._sid)
        while True:
            if self._lease.lost.is_set():
                raise StopWork("lease lost")
            if self._stale or self._wake.is_set():
                await self._refresh()
            decision = self._decide()
            if isinstance(decision.effect, CallModel) and self._agent.mcp_servers:
                try:
                    offer = await self._interruptible(self._mcp_offer(self._agent))
                except _Interrupted:
                    continue  # the next decision ends the turn
                decision = self._decide(offer, only=True)
            # Context window (compaction.py): near the budget, count the request exactly.
            call = decision.effect
            if isinstance(call, CallModel) and await counted_over_budget(
                self._ctx.model, self._ctx.config, self._agent.model, self._state, call.request
            ):
                decision = self._decide(call.mcp, only=True)
            if decision.idle:
                log.debug("session %s: %s", self._sid, decision.reason)
                break
            log.debug("session %s: %s", self._sid, decision.reason)
            try:
                await self._perform(decision)
            except SequenceConflict:
                log.debug("session %s: new events arrived; deciding again", self._sid)
                self._stale = True
        self._focus, self._state = threads.primary, threads.primary.state  # the session's status
        if not self._mirror.shows(self._state.status):
            await self._mirror.update(status=self._state.status)
        self.ended = self._state.status == "terminated"

    def _thread_tag(self) -> str | None:
        """The focused thread's id if it is a subagent's (``None``: the primary)."""
        return None if self._focus is None or self._focus.primary else self._focus.id

    def _decide(self, offer: McpOffer | None = None, *, only: bool = False) -> Decision:
        """The next decision of the session's threads (``only``: of the focused one), focusing
        the thread it is for."""
        assert self._threads is not None and self._focus is not None
        now = self._ctx.clock()
        thread, decision = decide_threads(
            self._threads, self._ctx.config, now, offer, only=self._focus if only else None
        )
        self._focus, self._state, self._agent = thread, thread.state, thread.agent
        return decision

    async def _load_session(self) -> dict[str, Any] | None:
        resource, self._prefetched = self._prefetched, None
        if resource is None:
            try:
                resource = await self._ctx.store.get_resource("session", self._sid)
            except NotFound:
                log.info("session %s: gone; nothing to run", self._sid)
                self.ended = True
                return None
        if resource.archived_at is not None or resource.body.get("status") == "terminated":
            self.ended = True
            return None
        self._mirror.known = resource
        return resource.body

    async def _refresh(self) -> None:
        self._stale = False
        events = await self._ctx.store.get_events(self._sid, after_seq=self._state.last_seq)
        assert self._threads is not None
        for event in events:
            self._threads.apply(event)

    def _fold_own(self, stored: Sequence[Event]) -> None:
        """Fold in events this driver just appended if they follow the last event it knows;
        otherwise others were appended in between: the next decision reads the log first."""
        if self._stale:
            return
        expected = self._state.last_seq + 1
        for event in stored:
            if event.seq != expected:
                self._stale = True
                return
            expected += 1
        assert self._threads is not None
        for event in stored:
            self._threads.apply(event)

    # -- performing a decision --------------------------------------------------------------------
    async def _perform(self, decision: Decision) -> None:
        if decision.delay_s > 0:
            with contextlib.suppress(_Interrupted):
                await self._interruptible(asyncio.sleep(decision.delay_s))
            return
        appends = list(decision.appends)
        start_id: str | None = None
        if isinstance(decision.effect, CallModel):
            # The span start goes in the same (conditional) append as the decision's own events:
            # one durable commit between the decision and the model request, not two.
            start_id = self._ctx.new_id()
            if decision.effect.provision and self._ctx.config.eager_provision:
                await self._start_provisioning()
            appends.append(
                ev.Draft(ev.SPAN_MODEL_REQUEST_START, decision.effect.span_start_payload(), start_id)
            )
        if appends:
            await self._append_with_status(appends, expected_seq=self._state.last_seq)
        if isinstance(decision.effect, CallModel):
            assert start_id is not None
            await self._call_model(decision.effect, start_id)
        elif isinstance(decision.effect, DispatchTool):
            await self._dispatch(decision.effect)
        elif isinstance(decision.effect, DispatchMcpTool):
            await self._dispatch_mcp(decision.effect)
        elif isinstance(decision.effect, GradeOutcome):  # outcomes: control_plane/harness/outcomes.py
            await self._grade(decision.effect)

    async def _grade(self, call: GradeOutcome) -> None:
        """Outcomes: ask the grader (its start event is in the log); its verdict is recorded
        before anything acts on it. ``span.outcome_evaluation_ongoing`` beats while it runs."""
        assert self._agent is not None
        usage_before = dict(self._state.usage)

        async def heartbeat() -> None:
            while True:
                await asyncio.sleep(ONGOING_INTERVAL_S)
                try:
                    await self._append([ongoing_event(call)])
                except Exception as exc:  # the grading's own outcome decides; a beat is a hint
                    log.debug("session %s: no evaluation heartbeat: %s", self._sid, exc)

        beat = asyncio.create_task(heartbeat(), name=f"evaluation-{self._sid}")
        try:
            message = await self._interruptible(self._ctx.model.stream(call.request, lambda _: None))
        except _Interrupted:
            return  # the next step ends the evaluation as interrupted and the turn
        except ModelError as exc:
            log.warning("session %s: grader request failed (attempt %d): %s", self._sid, call.attempt, exc)
            failure = grading_failure_events(
                call,
                self._ctx.config,
                error_type=exc.error_type,
                message=exc.message,
                retryable=exc.retryable,
            )
            await self._append_with_status(failure)
            return
        finally:
            await _cancel(beat)
        price = self._ctx.config.price_of(self._agent.model)
        drafts = evaluation_end_events(call, message, usage_before, price=price, budget=self._state.budget)
        await self._append(drafts)
        self._mirror.usage_due = drafts[-1].payload["usage"]

    async def _append(self, drafts: Sequence[ev.Draft], *, expected_seq: int | None = None) -> list[Event]:
        assert self._threads is not None and self._focus is not None
        drafts = self._threads.outgoing(self._focus, drafts)  # a subagent's: its thread's events
        events = [NewEvent(d.id or self._ctx.new_id(), d.type, d.payload) for d in drafts]
        try:
            stored = await append_and_publish(
                self._ctx.store,
                self._ctx.bus,
                self._sid,
                events,
                self._ctx.clock(),
                expected_seq=expected_seq,
                epoch=self._lease.epoch,
            )
        except Fenced as exc:
            raise StopWork(f"fenced: {exc}") from None
        except BaseException:
            self._stale = True  # whether it landed is unknown: read the log
            raise
        self._fold_own(stored)
        return stored

    async def _append_with_status(
        self, drafts: Sequence[ev.Draft], *, expected_seq: int | None = None
    ) -> list[Event]:
        """Append, keeping the session resource's ``status`` in step. A move to ``running`` /
        ``rescheduling`` is written to the resource *before* the append, a move to ``idle`` /
        ``terminated`` after it: a crash in between leaves the resource saying "running", so a
        restarted harness's scan wakes the session and the log settles the truth. The leading
        update runs in the background, ordered before any later update of the resource."""
        status = _last_status(drafts) if self._focus is None or self._focus.primary else None
        if status in _LEADING_STATUSES:
            # Not awaited: the model request need not wait for it. A restarted harness's scan also
            # wakes sessions whose log is not at rest, whatever the resource says.
            self._mirror.update_soon(status=status)
            return await self._append(drafts, expected_seq=expected_seq)
        stored = await self._append(drafts, expected_seq=expected_seq)
        if status is not None and status not in _LEADING_STATUSES:
            await self._mirror.update(status=status)
        return stored

    async def _call_model(self, call: CallModel, start_id: str) -> None:
        """The span start is already in the log (appended with the decision)."""
        assert self._agent is not None
        if call.compaction is not None:  # context window (compaction.py)
            await self._compact(call, start_id)
            return
        usage_before = dict(self._state.usage)
        ids: dict[int, str] = {}
        ctx = self._ctx
        on_stream = stream_previews(ctx.bus, self._sid, ctx.new_id, ids, thread_id=self._thread_tag())
        timer: asyncio.TimerHandle | None = None
        if call.provision and not self._ctx.config.eager_provision:
            # Speculative provisioning overlaps the model's time to first token; it starts once the
            # request is on its way (the first stream event, or 50 ms), so it never delays it.
            started = False

            def kick() -> None:
                nonlocal started
                if not started:
                    started = True
                    self._spawn_provisioning()

            timer = asyncio.get_running_loop().call_later(_SPECULATIVE_DELAY_S, kick)
            forward = on_stream

            def on_stream(item: StreamEvent) -> None:
                kick()
                forward(item)

        try:
            message = await self._interruptible(self._ctx.model.stream(call.request, on_stream))
        except _Interrupted:
            return  # the next step closes the span and ends the turn
        except ModelError as exc:
            await self._model_failed("model", call, start_id, exc)
            return
        finally:
            if timer is not None:
                timer.cancel()
        block_ids = block_event_ids(message, ids, self._ctx.new_id)
        drafts = model_output_events(
            self._agent,
            message,
            block_ids,
            start_id,
            usage_before,
            call.mcp,
            price=self._ctx.config.price_of(self._agent.model),
            budget=self._state.budget,
        )
        await self._append(drafts)
        self._mirror.usage_due = drafts[-1].payload["usage"]

    async def _model_failed(self, what: str, call: CallModel, start_id: str, exc: ModelError) -> None:
        """A model or compaction request failed: its span ends, and a retry or the error follows."""
        log.warning("session %s: %s request failed (attempt %d): %s", self._sid, what, call.attempt, exc)
        drafts = model_failure_events(
            attempt=call.attempt,
            config=self._ctx.config,
            error_type=exc.error_type,
            message=exc.message,
            retryable=exc.retryable,
            start_id=start_id,
        )
        await self._append_with_status(drafts)

    async def _compact(self, call: CallModel, start_id: str) -> None:
        """A compaction request; its outcome is appended at once, as a model turn's (compaction.py)."""
        assert self._agent is not None and call.compaction is not None
        usage_before = dict(self._state.usage)
        try:
            message = await self._interruptible(self._ctx.model.stream(call.request, lambda item: None))
        except _Interrupted:
            return  # the next step closes the span and ends the turn
        except ModelError as exc:
            await self._model_failed("compaction", call, start_id, exc)
            return
        price = self._ctx.config.price_of(self._agent.model)
        drafts = compaction_events(
            call.compaction, message, start_id, usage_before, price=price, budget=self._state.budget
        )
        await self._append(drafts)
        self._mirror.usage_due = drafts[-1].payload["usage"]

    async def _start_provisioning(self) -> None:
        config, env = self._ctx.config, self.environment_id
        if env is None or self._sid in self._ctx.provisioned:
            return
        if config.eager_provision:
            await self._provision(env)
        elif config.speculative_provision:
            self._spawn_provisioning()

    def _spawn_provisioning(self) -> None:
        """Provision in the background (speculative: never awaited; a failure is only logged)."""
        env = self.environment_id
        if env is None or self._sid in self._ctx.provisioned or not self._ctx.config.speculative_provision:
            return
        task = asyncio.create_task(self._provision(env), name=f"provision-{self._sid}")
        self._ctx.background.add(task)
        task.add_done_callback(self._ctx.background.discard)

    async def _provision(self, environment_id: str) -> None:
        try:
            await self._tell_if_no_edge(environment_id)
            await self._ctx.gateway.provision(self._sid, environment_id)
        except Exception as exc:
            log.warning(
                "session %s: provisioning failed (the first tool call will retry): %s", self._sid, exc
            )
            return
        self._ctx.provisioned.add(self._sid)
        self._ctx.edge_outages.discard(self._sid)

    async def _tell_if_no_edge(self, environment_id: str) -> None:
        """Append the ``edge_unavailable`` ``session.error`` if no edge of the environment is
        connected and the session has not been told of this outage yet."""
        ctx = self._ctx
        if ctx.gateway.edges_connected(environment_id) > 0:
            ctx.edge_outages.discard(self._sid)
            return
        if self._sid in ctx.edge_outages:
            return
        ctx.edge_outages.add(self._sid)  # before any await: a concurrent check says nothing
        counts = (await count_edges(ctx.store, ctx.clock(), environment_id=environment_id))[environment_id]
        if counts.connected:
            # Up on another control-plane process: not an outage. The call waits here; placement
            # (``follow_tunnels``) moves the session to the process that holds the edge.
            ctx.edge_outages.discard(self._sid)
            log.info(
                "session %s: no edge of environment %s here, %d on other processes",
                self._sid,
                environment_id,
                counts.connected,
            )
            return
        log.warning(
            "session %s: no edge of environment %s is connected (%d enrolled); its calls wait up to %g s",
            self._sid,
            environment_id,
            counts.enrolled,
            ctx.gateway.edge_wait_s,
        )
        await self._append([ev.edge_unavailable(environment_id, counts.enrolled, ctx.gateway.edge_wait_s)])

    async def _dispatch(self, call: DispatchTool) -> None:
        """Run the call; what became of it is data for the step (:func:`tool_outcome_events`)."""
        outcome: ToolOutcome
        move: SandboxMove | None = None
        assert self._threads is not None and self._focus is not None
        key = self._threads.sandbox_key(self._focus)  # the session's sandbox, or the thread's own
        if self.environment_id is None:
            outcome = NoEnvironment()
        else:
            await self._tell_if_no_edge(self.environment_id)
            if self._ctx.memory is not None:
                await self._ctx.memory.before_call(self._sid, self._memory)
            try:
                result = await self._interruptible(
                    self._ctx.gateway.execute(
                        key,
                        self.environment_id,
                        call.name,
                        call.input,
                        idempotency_key=call.tool_use_id,
                        timeout_s=self._ctx.config.tool_timeout_s,
                    )
                )
            except _Interrupted:
                return  # the next step answers the call as interrupted and ends the turn
            except GatewayDraining as exc:
                # This process is shutting down: leave the call unanswered for the harness that
                # takes the lease next (it re-sends it with the same idempotency key).
                raise StopWork(str(exc)) from None
            except EdgeUnavailable as exc:
                outcome = SandboxUnavailable(str(exc))
            except OutpostError as exc:
                outcome = ToolCallFailed.of(exc)
            else:
                self._ctx.provisioned.add(key)
                self._ctx.edge_outages.discard(self._sid)  # an edge answered: the outage is over
                outcome = ToolAnswered(await self._write_back(result))
            move = self._ctx.gateway.take_move(key)  # the sandbox made anew on another edge
        await self._append(list(tool_outcome_events(call, outcome, move)))

    async def _write_back(self, result: ToolResult) -> ToolResult:
        """The call's memory changes written (before its result is recorded); conflict notes
        appended to what the model sees."""
        if not result.memory_changes:
            return result
        notes: list[str] = []
        if self._ctx.memory is not None:
            notes = await self._ctx.memory.write_back(self._sid, self._memory, result.memory_changes)
        content = result.content + tuple(TextBlock(note) for note in notes)
        return dataclasses.replace(result, content=content, memory_changes=())

    async def _mcp_offer(self, agent: AgentSpec) -> McpOffer:
        """The MCP tools for the next model request, from the servers' current tool lists."""
        servers = servers_to_list(agent, self._state.mcp_down)
        listings = await list_servers(self._ctx.mcp, self._sid, self.environment_id, servers)
        return build_offer(agent, listings)

    async def _dispatch_mcp(self, call: DispatchMcpTool) -> None:
        assert self._agent is not None
        try:
            draft = await self._interruptible(
                call_tool(
                    self._ctx.mcp,
                    self._agent,
                    self._sid,
                    self.environment_id,
                    call,
                    self._ctx.config.mcp_tool_timeout_s,
                )
            )
        except _Interrupted:
            return  # the next step answers the call as interrupted and ends the turn
        except GatewayDraining as exc:
            raise StopWork(str(exc)) from None  # as for toolset calls: the next harness makes the call
        await self._append([draft])

    # -- interruption -------------------------------------------------------------------------------
    async def _interruptible(self, awaitable: Awaitable[_T]) -> _T:
        """Await ``awaitable`` unless a ``user.interrupt`` arrives (→ ``_Interrupted``) or the
        lease is lost (→ ``StopWork``) first; either cancels it."""
        op = asyncio.ensure_future(awaitable)
        watcher = asyncio.ensure_future(self._watch(self._state.last_seq))
        try:
            await asyncio.wait({op, watcher}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            await _cancel(op, watcher)
            raise
        if op.done():
            await _cancel(watcher)
            return op.result()
        await _cancel(op)
        if watcher.result() == "lease":
            raise StopWork("lease lost")
        raise _Interrupted

    async def _watch(self, after_seq: int) -> str:
        while True:
            if self._lease.lost.is_set():
                return "lease"
            if self._wake.is_set():
                self._wake.clear()
                self._stale = True  # the wake's events are read before the next decision
                try:
                    found = await self._ctx.store.get_events(
                        self._sid, after_seq=after_seq, types=[ev.USER_INTERRUPT]
                    )
                    if self._threads is not None and self._focus is not None:  # another thread's?
                        found = [e for e in found if self._threads.interrupts(e, self._focus)]
                except Exception:
                    log.warning("session %s: could not check for interrupts", self._sid, exc_info=True)
                    found = []
                if found:
                    return "interrupt"
                continue
            await _first_of(self._wake.wait(), self._lease.lost.wait())


def _last_status(drafts: Sequence[ev.Draft]) -> str | None:
    status = None
    for draft in drafts:
        status = ev.status_of(draft.type) or status
    return status


async def _first_of(*awaitables: Awaitable[Any]) -> None:
    tasks = [asyncio.ensure_future(a) for a in awaitables]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        await _cancel(*tasks)


async def _cancel(*tasks: asyncio.Future[Any]) -> None:
    """Cancel ``tasks`` and wait until they are finished (their outcomes are dropped)."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
