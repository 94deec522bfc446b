"""The harness's MCP I/O helpers with a fake backend: listings and calls never raise."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness_logs import MCP_AGENT, TICKETS_TOOLS

from control_plane.harness.mcp_calls import call_tool, list_servers
from control_plane.harness.step import DispatchMcpTool
from control_plane.mcp.models import McpOutcome, McpServerRef, ServerTools


class Backend:
    def __init__(self, *, fail: bool = False) -> None:
        self.fail = fail
        self.calls: list[tuple[str, str, str, dict[str, Any], str, float | None]] = []

    async def list_tools(
        self, session_id: str, environment_id: str | None, server: McpServerRef
    ) -> ServerTools:
        if self.fail and server.name == "docs":
            raise RuntimeError("bug")
        return TICKETS_TOOLS if server.name == "tickets" else ServerTools(server.name)

    async def call(
        self,
        session_id: str,
        environment_id: str | None,
        server: McpServerRef,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        idempotency_key: str,
        timeout_s: float | None = None,
    ) -> McpOutcome:
        if self.fail:
            raise RuntimeError("bug")
        self.calls.append((server.name, server.url, tool, dict(arguments), idempotency_key, timeout_s))
        return McpOutcome([{"type": "text", "text": "done"}], False, 12.5)


CALL = DispatchMcpTool("sevt_use", "tickets", "lookup_ticket", {"id": "7"})


async def test_listings_come_in_server_order_and_a_failing_backend_is_an_error_listing() -> None:
    listings = await list_servers(Backend(fail=True), "sesn_1", "env_1", MCP_AGENT.mcp_servers)
    assert [s.server for s in listings] == ["tickets", "docs"]
    assert listings[0] == TICKETS_TOOLS
    assert listings[1].error_type == "mcp_connection_failed_error" and "RuntimeError" in listings[1].message


async def test_without_a_backend_every_server_is_unavailable() -> None:
    listings = await list_servers(None, "sesn_1", "env_1", MCP_AGENT.mcp_servers)
    assert all(s.error_type == "mcp_connection_failed_error" for s in listings)
    draft = await call_tool(None, MCP_AGENT, "sesn_1", "env_1", CALL, None)
    assert draft.payload["is_error"] and draft.payload["outcome"] == "mcp_connection_failed_error"


async def test_a_call_is_keyed_by_the_use_event_and_recorded_with_outcome_and_latency() -> None:
    backend = Backend()
    draft = await call_tool(backend, MCP_AGENT, "sesn_1", "env_1", CALL, 9.0)
    assert backend.calls == [("tickets", "edge://tickets", "lookup_ticket", {"id": "7"}, "sevt_use", 9.0)]
    assert draft.payload == {
        "mcp_tool_use_id": "sevt_use",
        "content": [{"type": "text", "text": "done"}],
        "is_error": False,
        "mcp_server_name": "tickets",
        "tool": "lookup_ticket",
        "outcome": "ok",
        "latency_ms": 12.5,
    }


async def test_a_backend_bug_or_an_unknown_server_still_records_a_result() -> None:
    failed = await call_tool(Backend(fail=True), MCP_AGENT, "sesn_1", "env_1", CALL, None)
    assert failed.payload["is_error"] and failed.payload["outcome"] == "mcp_connection_failed_error"
    unknown = DispatchMcpTool("sevt_x", "gone", "t", {})
    draft = await call_tool(Backend(), MCP_AGENT, "sesn_1", "env_1", unknown, None)
    assert draft.payload["is_error"] and "'gone' is not configured" in draft.payload["content"][0]["text"]
