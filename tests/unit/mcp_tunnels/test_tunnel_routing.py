"""The MCP router's tunnel route: which hosts lie under a tunnel, which server they name, and the
typed refusals (unknown tunnel, archived, no certificate, a deeper name). In-memory stand-ins for
the tunnel directory and the gateway; the real ones: tests/e2e/test_mcp_tunnel.py."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from control_plane.mcp import McpRouter, McpServerRef
from control_plane.mcp.models import TunnelRoute
from outpost_wire.results import ToolResult

BASE = "tunnels.outpost.invalid"
GRANTS = {"ab" * 32: None, "cd" * 32: datetime(2026, 1, 1, tzinfo=UTC)}


class Directory:
    def __init__(self, **routes: TunnelRoute) -> None:
        self.routes = {f"{label}.{BASE}": route for label, route in routes.items()}

    def tunnel_domain(self, host: str) -> str | None:
        if not host.endswith("." + BASE):
            return None
        label = host[: -len(BASE) - 1].rpartition(".")[2]
        return f"{label}.{BASE}"

    async def route_for_domain(self, domain: str) -> TunnelRoute | None:
        return self.routes.get(domain)


class Gateway:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Mapping[str, Any] | None]] = []

    def mcp_catalog(self, environment_id: str, *, tunnel: Mapping[str, Any] | None = None) -> dict[str, Any]:
        tools = [{"name": "greet", "input_schema": {"type": "object"}}]
        return {"wiki": {"status": "up", "tools": tools}} if tunnel == GRANTS else {}

    async def mcp_call(self, session_id: str, environment_id: str, server: str, tool: str,
                       arguments: Mapping[str, Any], *, idempotency_key: str, timeout_s: float | None = None,
                       tunnel: Mapping[str, Any] | None = None) -> ToolResult:  # fmt: skip
        self.calls.append((server, tunnel))
        return ToolResult.text("hi")


def route(tunnel_id: str, *, archived: bool = False, certificates: int = 1) -> TunnelRoute:
    return TunnelRoute(tunnel_id, f"{tunnel_id}.{BASE}", archived, certificates, GRANTS)


def router(gateway: Gateway) -> McpRouter:
    tunnels = Directory(
        good=route("good"), bare=route("bare", certificates=0), gone=route("gone", archived=True)
    )
    return McpRouter(gateway, tunnels=tunnels)


async def test_a_tunnel_host_goes_to_the_edges_serving_the_tunnel() -> None:
    gateway = Gateway()
    async with router(gateway) as mcp:
        server = McpServerRef("wiki", f"https://WIKI.good.{BASE}./mcp?x=1")
        listed = await mcp.list_tools("s1", None, server)  # no environment needed
        assert listed.ok and [t.name for t in listed.tools] == ["greet"]
        outcome = await mcp.call("s1", None, server, "greet", {}, idempotency_key="k")
        assert outcome.outcome == "ok"
        assert gateway.calls == [("wiki", GRANTS)]


async def test_tunnel_refusals_are_typed_and_say_why() -> None:
    gateway = Gateway()
    cases = {
        f"https://wiki.bare.{BASE}/": "no active CA certificate",
        f"https://wiki.gone.{BASE}/": "is archived",
        f"https://wiki.nope.{BASE}/": f"no MCP tunnel has the domain nope.{BASE}",
        f"https://a.wiki.good.{BASE}/": "must name one server",
        f"https://good.{BASE}/": "must name one server",
        f"https://other.good.{BASE}/": "fronts MCP server 'other'",
    }
    async with router(gateway) as mcp:
        for url, message in cases.items():
            listed = await mcp.list_tools("s1", "env_1", McpServerRef("wiki", url))
            assert listed.error_type == "mcp_connection_failed_error", url
            assert message in listed.message, (url, listed.message)
        for url in list(cases)[:4]:
            outcome = await mcp.call(
                "s1", "env_1", McpServerRef("wiki", url), "greet", {}, idempotency_key="k"
            )
            assert outcome.error_type == "mcp_connection_failed_error" and outcome.is_error
    assert gateway.calls == []
