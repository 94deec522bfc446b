"""Shared pieces of the harness integration tests: a fake gateway that dedupes like the edge,
session setup on a real store, and waiting on conditions with a deadline."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import TypeAdapter

from control_plane.agents.configuration import ToolParams, resolve_model, resolve_tools
from control_plane.harness import HarnessConfig
from control_plane.harness import event_drafts as ev
from control_plane.store.base import Event, NewEvent, Store
from outpost_wire.results import ToolResult
from tests.support import eventually

# Short scans and retries, so that tests do not wait on the defaults (seconds); the defaults are
# run by the end-to-end tests on shipped configuration.
FAST = HarnessConfig(
    lease_ttl_s=3.0,
    lease_scan_interval_s=0.2,
    lease_busy_retry_s=0.05,
    model_backoff_initial_s=0.05,
    model_backoff_max_s=0.2,
    max_tokens=512,
)

ENV = "env_test"

_TOOLS: list[dict[str, Any]] = [
    {"type": "agent_toolset_20260401", "default_config": {"enabled": True}},
    {
        "type": "custom",
        "name": "lookup_ticket",
        "description": "Look a ticket up.",
        "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}},
    },
]
# Resolved the way the API stores a session's agent snapshot.
AGENT: dict[str, Any] = {
    "type": "agent",
    "id": "agent_1",
    "version": 1,
    "name": "coder",
    "model": resolve_model("claude-local-test"),
    "system": "You are a careful engineer.",
    "tools": resolve_tools(TypeAdapter(list[ToolParams]).validate_python(_TOOLS), []),
    "mcp_servers": [],
    "skills": [],
}


def utcnow() -> datetime:
    return datetime.now(UTC)


class FakeGateway:
    """Implements ``execute`` / ``provision`` / ``destroy`` like the edge as far as the harness can
    tell: a repeated idempotency key gets the first call's result (awaiting it if still running),
    so ``runs`` counts real executions per key. ``gate`` holds executions until set."""

    def __init__(self, *, provision_delay_s: float = 0.0) -> None:
        self.runs: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()
        self.provisions: list[tuple[float, float]] = []  # (start, end) monotonic
        self.destroyed: list[str] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.in_flight = asyncio.Event()
        self._results: dict[str, asyncio.Future[ToolResult]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._provision_delay_s = provision_delay_s
        self.moves: list[Any] = []  # SandboxMove-like objects take_move hands out, oldest first
        self.forgotten: list[str] = []

    async def provision(self, session_id: str, environment_id: str) -> object:
        start = time.monotonic()
        await asyncio.sleep(self._provision_delay_s)
        self.provisions.append((start, time.monotonic()))
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
        self.calls[idempotency_key] += 1
        future = self._results.get(idempotency_key)
        if future is None:
            future = self._results[idempotency_key] = asyncio.get_running_loop().create_future()
            task = asyncio.create_task(self._run(idempotency_key, tool, dict(tool_input), future))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await asyncio.shield(future)

    async def _run(
        self, key: str, tool: str, tool_input: dict[str, Any], future: asyncio.Future[ToolResult]
    ) -> None:
        self.in_flight.set()
        await self.gate.wait()  # the sandbox keeps running even if the caller went away
        self.runs[key] += 1
        future.set_result(ToolResult.text(f"{tool} ran: {tool_input.get('command', tool_input)}"))

    async def destroy(self, session_id: str, environment_id: str) -> bool:
        self.destroyed.append(session_id)
        return True

    def take_move(self, session_id: str) -> Any:
        return self.moves.pop(0) if self.moves else None

    def forget_session(self, session_id: str) -> None:
        self.forgotten.append(session_id)

    def edges_connected(self, environment_id: str) -> int:
        return 1  # the fake's hands are always there

    edge_wait_s = 30.0


async def create_session(store: Store, agent: Mapping[str, Any] = AGENT) -> str:
    session_id = "sesn_" + uuid.uuid4().hex[:12]
    body = {
        "status": "idle",
        "agent": dict(agent),
        "environment_id": ENV,
        "usage": {
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0,
        },
        "stats": {},
        "metadata": {},
        "title": None,
    }
    await store.create_resource("session", session_id, body, utcnow())
    return session_id


async def send(store: Store, session_id: str, type: str, payload: Mapping[str, Any]) -> str:
    """Append user input as the API does (unfenced) and return its id."""
    event_id = "sevt_" + uuid.uuid4().hex
    await store.append(session_id, [NewEvent(event_id, type, dict(payload))], utcnow())
    return event_id


async def send_message(store: Store, session_id: str, text: str) -> str:
    return await send(store, session_id, ev.USER_MESSAGE, {"content": [{"type": "text", "text": text}]})


async def wait_for_events(
    store: Store, session_id: str, predicate: Callable[[list[Event]], bool], timeout_s: float = 10.0
) -> list[Event]:
    found: list[Event] = []

    async def check() -> bool:
        nonlocal found
        found = await store.get_events(session_id)
        return predicate(found)

    await eventually(check, timeout_s, "events")
    return found


def idle_count(events: list[Event], stop: str = "end_turn") -> int:
    return sum(
        1
        for e in events
        if e.type == ev.SESSION_STATUS_IDLE and e.payload.get("stop_reason", {}).get("type") == stop
    )


def types(events: list[Event]) -> list[str]:
    return [e.type for e in events]


async def settle(harness: Any, session_id: str, timeout_s: float = 10.0) -> None:
    """Wait until the harness has no task for the session (its resource updates are done)."""

    async def inactive() -> bool:
        return session_id not in harness.active_sessions()

    await eventually(inactive, timeout_s, f"session {session_id} to settle")
