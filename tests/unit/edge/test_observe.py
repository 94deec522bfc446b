"""The edge's observability endpoint, its request metering, and its config."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

import edge_agent.observe as observe
from edge_agent.config import EdgeConfig, ObservabilityConfig, load_config
from edge_agent.errors import ConfigError
from edge_agent.observe import EdgeMetrics, ObserveServer, outcome_label
from outpost_wire.errors import ErrorCode
from outpost_wire.frames import Execute, Failure, McpCall, Outcome, Provision, Provisioned, Request
from outpost_wire.results import ToolResult
from outpost_wire.version import SOFTWARE_VERSION


def test_exports() -> None:
    assert set(observe.__all__) == {
        "PROVISION_KINDS",
        "EdgeMetrics",
        "MeteredHandler",
        "ObserveServer",
        "outcome_label",
    }


def _families(text: str) -> dict[str, Metric]:
    return {f.name: f for f in text_string_to_metric_families(text)}


async def test_endpoints() -> None:
    state = {"ready": False}

    def readiness() -> tuple[bool, str]:
        return state["ready"], "ready" if state["ready"] else "not ready: tunnel backing_off"

    metrics = EdgeMetrics(edge_id="edge_1", tools=("bash",))
    async with (
        ObserveServer(
            "127.0.0.1", 0, registry=metrics.registry, readiness=readiness, status=lambda: {"state": "idle"}
        ) as server,
        httpx.AsyncClient(base_url=server.url) as client,
    ):
        assert server.port != 0
        r = await client.get("/metrics")
        assert r.status_code == 200
        assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert "outpost_edge_tunnel_up" in _families(r.text)
        r = await client.get("/metrics", headers={"accept": "application/openmetrics-text"})
        assert r.headers["content-type"].startswith("application/openmetrics-text")
        assert (await client.get("/healthz")).status_code == 200
        r = await client.get("/readyz")
        assert r.status_code == 503 and "backing_off" in r.text
        state["ready"] = True
        assert (await client.get("/readyz?verbose=1")).status_code == 200
        r = await client.get("/status")
        assert r.status_code == 200 and r.json() == {"state": "idle"}
        assert r.headers["content-type"] == "application/json"
        assert (await client.get("/nope")).status_code == 404
        r = await client.post("/metrics")
        assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD"
        r = await client.head("/healthz")
        assert r.status_code == 200 and r.content == b""
    # closed: nothing listens any more
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient() as client:
            await client.get(f"{server.url}/healthz")


async def test_garbage_gets_a_400_and_the_server_lives_on() -> None:
    metrics = EdgeMetrics(edge_id="e", tools=())
    async with ObserveServer(
        "127.0.0.1", 0, registry=metrics.registry, readiness=lambda: (True, "")
    ) as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"NONSENSE\r\n\r\n")
        assert (await asyncio.wait_for(reader.read(), 10)).startswith(b"HTTP/1.1 400")
        writer.close()
        async with httpx.AsyncClient(base_url=server.url) as client:
            assert (await client.get("/status")).status_code == 404  # no status source given
            assert (await client.get("/healthz")).status_code == 200


async def test_a_taken_port_raises_and_close_is_idempotent() -> None:
    metrics = EdgeMetrics(edge_id="e", tools=())
    async with ObserveServer(
        "127.0.0.1", 0, registry=metrics.registry, readiness=lambda: (True, "")
    ) as first:
        second = ObserveServer(
            "127.0.0.1", first.port, registry=metrics.registry, readiness=lambda: (True, "")
        )
        with pytest.raises(OSError):
            await second.start()
        await second.close()
    await first.close()


class _Handler:
    def __init__(self, outcome: Outcome | None = None, delay: float = 0.0) -> None:
        self.outcome = outcome
        self.delay = delay
        self.cancelled: list[str] = []

    async def handle(self, request: Request) -> Outcome:
        await asyncio.sleep(self.delay)
        assert self.outcome is not None
        return self.outcome

    def cancel(self, request_id: str) -> bool:
        self.cancelled.append(request_id)
        return True


def _request(op: Execute | McpCall | Provision, rid: str = "req_1") -> Request:
    return Request(request_id=rid, session_id="sesn_1", idempotency_key="", deadline_ms=0, op=op)


async def test_metered_handler_counts_by_tool_and_outcome() -> None:
    metrics = EdgeMetrics(edge_id="edge_1", tools=("bash",), mcp_servers=("wiki",))
    ok = metrics.instrument(_Handler(ToolResult.text("hi")))
    await ok.handle(_request(Execute(tool="bash", input_json="{}")))
    await ok.handle(_request(Execute(tool="weird\ntool", input_json="{}")))
    denied = metrics.instrument(_Handler(Failure(ErrorCode.POLICY_DENIED, "no")))
    await denied.handle(_request(McpCall(server="wiki", tool="search", arguments_json="{}")))
    await metrics.instrument(_Handler(Provisioned("sb", "img", False))).handle(_request(Provision()))
    value = metrics.registry.get_sample_value
    assert value("outpost_edge_tool_calls_total", {"tool": "bash", "outcome": "ok"}) == 1
    assert value("outpost_edge_tool_calls_total", {"tool": "other", "outcome": "ok"}) == 1
    assert value("outpost_edge_mcp_calls_total", {"server": "wiki", "outcome": "policy_denied"}) == 1
    assert value("outpost_edge_sandbox_operations_total", {"op": "provision", "outcome": "ok"}) == 1
    families = _families(generate_latest(metrics.registry).decode())
    (count,) = [
        s
        for s in families["outpost_edge_tool_call_duration_seconds"].samples
        if s.name.endswith("_count") and s.labels == {"tool": "bash", "outcome": "ok"}
    ]
    assert count.value == 1
    (info,) = families["outpost_edge_info"].samples
    assert info.labels["edge_id"] == "edge_1" and info.value == 1
    assert families["outpost_edge_tunnel_up"].samples[0].value == 0
    assert families["outpost_edge_revoked"].samples[0].value == 0
    assert families["outpost_edge_build_info"].samples[0].labels == {"version": SOFTWARE_VERSION}
    assert "process_resident_memory_bytes" in families
    assert families["outpost_edge_certificate_expiry_timestamp_seconds"].samples == []  # not bound yet


def test_provisioning_histogram_by_kind() -> None:
    metrics = EdgeMetrics(edge_id="e", tools=())
    metrics.sandbox_provisioned("cold", 0.8)
    metrics.sandbox_provisioned("resume", 0.004)
    metrics.sandbox_provisioned("sideways", 1.0)  # an unknown kind cannot add series
    name = "outpost_edge_sandbox_provision_duration_seconds"
    value = metrics.registry.get_sample_value
    assert value(f"{name}_count", {"kind": "cold"}) == 1
    assert value(f"{name}_bucket", {"kind": "cold", "le": "0.5"}) == 0
    assert value(f"{name}_bucket", {"kind": "cold", "le": "1.0"}) == 1
    assert value(f"{name}_bucket", {"kind": "resume", "le": "0.005"}) == 1
    assert value(f"{name}_count", {"kind": "other"}) == 1


async def test_metered_handler_counts_a_cancelled_call() -> None:
    metrics = EdgeMetrics(edge_id="edge_1", tools=("bash",))
    inner = _Handler(ToolResult.text("late"), delay=10)
    handler = metrics.instrument(inner)
    task = asyncio.create_task(handler.handle(_request(Execute(tool="bash", input_json="{}"))))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    labels = {"tool": "bash", "outcome": "cancelled"}
    assert metrics.registry.get_sample_value("outpost_edge_tool_calls_total", labels) == 1
    assert handler.cancel("req_9") and inner.cancelled == ["req_9"]


def test_outcome_label() -> None:
    assert outcome_label(ToolResult.text("x")) == "ok"
    assert outcome_label(ToolResult.error("x")) == "tool_error"
    assert outcome_label(Failure(ErrorCode.DEADLINE_EXCEEDED, "x")) == "deadline_exceeded"


def test_readiness_without_a_link() -> None:
    metrics = EdgeMetrics(edge_id="e", tools=())
    assert metrics.readiness() == (False, "not ready: the link has not started")


def test_observability_config() -> None:
    assert EdgeConfig().observability.address == ("127.0.0.1", 9464)
    assert ObservabilityConfig(listen=None).listen is None
    assert ObservabilityConfig(listen="[::1]:0").address == ("::1", 0)
    assert ObservabilityConfig(listen="localhost:9000").address == ("localhost", 9000)
    assert ObservabilityConfig(listen="0.0.0.0:9464", allow_remote=True).address == ("0.0.0.0", 9464)
    with pytest.raises(ValueError, match="allow_remote"):
        ObservabilityConfig(listen="0.0.0.0:9464")
    with pytest.raises(ValueError, match="HOST:PORT"):
        ObservabilityConfig(listen="9464")


def test_observability_config_errors_name_the_key(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "c.yaml"
    path.write_text("observability:\n  listen: 10.0.0.1:9464\n")
    with pytest.raises(ConfigError, match="observability"):
        load_config(path)
