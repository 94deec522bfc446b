"""The edge's observability endpoint, its request metering, and its config."""

from __future__ import annotations

import asyncio

import httpx
import pytest

import edge_agent.observe as observe
from edge_agent.config import EdgeConfig, ObservabilityConfig, load_config
from edge_agent.errors import ConfigError
from edge_agent.observe import EdgeMetrics, ObserveServer, outcome_label
from outpost_wire.errors import ErrorCode
from outpost_wire.frames import Execute, Failure, McpCall, Outcome, Provision, Provisioned, Request
from outpost_wire.results import ToolResult


def test_exports() -> None:
    assert set(observe.__all__) == {"EdgeMetrics", "MeteredHandler", "ObserveServer", "outcome_label"}


async def test_endpoints() -> None:
    state = {"ready": False}

    def readiness() -> tuple[bool, str]:
        return state["ready"], "ready" if state["ready"] else "not ready: tunnel backing_off"

    async with (
        ObserveServer("127.0.0.1", 0, render=lambda: "m 1\n", readiness=readiness) as server,
        httpx.AsyncClient(base_url=server.url) as client,
    ):
        assert server.port != 0
        r = await client.get("/metrics")
        assert r.status_code == 200 and r.text == "m 1\n"
        assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert (await client.get("/healthz")).status_code == 200
        r = await client.get("/readyz")
        assert r.status_code == 503 and "backing_off" in r.text
        state["ready"] = True
        assert (await client.get("/readyz?verbose=1")).status_code == 200
        assert (await client.get("/nope")).status_code == 404
        assert (await client.post("/metrics")).status_code == 405
        r = await client.head("/metrics")
        assert r.status_code == 200 and r.content == b""


async def test_garbage_and_silence_are_closed() -> None:
    async with ObserveServer("127.0.0.1", 0, render=str, readiness=lambda: (True, "")) as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"NONSENSE\r\n\r\n")
        assert (await reader.read()).startswith(b"HTTP/1.1 400")
        writer.close()


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
    assert metrics.tool_calls.value("bash", "ok") == 1
    assert metrics.tool_calls.value("other", "ok") == 1
    assert metrics.mcp_calls.value("wiki", "policy_denied") == 1
    assert metrics.sandbox_ops.value("provision", "ok") == 1
    text = metrics.registry.render()
    assert 'outpost_edge_tool_call_duration_seconds_count{tool="bash",outcome="ok"} 1' in text
    assert 'outpost_edge_info{edge_id="edge_1",version=' in text
    assert "outpost_edge_tunnel_up 0" in text


async def test_metered_handler_counts_a_cancelled_call() -> None:
    metrics = EdgeMetrics(edge_id="edge_1", tools=("bash",))
    inner = _Handler(ToolResult.text("late"), delay=10)
    handler = metrics.instrument(inner)
    task = asyncio.create_task(handler.handle(_request(Execute(tool="bash", input_json="{}"))))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert metrics.tool_calls.value("bash", "cancelled") == 1
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
