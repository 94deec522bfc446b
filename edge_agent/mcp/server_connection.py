"""One MCP server's connection: a supervisor task that connects, watches and restarts it.

The supervisor owns the session (the SDK's task groups are entered and left in that one task);
callers borrow the live session through :meth:`ServerConnection.acquire`, and many calls
multiplex over it. When the connection ends -- the child exited, the HTTP transport failed, or a
caller reported a hung or lost call through :meth:`ServerConnection.request_restart` -- the
supervisor closes it (the stdio child is stopped and reaped by the SDK), waits a full-jitter
backoff and connects again. The backoff is reset once a connection has stayed up for
``_STABLE_AFTER_S``.

State machine (transitions in ``_TRANSITIONS``; anything else is a bug and raises)::

    IDLE ─► CONNECTING ─► UP ─► BACKING_OFF ─► CONNECTING ...
                 └───────────────► BACKING_OFF                 (start failed or timed out)
    any ─► CLOSED                                              (close)
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import anyio

from edge_agent.connection.backoff import Backoff
from edge_agent.mcp.config import McpServerConfig
from edge_agent.mcp.errors import McpConnectionFailed
from edge_agent.mcp.models import McpServerEntry, McpTool, ServerStatus, ToolOutput

__all__ = ["Opener", "ServerConnection", "ServerState", "Session"]

log = logging.getLogger(__name__)

_STABLE_AFTER_S = 10.0


class Session(Protocol):
    """What a connection needs from a live MCP session (real: :class:`~edge_agent.mcp._sdk.SdkSession`)."""

    async def list_tools(self) -> tuple[McpTool, ...]: ...

    async def call_tool(self, tool: str, arguments: Mapping[str, Any], timeout_s: float) -> ToolOutput:
        """Raises McpConnectionFailed (lost, or no answer in time) or McpInvalidArguments."""
        ...


Opener = Callable[[McpServerConfig, Callable[[str], None]], AbstractAsyncContextManager[Session]]
"""``opener(config, on_lost)``: connect, yield a session; call ``on_lost(reason)`` if it ends."""


class ServerState(enum.Enum):
    IDLE = "idle"
    CONNECTING = "connecting"
    UP = "up"
    BACKING_OFF = "backing_off"
    CLOSED = "closed"


_S = ServerState
_TRANSITIONS: dict[ServerState, frozenset[ServerState]] = {
    _S.IDLE: frozenset({_S.CONNECTING, _S.CLOSED}),
    _S.CONNECTING: frozenset({_S.UP, _S.BACKING_OFF, _S.CLOSED}),
    _S.UP: frozenset({_S.BACKING_OFF, _S.CLOSED}),
    _S.BACKING_OFF: frozenset({_S.CONNECTING, _S.CLOSED}),
    _S.CLOSED: frozenset(),
}


class IllegalTransition(RuntimeError):
    """A state change the table does not allow: a bug in this module."""


class ServerConnection:
    """Supervises one configured, allowed MCP server."""

    def __init__(self, config: McpServerConfig, *, opener: Opener, on_change: Callable[[], None]) -> None:
        self.config = config
        self._opener = opener
        self._on_change = on_change
        self._backoff = Backoff(config.restart_backoff_initial_s, config.restart_backoff_max_s)
        self._state = ServerState.IDLE
        self._session: Session | None = None
        self._tools: tuple[McpTool, ...] = ()
        self._last_error: str | None = None
        self._generation = 0
        self._trouble = asyncio.Event()
        self._trouble_reason = ""
        self._settled = asyncio.Event()  # set whenever an attempt to connect has concluded
        self._first_settled = asyncio.Event()
        self._life: anyio.CancelScope | None = None  # created in the supervisor task
        self._closing = False
        self._task: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def state(self) -> ServerState:
        return self._state

    def start(self) -> None:
        """Start the supervisor task (once)."""
        if self._task is None and self._state is ServerState.IDLE:
            self._task = asyncio.create_task(self._run(), name=f"mcp-server-{self.name}")

    async def wait_first_attempt(self) -> None:
        """Return once the first attempt to connect has succeeded or failed."""
        await self._first_settled.wait()

    def entry(self, allowed: Callable[[str], bool]) -> McpServerEntry:
        """This server in the catalog, with only the tools ``allowed`` accepts."""
        if self._state is ServerState.UP and not self._trouble.is_set():
            status, error = ServerStatus.UP, None
        elif self._state is ServerState.UP:  # ending: the supervisor is about to close it
            status, error = ServerStatus.DOWN, self._trouble_reason
        else:
            status, error = ServerStatus.DOWN, self._last_error or self._state.value
        tools = tuple(tool for tool in self._tools if allowed(tool.name))
        return McpServerEntry(name=self.name, status=status, tools=tools, last_error=error)

    async def acquire(self, timeout_s: float) -> tuple[Session, int]:
        """The live session and its generation; waits (up to ``timeout_s``) for a connect that is
        in progress. Raises :class:`McpConnectionFailed` when the server is down."""
        if self._state in (ServerState.IDLE, ServerState.CONNECTING):
            with anyio.move_on_after(timeout_s):
                await self._settled.wait()
        session = self._session
        if self._state is ServerState.UP and session is not None and not self._trouble.is_set():
            return session, self._generation
        raise McpConnectionFailed(self.down_message())

    def down_message(self) -> str:
        if self._state is ServerState.CLOSED:
            return f"MCP server {self.name!r} is closed"
        if self._state in (ServerState.IDLE, ServerState.CONNECTING):
            return f"MCP server {self.name!r} is still starting"
        reason = self._trouble_reason if self._state is ServerState.UP else self._last_error
        return f"MCP server {self.name!r} is down ({reason or 'not connected'}); retrying in the background"

    def request_restart(self, generation: int, reason: str) -> None:
        """Restart the connection of ``generation`` (a later generation is left alone)."""
        if generation == self._generation and not self._trouble.is_set():
            self._trouble_reason = reason
            self._trouble.set()
            if self._state is ServerState.UP:
                self._on_change()

    async def close(self) -> None:
        """Stop the supervisor; the session is closed and a stdio child stopped. Idempotent."""
        self._closing = True
        if self._life is not None:
            self._life.cancel()
        task, self._task = self._task, None
        if task is not None:
            (outcome,) = await asyncio.gather(task, return_exceptions=True)
            if isinstance(outcome, BaseException) and not isinstance(outcome, asyncio.CancelledError):
                log.error("MCP server %s: the supervisor failed", self.name, exc_info=outcome)
        if self._state is not ServerState.CLOSED:
            self._set(ServerState.CLOSED)

    # -- supervisor --------------------------------------------------------------------------

    async def _run(self) -> None:
        with anyio.CancelScope() as self._life:
            if self._closing:
                self._life.cancel()
            while True:
                up_for = await self._connect_once()
                if up_for >= _STABLE_AFTER_S:
                    self._backoff.reset()
                delay = self._backoff.next_delay()
                log.warning(
                    "MCP server %s is down: %s; reconnecting in %.1fs", self.name, self._last_error, delay
                )
                self._on_change()
                await anyio.sleep(delay)
        self._set(ServerState.CLOSED)
        self._settled.set()
        self._first_settled.set()

    async def _connect_once(self) -> float:
        """One connection, from connect to its end; returns how long it was up (0 if never)."""
        self._set(ServerState.CONNECTING)
        self._generation += 1
        generation = self._generation
        self._trouble = asyncio.Event()
        self._trouble_reason = ""
        up_at: float | None = None
        timeout = self.config.startup_timeout_s
        reason = ""
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + timeout) as startup:
                async with self._opener(
                    self.config, lambda why: self.request_restart(generation, why)
                ) as session:
                    tools = await session.list_tools()
                    startup.deadline = math.inf
                    self._session, self._tools, self._last_error = session, tools, None
                    up_at = time.monotonic()
                    self._set(ServerState.UP)
                    log.info(
                        "MCP server %s is up (%s, %d tools)", self.name, self.config.transport, len(tools)
                    )
                    self._on_change()
                    await self._serve(session)
                    reason = self._trouble_reason
                    self._session = None
                    log.info("MCP server %s: closing the connection (%s)", self.name, reason)
            if startup.cancelled_caught:
                reason = f"did not start within {timeout:g}s (startup_timeout_s)"
        except McpConnectionFailed as exc:
            reason = exc.message
        except Exception as exc:  # an opener bug must not kill the supervisor
            log.exception("MCP server %s: unexpected failure", self.name)
            reason = f"{type(exc).__name__}: {exc}"
        finally:
            self._session = None
        self._last_error = reason or "the connection ended"
        self._set(ServerState.BACKING_OFF)
        return 0.0 if up_at is None else time.monotonic() - up_at

    async def _serve(self, session: Session) -> None:
        """While up: wait for trouble, re-listing the tools every ``refresh_interval_s``."""
        while not self._trouble.is_set():
            with anyio.move_on_after(self.config.refresh_interval_s):
                await self._trouble.wait()
            if self._trouble.is_set():
                return
            try:
                with anyio.fail_after(self.config.call_timeout_s):
                    tools = await session.list_tools()
            except (McpConnectionFailed, TimeoutError) as exc:
                why = exc.message if isinstance(exc, McpConnectionFailed) else "listing the tools timed out"
                self.request_restart(self._generation, why)
                return
            if tools != self._tools:
                log.info("MCP server %s: the tool list changed (%d tools)", self.name, len(tools))
                self._tools = tools
                self._on_change()

    def _set(self, state: ServerState) -> None:
        if state not in _TRANSITIONS[self._state]:
            raise IllegalTransition(f"MCP server {self.name}: {self._state.value} -> {state.value}")
        previous, self._state = self._state, state
        if state is ServerState.CONNECTING:
            self._settled = asyncio.Event()
        elif previous is ServerState.CONNECTING:
            self._settled.set()
            self._first_settled.set()
