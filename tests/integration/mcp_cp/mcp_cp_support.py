"""Shared pieces of the control-plane MCP tests: a fake edge gateway that fronts MCP servers and
dedupes calls by idempotency key like the edge's journal, sessions on a real store, and waiting
on conditions with a deadline."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from control_plane.errors import EdgeUnavailable, GatewayDraining
from control_plane.store.base import Store
from outpost_wire.errors import ErrorCode, RemoteError
from outpost_wire.results import ToolResult
from tests.support.harness import (
    idle_count,
    send,
    send_message,
    types,
    utcnow,
    wait_for_events,
)

__all__ = [
    "ENV",
    "FakeMcpGateway",
    "create_session",
    "idle_count",
    "send",
    "send_message",
    "types",
    "utcnow",
    "wait_for_events",
]


ENV = "env_mcp"

ToolFn = Callable[[Mapping[str, Any]], Awaitable[ToolResult]]


class FakeMcpGateway:
    """The hands as the harness and the MCP router see them. ``servers``: name → {tool → fn};
    a server in ``down`` is listed as down and its calls fail like the edge's
    (``MCP_CONNECTION_FAILED``); ``deny`` maps a tool to the policy rule that refuses it. A
    repeated idempotency key gets the first call's result, so ``runs`` counts real executions."""

    def __init__(self, servers: Mapping[str, Mapping[str, ToolFn]]) -> None:
        self.servers = {name: dict(tools) for name, tools in servers.items()}
        self.down: set[str] = set()
        self.deny: dict[str, str] = {}
        self.draining = False  # as a control plane shutting down: calls refused, retryable
        self.refused: Counter[str] = Counter()  # calls refused while draining, by key
        self.runs: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()
        self.gate = asyncio.Event()
        self.gate.set()
        self.in_flight = asyncio.Event()
        self._results: dict[str, asyncio.Future[ToolResult]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # -- ToolGateway (the sandbox is not used here) ----------------------------------------------
    async def provision(self, session_id: str, environment_id: str) -> object:
        return {"session_id": session_id}

    async def execute(
        self,
        session_id: str,
        environment_id: str,
        tool: str,
        tool_input: Mapping[str, Any],
        *,
        idempotency_key: str,
        timeout_s: float | None = None,
    ) -> ToolResult:
        return ToolResult.error("no sandbox in this test")

    async def destroy(self, session_id: str, environment_id: str) -> bool:
        return False

    def take_move(self, session_id: str) -> None:
        return None

    def forget_session(self, session_id: str) -> None:
        pass

    def edges_connected(self, environment_id: str) -> int:
        return 1  # the fake's hands are always there

    edge_wait_s = 30.0

    # -- MCP ----------------------------------------------------------------------------------------
    def mcp_catalog(self, environment_id: str) -> dict[str, dict[str, Any]]:
        if environment_id != ENV:
            return {}
        return {
            name: {
                "status": "down" if name in self.down else "up",
                "tools": []
                if name in self.down
                else [
                    {"name": tool, "description": f"The {tool} tool.", "input_schema": {"type": "object"}}
                    for tool in tools
                ],
                "edges": ["edge_1"],
            }
            for name, tools in self.servers.items()
        }

    async def mcp_call(
        self,
        session_id: str,
        environment_id: str,
        server: str,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        idempotency_key: str,
        timeout_s: float | None = None,
    ) -> ToolResult:
        self.calls[idempotency_key] += 1
        if self.draining:
            self.refused[idempotency_key] += 1
            raise GatewayDraining("this control plane is shutting down; the call goes to another one")
        if server not in self.servers:
            raise EdgeUnavailable(f"no connected edge fronts MCP server {server!r}")
        if tool in self.deny:
            raise RemoteError(ErrorCode.POLICY_DENIED, self.deny[tool])
        if server in self.down:
            raise RemoteError(ErrorCode.MCP_CONNECTION_FAILED, f"MCP server {server!r} is down")
        future = self._results.get(idempotency_key)
        if future is None:
            future = self._results[idempotency_key] = asyncio.get_running_loop().create_future()
            fn = self.servers[server][tool]
            task = asyncio.create_task(self._run(idempotency_key, fn, dict(arguments), future))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await asyncio.shield(future)

    async def _run(
        self, key: str, fn: ToolFn, arguments: dict[str, Any], future: asyncio.Future[ToolResult]
    ) -> None:
        self.in_flight.set()
        await self.gate.wait()  # the edge keeps running the call even if the caller went away
        self.runs[key] += 1
        future.set_result(await fn(arguments))


async def create_session(store: Store, agent: Mapping[str, Any]) -> str:
    session_id = "sesn_" + uuid.uuid4().hex[:12]
    body = {
        "status": "idle",
        "agent": dict(agent),
        "environment_id": ENV,
        "usage": {},
        "stats": {},
        "metadata": {},
        "title": None,
    }
    await store.create_resource("session", session_id, body, utcnow())
    return session_id
