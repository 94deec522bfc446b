"""MCP tools through a whole harness turn: real SQLite store, the local model server (real
``anthropic`` SDK path), the real ``McpRouter`` over a fake edge gateway (``edge://`` servers) and a
real Streamable-HTTP MCP server (a direct server with a bearer credential)."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from mcp_cp_server import BearerMcpServer
from mcp_cp_support import (
    FakeMcpGateway,
    create_session,
    idle_count,
    send,
    send_message,
    types,
    wait_for_events,
)
from pydantic import TypeAdapter

from control_plane.agents.configuration import (
    McpServerParams,
    ToolParams,
    resolve_mcp_servers,
    resolve_model,
    resolve_tools,
)
from control_plane.bus import EventBus
from control_plane.harness import AnthropicModelClient, Harness, HarnessConfig
from control_plane.harness import event_drafts as ev
from control_plane.mcp import McpConfig, McpRouter
from control_plane.outbound import OutboundGuard
from control_plane.store import SqliteStore
from control_plane.store.base import Event
from outpost_wire.results import ToolResult
from scripted_model import LocalModelServer, Turn
from scripted_model.responders import (
    last_prompt_text,
    offered_tool_names,
    tool_result_text,
    tool_results_since_prompt,
)
from tests.support import eventually

TOKEN = "harness-bearer-9d1e0b"
FAST = HarnessConfig(
    lease_ttl_s=1.0,
    lease_scan_interval_s=0.1,
    lease_busy_retry_s=0.05,
    model_backoff_initial_s=0.05,
    model_backoff_max_s=0.2,
    max_tokens=512,
    mcp_tool_timeout_s=5.0,
)


def closed_port_url() -> str:
    """A loopback URL nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/mcp"


def agent_json(calc_url: str, broken_url: str) -> dict[str, Any]:
    servers = [
        {"type": "url", "name": "tickets", "url": "https://placeholder.test/mcp"},  # edge://tickets below
        {"type": "url", "name": "calc", "url": calc_url},
        {"type": "url", "name": "broken", "url": broken_url},
    ]
    given = TypeAdapter(list[McpServerParams]).validate_python(servers)
    resolved = resolve_mcp_servers(given, OutboundGuard(["127.0.0.0/8"]))  # a loopback test server
    tools = [
        {
            "type": "mcp_toolset",
            "mcp_server_name": "tickets",
            "default_config": {"permission_policy": {"type": "always_allow"}},
            "configs": [{"name": "close_ticket", "permission_policy": {"type": "always_ask"}}],
        },
        {
            "type": "mcp_toolset",
            "mcp_server_name": "calc",
            "default_config": {"permission_policy": {"type": "always_allow"}},
            "configs": [{"name": "boom", "enabled": False}],
        },
        {"type": "mcp_toolset", "mcp_server_name": "broken"},
    ]
    resolved_tools = resolve_tools(TypeAdapter(list[ToolParams]).validate_python(tools), resolved)
    resolved[0]["url"] = "edge://tickets"  # the API's URL validation predates edge:// servers
    return {
        "type": "agent",
        "id": "agent_mcp",
        "version": 1,
        "name": "support",
        "model": resolve_model("claude-local-test"),
        "system": "You help with tickets.",
        "tools": resolved_tools,
        "mcp_servers": resolved,
        "skills": [],
    }


async def lookup(arguments: Mapping[str, Any]) -> ToolResult:
    return ToolResult.text(f"ticket {arguments.get('id')}: open, assigned to Ana")


async def close(arguments: Mapping[str, Any]) -> ToolResult:
    return ToolResult.text(f"ticket {arguments.get('id')} closed")


class Responder:
    """Calls the namespaced MCP tool the prompt names (``<tool> <json args>``), then reports the
    tool result in text. Records the tool names each request offered."""

    def __init__(self) -> None:
        self.offered: list[frozenset[str]] = []

    def __call__(self, request: Mapping[str, Any]) -> Turn:
        self.offered.append(offered_tool_names(request))
        results = tool_results_since_prompt(request)
        if results:
            flag = " (error)" if results[-1].get("is_error") else ""
            return Turn.text(f"Result{flag}: {tool_result_text(results[-1])}")
        name, _, args = (last_prompt_text(request) or "").partition(" ")
        return Turn.tool_use(name, json.loads(args or "{}"))


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    opened = SqliteStore(tmp_path / "outpost.db")
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def calc() -> AsyncIterator[BearerMcpServer]:
    async with BearerMcpServer(TOKEN) as server:
        yield server


