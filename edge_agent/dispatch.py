"""Turn tunnel requests into sandbox work: the edge's ``provision`` / ``execute`` / ``destroy``.

The dispatcher sits between the link (frames in, outcomes out) and the sandbox manager. It owns
three rules:

* **Policy first.** Every sandbox spec (a provision's, or the one an execute carries: the first of
  a session on a connection, or a changed one) is resolved against the local
  :class:`~edge_agent.policy.Policy` and the limits remembered for the session; a refusal is a
  ``Failure`` with ``POLICY_DENIED`` and a message naming the rule. An execute without a spec uses
  the remembered limits; with none remembered (the edge restarted, or destroyed the sandbox) it is
  refused with ``SANDBOX_SPEC_REQUIRED`` before anything is journaled, and the control plane sends
  it again with the spec.
* **A tool call is checked once, at the door**, into a :class:`~edge_agent.sandbox.ToolCall`
  carrying its one deadline (the request's, or the tool's timeout if that ends first), which the
  manager and the channel honour; bad input is a tool error.
* **Exactly once per idempotency key.** A key already finished returns its stored outcome; a key
  running now is joined; a key that started before a crash and never finished is answered with a
  tool error (never run twice). See :mod:`edge_agent.journal`.
* **Errors are outcomes.** Nothing raised here reaches the link: local errors become ``Failure``
  with their wire code, a dead sandbox becomes a ``ToolResult`` with ``is_error``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import replace

from edge_agent.egress import EgressMode
from edge_agent.errors import (
    EdgeError,
    InvalidToolInput,
    PolicyDenied,
    RepositoryError,
    SandboxSpecRequired,
)
from edge_agent.journal import JournalState, ResultJournal
from edge_agent.mcp import McpConnectionFailed, McpError, McpHub, McpInvalidArguments
from edge_agent.policy import Policy
from edge_agent.sandbox import SandboxLimits, SandboxManager, ToolCall
from edge_agent.sandbox.content_mounts import ContentMounts
from edge_agent.sandbox.memory_mounts import MemoryMounts
from outpost_wire.codec import decode_outcome, encode_outcome
from outpost_wire.errors import ErrorCode
from outpost_wire.frames import (
    Destroy,
    Destroyed,
    Execute,
    Failure,
    McpCall,
    Outcome,
    Provision,
    Provisioned,
    PutBlob,
    Request,
)
from outpost_wire.results import ToolResult

__all__ = ["Dispatcher"]

log = logging.getLogger(__name__)

_REQUEST_FAILURES = frozenset({ErrorCode.POLICY_DENIED, ErrorCode.CAPACITY_EXHAUSTED})

INTERRUPTED_MESSAGE = (
    "tool call was interrupted by a restart of the edge agent before it finished; "
    "it may or may not have taken effect, and it was not run again"
)


class Dispatcher:
    def __init__(
        self,
        manager: SandboxManager,
        policy: Policy,
        journal: ResultJournal,
        *,
        mcp: McpHub | None = None,
        clock: Callable[[], float] = time.time,
        memory: MemoryMounts | None = None,
        content: ContentMounts | None = None,
    ) -> None:
        """``memory``: the host side of memory-store mounts (the manager's); None = none.
        ``content``: the blob cache and files/skills mounts (the manager's); None = none."""
        self._memory = memory
        self._content = content
        self._mcp = mcp
        self._manager = manager
        self._policy = policy
        self._journal = journal
        self._clock = clock
        # (session id, idempotency key) -> the one run: keys are unique within a session only
        self._running: dict[tuple[str, str], asyncio.Task[Outcome]] = {}
        self._by_request: dict[str, asyncio.Task[Outcome]] = {}  # request id -> its task
        self._limits: dict[str, SandboxLimits] = {}  # session id -> limits it was provisioned with

    @property
    def in_flight(self) -> int:
        return len(self._by_request)

    async def handle(self, request: Request) -> Outcome:
        """Serve one request; never raises (except CancelledError when cancelled)."""
        task = asyncio.current_task()
        if task is not None:
            self._by_request[request.request_id] = task  # type: ignore[assignment]
        try:
            return await self._within_deadline(request)
        except EdgeError as exc:
            return Failure(exc.code, str(exc))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("request %s failed", request.request_id)
            return Failure(ErrorCode.INTERNAL, "internal error at the edge (see the edge's log)")
        finally:
            self._by_request.pop(request.request_id, None)

    def cancel(self, request_id: str) -> bool:
        task = self._by_request.get(request_id)
        if task is None:
            return False
        task.cancel()
        return True

    async def _within_deadline(self, request: Request) -> Outcome:
        """A request whose deadline passed before it got here is refused. A tool call carries its
        deadline down itself (:class:`~edge_agent.sandbox.ToolCall`); a provision or a destroy
        is bounded by it here."""
        remaining = self._remaining_s(request)
        if remaining is not None and remaining <= 0:
            return Failure(
                ErrorCode.DEADLINE_EXCEEDED, "the request's deadline passed before it reached the edge"
            )
        if remaining is None or isinstance(request.op, Execute | McpCall):
            return await self._route(request)
        try:
            async with asyncio.timeout(remaining):
                return await self._route(request)
        except TimeoutError:
            return Failure(ErrorCode.DEADLINE_EXCEEDED, "the request's deadline passed")

    def _remaining_s(self, request: Request) -> float | None:
        """Seconds left until the request's deadline (None: it has none)."""
        return request.deadline_ms / 1000 - self._clock() if request.deadline_ms else None

    async def _route(self, request: Request) -> Outcome:
        op = request.op
        if isinstance(op, Execute | McpCall):
            return await self._execute(request, op)
        if isinstance(op, Provision):
            limits = self._resolve(op)
            self._limits[request.session_id] = limits
            info = await self._manager.provision(request.session_id, limits)
            return Provisioned(sandbox_id=info.sandbox_id, image=info.image, reused=info.reused)
        if isinstance(op, PutBlob):
            if self._content is None:
                return Failure(ErrorCode.POLICY_DENIED, "this edge does not mount files or skills")
            return await asyncio.to_thread(self._content.put_chunk, request.session_id, op)
        if isinstance(op, Destroy):
            self._limits.pop(request.session_id, None)
            if self._content is not None:
                await asyncio.to_thread(self._content.forget, request.session_id)
            if self._memory is not None:
                await asyncio.to_thread(self._memory.forget, request.session_id)
            return Destroyed(existed=await self._manager.destroy(request.session_id))
        return Failure(ErrorCode.INVALID_REQUEST, f"unsupported operation {type(op).__name__}")

    def _resolve(self, op: Provision) -> SandboxLimits:
        """The policy's answer to a provision spec, egress included. A sandbox with repositories
        needs the edge's git relay, which it reaches through the egress proxy: egress ``none``
        becomes an allowlist of no hosts (which the policy must permit)."""
        mode = op.egress.mode
        if op.repositories and mode == EgressMode.NONE.value:
            mode = EgressMode.ALLOWLIST.value
        try:
            limits = self._policy.resolve(
                image=op.image,
                cpus=op.cpus,
                memory_bytes=op.memory_bytes,
                pids=op.pids,
                egress_mode=mode,
                allowed_hosts=op.egress.allowed_hosts,
            )
        except PolicyDenied as exc:
            if mode == op.egress.mode:
                raise
            raise PolicyDenied(
                exc.rule,
                f"{exc.message}; a session with repositories reaches the edge's git relay through "
                "the egress proxy, so it needs egress 'allowlist' (of no hosts at least)",
            ) from None
        return replace(
            limits, repositories=op.repositories, memory_mounts=op.memory_mounts, blob_mounts=op.blob_mounts
        )

    async def _execute(self, request: Request, op: Execute | McpCall) -> Outcome:
        key = request.idempotency_key or request.request_id
        joined = (request.session_id, key)
        task = self._running.get(joined)
        if task is None:
            work = (
                self._run_once(key, request, op)
                if isinstance(op, Execute)
                else self._mcp_once(key, request, op)
            )
            task = asyncio.create_task(work, name=f"exec-{key}")
            self._running[joined] = task
            task.add_done_callback(lambda _t: self._running.pop(joined, None))
        else:
            log.info("request %s joins the running call for key %s", request.request_id, key)
        return await asyncio.shield(task)

    async def _run_once(self, key: str, request: Request, op: Execute) -> Outcome:
        """The door of a sandbox tool call: settle the session's limits, parse and check the call
        into a :class:`ToolCall` with its one deadline, and only then journal and run it. A
        missing spec is a ``SANDBOX_SPEC_REQUIRED`` failure and bad input a tool error, both
        before the journal hears of the key (the control plane sends a refused call again, with
        the same key)."""
        now = asyncio.get_running_loop().time()
        remaining = self._remaining_s(request)
        limits = self._limits_for(request.session_id, op.sandbox)
        await self._sync_memory(request.session_id, limits, op)
        problem = await self._sync_content(request.session_id, limits, op)
        if problem:
            return ToolResult.error(problem)
        try:
            call = ToolCall.from_json(
                request.session_id,
                op.tool,
                op.input_json,
                now=now,
                timeout_ms=op.timeout_ms,
                deadline=None if remaining is None else now + remaining,
            )
        except InvalidToolInput as exc:
            return ToolResult.error(exc.message)
        existing = await self._journal.start(key, request.session_id)
        if existing is not None:
            if existing.state is JournalState.FINISHED and existing.outcome is not None:
                log.info("key %s already finished; returning the stored result", key)
                return decode_outcome(existing.outcome)
            return ToolResult.error(INTERRUPTED_MESSAGE)
        outcome: Outcome = await self._run_tool(call, limits)
        if isinstance(outcome, ToolResult) and limits.memory_mounts and self._memory is not None:
            # Before the result leaves (and is journaled): what the call changed in the memory
            # mounts travels with it, so a sandbox that dies after this loses nothing.
            changes = await asyncio.to_thread(self._memory.scan, call.session_id, limits.memory_mounts)
            if changes:
                outcome = replace(outcome, memory_changes=changes)
        await self._journal.finish(key, request.session_id, encode_outcome(outcome))
        return outcome

    def _limits_for(self, session_id: str, spec: Provision | None) -> SandboxLimits:
        """The session's limits: ``spec`` resolved against the policy (and remembered) when the
        call carries one, else the ones remembered from the session's last spec. Raises
        :class:`SandboxSpecRequired` when there are none (this edge restarted or destroyed the
        session's sandbox since), :class:`PolicyDenied` for a spec the policy refuses."""
        if spec is not None:
            limits = self._limits[session_id] = self._resolve(spec)
            return limits
        known = self._limits.get(session_id)
        if known is None:
            raise SandboxSpecRequired(
                f"this edge holds no sandbox spec for session {session_id} (it restarted or "
                "destroyed the session's sandbox since); send the call again with the spec"
            )
        return known

    async def _sync_memory(self, session_id: str, limits: SandboxLimits, op: Execute) -> None:
        """Apply the memory contents the call carries; a session with memory mounts whose
        contents this edge does not hold (it restarted) is refused with ``SANDBOX_SPEC_REQUIRED``:
        the control plane sends the spec again, and the contents with it."""
        memory = self._memory
        if not limits.memory_mounts or memory is None:
            return
        if op.memory is not None:
            await asyncio.to_thread(memory.apply, session_id, limits.memory_mounts, op.memory)
        elif not memory.has_baseline(session_id):
            raise SandboxSpecRequired(
                f"this edge holds no memory-store contents for session {session_id}; send the call "
                "again with the spec and the contents"
            )

    async def _sync_content(self, session_id: str, limits: SandboxLimits, op: Execute) -> str:
        """With a spec: make the session's files and skills directories hold its current mounts
        (their blobs were pushed just before). A blob this edge does not hold is the call's
        error, naming the file or skill; "" = fine."""
        content = self._content
        if op.sandbox is None or content is None:
            return ""
        missing = content.missing(limits.blob_mounts)
        if missing:
            names = ", ".join(f"{m.kind} {m.name}" for m in missing)
            return f"the content of {names} did not reach this edge; it is not mounted in the sandbox"
        await asyncio.to_thread(content.apply, session_id, limits.blob_mounts)
        return ""

    async def _mcp_once(self, key: str, request: Request, op: McpCall) -> Outcome:
        """One call to a private MCP server, journaled like a sandbox tool call."""
        if self._mcp is None:
            return Failure(
                ErrorCode.POLICY_DENIED, "this edge fronts no MCP servers (policy rule: mcp.servers)"
            )
        try:
            arguments = json.loads(op.arguments_json) if op.arguments_json else {}
        except json.JSONDecodeError as exc:
            return ToolResult.error(f"MCP tool arguments are not valid JSON: {exc.msg}")
        if not isinstance(arguments, dict):
            return ToolResult.error("MCP tool arguments must be a JSON object")
        existing = await self._journal.start(key, request.session_id)
        if existing is not None:
            if existing.state is JournalState.FINISHED and existing.outcome is not None:
                return decode_outcome(existing.outcome)
            return ToolResult.error(INTERRUPTED_MESSAGE)
        # One deadline: the call's own timeout, cut to the request's deadline.
        bounds = [op.timeout_ms / 1000] if op.timeout_ms else []
        remaining = self._remaining_s(request)
        if remaining is not None:
            bounds.append(remaining)
        timeout_s = max(0.001, min(bounds)) if bounds else None
        outcome: Outcome
        try:
            result = await self._mcp.call(op.server, op.tool, arguments, timeout_s=timeout_s)
        except McpConnectionFailed as exc:
            outcome = Failure(ErrorCode.MCP_CONNECTION_FAILED, str(exc))
        except McpInvalidArguments as exc:
            outcome = ToolResult.error(str(exc))
        except McpError as exc:  # not allowed by the local policy: the message names the rule
            outcome = Failure(exc.code, str(exc))
        else:
            outcome = ToolResult(content=result.content, is_error=result.is_error)
        await self._journal.finish(key, request.session_id, encode_outcome(outcome))
        return outcome

    async def _run_tool(self, call: ToolCall, limits: SandboxLimits) -> Outcome:
        try:
            return await self._manager.execute(call, limits)
        except EdgeError as exc:
            # Policy and capacity refusals, and repositories that could not be cloned, are
            # failures of the request (typed, for the control plane); anything about the sandbox
            # itself is a tool error the model can see and react to.
            if exc.code in _REQUEST_FAILURES or isinstance(exc, RepositoryError):
                return Failure(exc.code, str(exc))
            return ToolResult.error(str(exc))
