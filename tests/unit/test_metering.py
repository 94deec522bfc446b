"""The control plane's metering: the model and gateway wrappers, and the series the tunnel's
registry and gateway feed through their callbacks."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any

import pytest

import control_plane.metering as metering
from control_plane.errors import EdgeUnavailable
from control_plane.harness.model import ModelRetryableError, StreamEvent
from control_plane.metering import ControlPlaneMetrics, MeteredGateway, MeteredModelClient
from control_plane.tunnel import EdgeGateway, EdgeRegistry, GatewayConfig, SandboxMove
from outpost_wire.errors import ErrorCode
from outpost_wire.frames import Provision, Provisioned
from outpost_wire.results import ToolResult


def test_exports() -> None:
    assert set(metering.__all__) == {"ControlPlaneMetrics", "MeteredGateway", "MeteredModelClient"}


class _Model:
    def __init__(self, result: dict[str, Any] | BaseException) -> None:
        self.result = result

    async def stream(
        self, request: Mapping[str, Any], on_event: Callable[[StreamEvent], None]
    ) -> dict[str, Any]:
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result

    async def close(self) -> None:
        pass


async def test_model_requests_latency_and_tokens() -> None:
    metrics = ControlPlaneMetrics("cp_1")
    ok = MeteredModelClient(
        _Model({"usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 0}}), metrics
    )
    await ok.stream({"model": "claude-x"}, lambda e: None)
    failing = MeteredModelClient(_Model(ModelRetryableError("model_overloaded_error", "busy")), metrics)
    with pytest.raises(ModelRetryableError):
        await failing.stream({"model": "claude-x"}, lambda e: None)
    value = metrics.registry.get_sample_value
    assert value("outpost_model_requests_total", {"model": "claude-x", "outcome": "ok"}) == 1
    labels = {"model": "claude-x", "outcome": "model_overloaded_error"}
    assert value("outpost_model_requests_total", labels) == 1
    assert value("outpost_model_tokens_total", {"model": "claude-x", "type": "input"}) == 10
    assert value("outpost_model_tokens_total", {"model": "claude-x", "type": "output"}) == 5
    labels = {"model": "claude-x", "outcome": "ok"}
    assert value("outpost_model_request_duration_seconds_count", labels) == 1
    body, _ = metrics.render()
    assert 'type="cache_read_input"' not in body.decode()


async def test_gateway_counts_an_unavailable_edge() -> None:
    metrics = ControlPlaneMetrics()
    registry = EdgeRegistry(on_edge_ready=metrics.edge_ready)
    metrics.bind(edges=registry)
    inner = EdgeGateway(registry, GatewayConfig(edge_wait_s=0.01))  # no edge comes: fail fast
    gateway = MeteredGateway(inner, metrics)
    with pytest.raises(EdgeUnavailable):
        await gateway.execute("sesn_1", "env_1", "bash", {"command": "true"}, idempotency_key="k")
    labels = {"edge_id": "none", "tool": "bash", "outcome": "edge_unavailable"}
    assert metrics.registry.get_sample_value("outpost_tool_calls_total", labels) == 1
    assert metrics.registry.get_sample_value("outpost_sessions_active") == 0


class _Hands(EdgeGateway):
    """An edge gateway whose calls answer at once, as a stand-in for the tunnel (no edge needed)."""

    def __init__(self) -> None:
        super().__init__(EdgeRegistry())
        self.calls: list[str] = []

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
        self.calls.append(f"execute {tool}")
        return ToolResult.text("boom", is_error=True) if tool == "grep" else ToolResult.text("ok")

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
        tunnel: Mapping[str, Any] | None = None,
    ) -> ToolResult:
        self.calls.append(f"mcp {server}.{tool}")
        raise asyncio.CancelledError

    async def provision(
        self, session_id: str, environment_id: str, resources: Provision | None = None
    ) -> Provisioned:
        self.calls.append(f"provision {resources!r}")
        return Provisioned(sandbox_id="sbx_1", image="img", reused=False)

    async def destroy(self, session_id: str, environment_id: str) -> bool:
        self.calls.append("destroy")
        return True

    def edge_for_session(self, session_id: str) -> str | None:
        return "edge_a"


async def test_the_metered_gateway_counts_its_calls_and_passes_the_rest_through() -> None:
    metrics = ControlPlaneMetrics()
    inner = _Hands()
    gateway = MeteredGateway(inner, metrics)
    assert (await gateway.execute("s1", "env_1", "bash", {}, idempotency_key="k1")).is_error is False
    assert (await gateway.execute("s1", "env_1", "grep", {}, idempotency_key="k2")).is_error is True
    await gateway.execute("s1", "env_1", "my_tool", {}, idempotency_key="k3")
    with pytest.raises(asyncio.CancelledError):
        await gateway.mcp_call("s1", "env_1", "tickets", "list", {}, idempotency_key="k4")
    spec = Provision(image="img")
    assert (await gateway.provision("s1", "env_1", spec)).sandbox_id == "sbx_1"
    assert await gateway.destroy("s1", "env_1") is True
    assert inner.calls == [
        "execute bash",
        "execute grep",
        "execute my_tool",
        "mcp tickets.list",
        f"provision {spec!r}",
        "destroy",
    ]
    value = metrics.registry.get_sample_value

    def calls(tool: str, outcome: str) -> float | None:
        return value("outpost_tool_calls_total", {"edge_id": "edge_a", "tool": tool, "outcome": outcome})

    assert calls("bash", "ok") == 1
    assert calls("grep", "tool_error") == 1
    assert calls("other", "ok") == 1  # a tool the edge does not build in: a bounded label
    assert calls("mcp", "cancelled") == 1
    assert value("outpost_tool_call_duration_seconds_count", {"tool": "bash", "outcome": "ok"}) == 1
    assert gateway.edge_for_session("s1") == "edge_a"
    assert gateway.edge_wait_s == inner.edge_wait_s
    assert gateway.edges_connected("env_1") == 0
    assert gateway.take_move("s1") is None
    assert gateway.mcp_catalog("env_1") == {}


def test_sandbox_moves_are_counted_by_the_edge_left() -> None:
    metrics = ControlPlaneMetrics()
    metrics.sandbox_moved(SandboxMove("edge_a", "edge_b", "edge edge_a did not come back"))
    metrics.sandbox_moved(SandboxMove("edge_a", "edge_c", "edge edge_a did not come back"))
    value = metrics.registry.get_sample_value
    assert value("outpost_sandbox_moves_total", {"from_edge_id": "edge_a"}) == 2


class _Conn:
    """What the registry reads of a connection (no tunnel)."""

    def __init__(self, edge_id: str) -> None:
        self.edge_id = edge_id
        self.environment_id = "env_1"
        self.is_open = True
        self.closed: list[str] = []
        self.hello = None  # no handshake details: the status reads zeros
        self.edge = SimpleNamespace(name=edge_id)
        self.peer = "test"
        self.sandboxes_in_use = 0
        self.draining = False

    def close(self, code: ErrorCode, reason: str) -> None:
        self.is_open = False
        self.closed.append(reason)

    def send_drain(self, reason: str, grace_ms: int) -> None:
        pass


async def test_the_registry_reports_handshakes_and_requests_in_flight() -> None:
    metrics = ControlPlaneMetrics()
    registry = EdgeRegistry(on_edge_ready=metrics.edge_ready)
    metrics.bind(edges=registry)
    first, second = _Conn("edge_a"), _Conn("edge_a")
    registry.on_ready(first)  # type: ignore[arg-type]
    registry.on_ready(second)  # type: ignore[arg-type]  # reconnects: supersedes the first
    assert first.closed == ["superseded by a newer connection"]
    registry.track("req_1", "edge_a")
    registry.track("req_2", "edge_a")
    registry.track("req_3", "edge_b")
    assert registry.in_flight_by_edge() == {"edge_a": 2, "edge_b": 1}
    value = metrics.registry.get_sample_value
    assert value("outpost_control_edge_connections_total", {"edge_id": "edge_a"}) == 2
    assert value("outpost_control_edge_reconnects_total", {"edge_id": "edge_a"}) == 1
    assert value("outpost_control_edge_connected", {"edge_id": "edge_a", "environment_id": "env_1"}) == 1
    assert value("outpost_control_edge_requests_in_flight", {"edge_id": "edge_a"}) == 2
    registry.forget("req_1")
    assert value("outpost_control_edge_requests_in_flight", {"edge_id": "edge_a"}) == 1