async def bearer(session_id: str, url: str) -> Mapping[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"} if url.startswith("http://127.0.0.1") else {}


class Rig:
    """A harness with its model server, gateway and router (started by :meth:`start`)."""

    def __init__(self, store: SqliteStore, gateway: FakeMcpGateway, model_server: LocalModelServer) -> None:
        self.store = store
        self.gateway = gateway
        self.model_server = model_server
        self.router = McpRouter(
            gateway,
            credentials=bearer,
            # 3 s (defaults are longer): a server these tests make unreachable fails fast; the
            # defaults are what the e2e MCP session test runs on.
            config=McpConfig(connect_timeout_s=3.0, list_timeout_s=3.0),
            # The test MCP server listens on loopback: allowed as outbound_allow_networks would.
            outbound=OutboundGuard(["127.0.0.0/8"]),
        )
        self.model = AnthropicModelClient(base_url=model_server.base_url, api_key="test-key")
        self.harness = Harness(store, gateway, EventBus(), self.model, FAST, mcp=self.router)

    async def start(self) -> Rig:
        await self.harness.start()
        return self

    async def close(self) -> None:
        await self.harness.close()
        await self.model.close()
        await self.router.close()


def only(events: list[Event], type: str) -> list[Event]:
    return [e for e in events if e.type == type]


async def turn(rig: Rig, session_id: str, prompt: str, ended: int) -> list[Event]:
    await send_message(rig.store, session_id, prompt)
    await rig.harness.wake(session_id)
    return await wait_for_events(rig.store, session_id, lambda es: idle_count(es) == ended)


async def test_edge_and_direct_mcp_tools_in_full_turns(store: SqliteStore, calc: BearerMcpServer) -> None:
    gateway = FakeMcpGateway({"tickets": {"lookup_ticket": lookup, "close_ticket": close}})
    responder = Responder()
    async with LocalModelServer(responder) as model_server:
        rig = await Rig(store, gateway, model_server).start()
        try:
            session_id = await create_session(store, agent_json(calc.url, closed_port_url()))
            events = await turn(rig, session_id, 'mcp__tickets__lookup_ticket {"id": "7"}', 1)
            events = await turn(rig, session_id, 'mcp__calc__add {"a": 2, "b": 40}', 2)
        finally:
            await rig.close()
        requests = model_server.requests

    first_turn = events[: events.index(only(events, ev.SESSION_STATUS_IDLE)[0]) + 1]
    assert types(first_turn) == [
        ev.USER_MESSAGE,
        ev.SESSION_STATUS_RUNNING,
        ev.SESSION_ERROR,  # the unreachable server, once per turn, non-fatal
        ev.SPAN_MODEL_REQUEST_START,
        ev.AGENT_MCP_TOOL_USE,
        ev.SPAN_MODEL_REQUEST_END,
        ev.SESSION_USAGE,
        ev.AGENT_MCP_TOOL_RESULT,
        ev.SPAN_MODEL_REQUEST_START,
        ev.AGENT_MESSAGE,
        ev.SPAN_MODEL_REQUEST_END,
        ev.SESSION_USAGE,
        ev.SESSION_STATUS_IDLE,
    ]
    errors = only(events, ev.SESSION_ERROR)
    assert len(errors) == 2  # one per turn
    error = errors[0].payload["error"]
    assert error["type"] == "mcp_connection_failed_error" and error["mcp_server_name"] == "broken"
    assert error["retry_status"] == {"type": "retrying"} and "cannot connect" in error["message"]

    uses, results = only(events, ev.AGENT_MCP_TOOL_USE), only(events, ev.AGENT_MCP_TOOL_RESULT)
    assert uses[0].payload == {
        "mcp_server_name": "tickets",
        "name": "lookup_ticket",
        "input": {"id": "7"},
        "evaluated_permission": "allow",
        "evaluation": {"type": "always_allow"},
    }
    edge_result = results[0].payload
    assert edge_result["mcp_tool_use_id"] == uses[0].id
    assert edge_result["content"] == [{"type": "text", "text": "ticket 7: open, assigned to Ana"}]
    assert edge_result["is_error"] is False and edge_result["outcome"] == "ok"
    assert edge_result["mcp_server_name"] == "tickets" and edge_result["tool"] == "lookup_ticket"
    assert isinstance(edge_result["latency_ms"], float) and edge_result["latency_ms"] >= 0
    assert gateway.runs == {uses[0].id: 1}

    assert uses[1].payload["mcp_server_name"] == "calc" and uses[1].payload["name"] == "add"
    direct_result = results[1].payload
    assert direct_result["content"] == [{"type": "text", "text": "42"}] and direct_result["outcome"] == "ok"
    assert calc.calls["add"] == 1
    assert only(events, ev.AGENT_MESSAGE)[-1].payload["content"] == [{"type": "text", "text": "Result: 42"}]

    # The model saw the MCP tools of the reachable servers only, namespaced, in a stable order.
    assert all(not any(n.startswith("mcp__broken__") for n in names) for names in responder.offered)
    assert responder.offered[0] == {
        "mcp__tickets__close_ticket",
        "mcp__tickets__lookup_ticket",
        "mcp__calc__add",
        "mcp__calc__echo",
        "mcp__calc__report",
        "mcp__calc__sleep",
    }
    tool_list = [t["name"] for t in requests[0].body["tools"]]
    assert tool_list == [
        "mcp__tickets__close_ticket",
        "mcp__tickets__lookup_ticket",
        "mcp__calc__add",
        "mcp__calc__echo",
        "mcp__calc__report",
        "mcp__calc__sleep",
    ]
    # The tool result goes back under the model's own tool_use id.
    block = only(events, ev.SPAN_MODEL_REQUEST_END)[0].payload["assistant_message"]["content"][0]
    assert block["name"] == "mcp__tickets__lookup_ticket"
    assert requests[1].body["messages"][-1]["content"][0]["tool_use_id"] == block["id"]
    # No credential anywhere in the log.
    assert TOKEN not in str([e.payload for e in events])


async def test_always_ask_waits_for_confirmation(store: SqliteStore, calc: BearerMcpServer) -> None:
    gateway = FakeMcpGateway({"tickets": {"lookup_ticket": lookup, "close_ticket": close}})
    async with LocalModelServer(Responder()) as model_server:
        rig = await Rig(store, gateway, model_server).start()
        try:
            session_id = await create_session(store, agent_json(calc.url, closed_port_url()))
            events = await turn(rig, session_id, 'mcp__tickets__close_ticket {"id": "7"}', 0)
            events = await wait_for_events(
                store, session_id, lambda es: idle_count(es, "requires_action") == 1
            )
            (use,) = only(events, ev.AGENT_MCP_TOOL_USE)
            assert use.payload["evaluated_permission"] == "ask"
            assert only(events, ev.SESSION_STATUS_IDLE)[0].payload["stop_reason"]["event_ids"] == [use.id]
            assert gateway.calls == {}

            await send(
                store, session_id, ev.USER_TOOL_CONFIRMATION, {"tool_use_id": use.id, "result": "allow"}
            )
            await rig.harness.wake(session_id)
            events = await wait_for_events(store, session_id, lambda es: idle_count(es) == 1)
        finally:
            await rig.close()
    (result,) = only(events, ev.AGENT_MCP_TOOL_RESULT)
    assert result.payload["content"] == [{"type": "text", "text": "ticket 7 closed"}]
    assert gateway.runs == {use.id: 1}


async def test_a_server_that_fails_the_call_gives_a_typed_error_and_the_session_goes_on(
    store: SqliteStore, calc: BearerMcpServer
) -> None:
    gateway = FakeMcpGateway({"tickets": {"lookup_ticket": lookup, "close_ticket": close}})
    responder = Responder()

    def flaky(request: Mapping[str, Any]) -> Turn:
        turn = responder(request)
        gateway.down.add("tickets")  # listed as up, down by the time it is called
        return turn

    async with LocalModelServer(flaky) as model_server:
        rig = await Rig(store, gateway, model_server).start()
        try:
            session_id = await create_session(store, agent_json(calc.url, closed_port_url()))
            events = await turn(rig, session_id, 'mcp__tickets__lookup_ticket {"id": "7"}', 1)
        finally:
            await rig.close()
    (result,) = only(events, ev.AGENT_MCP_TOOL_RESULT)
    assert result.payload["is_error"] is True
    assert result.payload["outcome"] == "mcp_connection_failed_error"
    assert "is down" in result.payload["content"][0]["text"]
    assert only(events, ev.AGENT_MESSAGE)[-1].payload["content"][0]["text"].startswith("Result (error):")
    assert types(events)[-1] == ev.SESSION_STATUS_IDLE


async def test_resume_redispatches_the_unanswered_call_with_the_same_key(
    store: SqliteStore, calc: BearerMcpServer
) -> None:
    gateway = FakeMcpGateway({"tickets": {"lookup_ticket": lookup, "close_ticket": close}})
    gateway.gate.clear()  # the edge holds the call
    async with LocalModelServer(Responder()) as model_server:
        first = await Rig(store, gateway, model_server).start()
        second: Rig | None = None
        try:
            session_id = await create_session(store, agent_json(calc.url, closed_port_url()))
            await send_message(store, session_id, 'mcp__tickets__lookup_ticket {"id": "7"}')
            await first.harness.wake(session_id)

            async def in_flight() -> bool:
                return gateway.in_flight.is_set()

            await eventually(in_flight, what="the MCP call to reach the edge")
            await first.harness.abort()  # the harness dies mid-call; the edge finishes the call
            gateway.gate.set()
            second = await Rig(store, gateway, model_server).start()  # resumes once the lease expires
            events = await wait_for_events(store, session_id, lambda es: idle_count(es) == 1)
        finally:
            await first.close()
            if second is not None:
                await second.close()
    (use,) = only(events, ev.AGENT_MCP_TOOL_USE)
    (result,) = only(events, ev.AGENT_MCP_TOOL_RESULT)
    assert result.payload["mcp_tool_use_id"] == use.id and result.payload["outcome"] == "ok"
    assert gateway.calls[use.id] == 2  # dispatched again with the same key ...
    assert gateway.runs == {use.id: 1}  # ... and run once


async def test_a_draining_control_plane_leaves_the_mcp_call_to_the_next_one(
    store: SqliteStore, calc: BearerMcpServer
) -> None:
    """A control plane shutting down refuses calls to edges: the harness stops without recording a
    result (it is not the tool's failure), and the harness that takes the session next makes the
    call with the same idempotency key."""
    gateway = FakeMcpGateway({"tickets": {"lookup_ticket": lookup, "close_ticket": close}})
    gateway.draining = True
    async with LocalModelServer(Responder()) as model_server:
        first = await Rig(store, gateway, model_server).start()
        second: Rig | None = None
        try:
            session_id = await create_session(store, agent_json(calc.url, closed_port_url()))
            await send_message(store, session_id, 'mcp__tickets__lookup_ticket {"id": "7"}')
            await first.harness.wake(session_id)

            async def refused_and_stopped() -> bool:
                return sum(gateway.calls.values()) >= 1 and session_id not in first.harness.active_sessions()

            await eventually(refused_and_stopped, what="the refused call and a quiet stop")
            await first.close()  # as ControlPlane.close does after draining the gateway
            events = await store.get_events(session_id)
            assert only(events, ev.AGENT_MCP_TOOL_USE) and not only(events, ev.AGENT_MCP_TOOL_RESULT)
            # The only error is the unreachable "broken" server's, reported when tools were listed.
            assert [e.payload["error"]["mcp_server_name"] for e in only(events, ev.SESSION_ERROR)] == [
                "broken"
            ]
            assert await store.get_lease(session_id) is None  # released for the next process
            gateway.draining = False
            second = await Rig(store, gateway, model_server).start()
            events = await wait_for_events(store, session_id, lambda es: idle_count(es) == 1)
        finally:
            await first.close()
            if second is not None:
                await second.close()
    (use,) = only(events, ev.AGENT_MCP_TOOL_USE)
    (result,) = only(events, ev.AGENT_MCP_TOOL_RESULT)
    assert result.payload["mcp_tool_use_id"] == use.id and result.payload["outcome"] == "ok"
    assert gateway.refused[use.id] >= 1 and gateway.calls[use.id] == gateway.refused[use.id] + 1
    assert gateway.runs == {use.id: 1}
