"""The MCP hub: the edge's private MCP servers behind one policy-checked ``call``.

::

    async with McpHub(config.mcp_servers, policy.mcp, on_change=readvertise) as hub:
        catalog = hub.catalog()                       # servers, status, allowed tools, digest
        result = await hub.call("wiki", "search", {"query": "vpn"})

Only servers both configured and listed in the policy are started, concurrently; one that fails
is marked down and retried with backoff while the others serve. A call that finds its server
down, loses the connection, or runs past its timeout raises
:class:`~edge_agent.mcp.errors.McpConnectionFailed`, and the hub restarts the stdio child or
reconnects over HTTP in the background, so a later call can succeed.

Logging names the server, the tool, the outcome, the latency and the argument *keys*; never
argument values, header values or environment values.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any

from edge_agent.errors import ConfigError
from edge_agent.mcp._sdk import open_session
from edge_agent.mcp.config import McpPolicy, McpServerConfig
from edge_agent.mcp.errors import (
    McpConnectionFailed,
    McpError,
    McpInvalidArguments,
    McpServerNotAllowed,
)
from edge_agent.mcp.models import McpCallResult, McpCatalog, ServerStatus, ToolOutput
from edge_agent.mcp.server_connection import Opener, ServerConnection

__all__ = ["McpHub"]

log = logging.getLogger(__name__)


class McpHub:
    """Owns one :class:`ServerConnection` per configured and allowed server.

    ``on_change(catalog)`` is called (on the event loop; it must not block) whenever the
    catalog's digest changes after :meth:`start` returned, e.g. a server came up or went down.
    ``opener`` replaces the real SDK connection (tests).
    """

    def __init__(
        self,
        configs: Iterable[McpServerConfig],
        policy: McpPolicy,
        *,
        on_change: Callable[[McpCatalog], None] | None = None,
        opener: Opener | None = None,
    ) -> None:
        self._configs: dict[str, McpServerConfig] = {}
        for config in configs:
            if config.name in self._configs:
                raise ConfigError(f"MCP server name {config.name!r} is configured more than once")
            self._configs[config.name] = config
        self._policy = policy
        self._on_change = on_change
        for name in sorted(set(policy.servers) - set(self._configs)):
            log.warning("MCP policy allows server %s, but no such server is configured", name)
        self._connections = {
            name: ServerConnection(config, opener=opener or open_session, on_change=self._changed)
            for name, config in self._configs.items()
            if name in policy.servers
        }
        self._started = False
        self._closed = False
        self._notified_digest: str | None = None

    async def __aenter__(self) -> McpHub:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def start(self, *, wait_s: float | None = None) -> None:
        """Connect every allowed server concurrently; return once each has come up or failed its
        first attempt (each bounded by its ``startup_timeout_s``), or after ``wait_s`` if given.
        Failures are retried in the background and do not raise. Idempotent."""
        if self._started or self._closed:
            return
        for connection in self._connections.values():
            connection.start()
        waits = [asyncio.ensure_future(c.wait_first_attempt()) for c in self._connections.values()]
        if waits:
            _, pending = await asyncio.wait(waits, timeout=wait_s)
            for waiter in pending:
                waiter.cancel()
        self._started = True
        self._notified_digest = self.catalog().digest
        up = sum(1 for s in self.catalog().servers if s.status is ServerStatus.UP)
        log.info("MCP hub started: %d of %d servers up", up, len(self._connections))

    async def close(self) -> None:
        """Close every session and stop every stdio child. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await asyncio.gather(*(connection.close() for connection in self._connections.values()))
        log.info("MCP hub closed")

    def catalog(self) -> McpCatalog:
        """Every allowed server, its status and the tools the policy allows."""
        entries = []
        for name, connection in self._connections.items():
            rule = self._policy.servers[name]
            entries.append(connection.entry(rule.allows))
        return McpCatalog.build(entries)

    async def call(
        self, server: str, tool: str, arguments: Mapping[str, Any], *, timeout_s: float | None = None
    ) -> McpCallResult:
        """Call ``tool`` on ``server``. A tool that reports failure returns ``is_error=True``.

        Raises :class:`McpServerNotAllowed`, :class:`McpToolNotAllowed`,
        :class:`McpInvalidArguments`, :class:`McpConnectionFailed`.
        """
        started = time.monotonic()
        keys = _keys(arguments)
        try:
            connection = self._check(server, tool, arguments)
            output = await self._call(connection, tool, arguments, timeout_s)
        except McpError as exc:
            _log_call(server, tool, exc.mcp_code.value, started, keys, exc)
            raise
        result = McpCallResult(
            content=output.content, is_error=output.is_error, latency_ms=_ms_since(started)
        )
        _log_call(server, tool, "tool_error" if result.is_error else "ok", started, keys)
        return result

    def _check(self, server: str, tool: str, arguments: Mapping[str, Any]) -> ServerConnection:
        if server not in self._configs:
            raise McpServerNotAllowed("mcp.servers", f"MCP server {server!r} is not configured on this edge")
        self._policy.check_tool(server, tool)
        _check_arguments(arguments)
        connection = self._connections[server]
        if self._closed or not self._started:
            raise McpConnectionFailed("the MCP hub is not running")
        return connection

    async def _call(
        self, connection: ServerConnection, tool: str, arguments: Mapping[str, Any], timeout_s: float | None
    ) -> ToolOutput:
        budget = timeout_s if timeout_s is not None else connection.config.call_timeout_s
        deadline = time.monotonic() + budget
        session, generation = await connection.acquire(budget)
        remaining = max(deadline - time.monotonic(), 0.001)
        try:
            output: ToolOutput = await session.call_tool(tool, arguments, remaining)
        except McpConnectionFailed as exc:
            action = "restarting it" if connection.config.stdio is not None else "reconnecting"
            connection.request_restart(generation, exc.message)
            raise McpConnectionFailed(f"MCP server {connection.name!r}: {exc.message}; {action}") from None
        return output

    def _changed(self) -> None:
        if not self._started or self._closed or self._on_change is None:
            return
        catalog = self.catalog()
        if catalog.digest == self._notified_digest:
            return
        self._notified_digest = catalog.digest
        try:
            self._on_change(catalog)
        except Exception:
            log.exception("MCP hub: the on_change callback failed")


def _check_arguments(arguments: Mapping[str, Any]) -> None:
    if not isinstance(arguments, Mapping) or not all(isinstance(key, str) for key in arguments):
        raise McpInvalidArguments("tool arguments must be a JSON object")
    try:
        json.dumps(arguments, allow_nan=False)
    except (TypeError, ValueError):
        raise McpInvalidArguments("tool arguments must be JSON-serialisable") from None


def _keys(arguments: object) -> list[str]:
    if not isinstance(arguments, Mapping):
        return []
    return sorted(str(key) for key in arguments)[:32]


def _ms_since(started: float) -> float:
    return round((time.monotonic() - started) * 1000.0, 3)


def _log_call(
    server: str, tool: str, outcome: str, started: float, keys: list[str], exc: McpError | None = None
) -> None:
    # Argument values are never logged: they may carry secrets. Only connection failures carry
    # their message (ours, scrubbed in _sdk); a server's "invalid params" text may echo arguments.
    level = logging.INFO if exc is None else logging.WARNING
    log.log(
        level,
        "MCP call server=%s tool=%s outcome=%s latency_ms=%.1f arg_keys=%s%s",
        server,
        tool,
        outcome,
        _ms_since(started),
        keys,
        f" error={exc.message}" if isinstance(exc, McpConnectionFailed) else "",
    )
