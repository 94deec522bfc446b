"""The control plane's metrics: model and tool-call metering, and the /metrics route's auth."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

import control_plane.api.metrics as cp_metrics
from control_plane.api.app import ApiConfig, ApiServices, create_app
from control_plane.api.auth import create_api_key
from control_plane.api.caller import KeyScope
from control_plane.api.metrics import (
    ControlPlaneMetrics,
    MeteredEdgeRegistry,
    MeteredGateway,
    MeteredModelClient,
)
from control_plane.enroll import CertificateAuthority, EnrollmentService
from control_plane.errors import EdgeUnavailable
from control_plane.harness.model import ModelRetryableError, StreamEvent
from control_plane.store.memory import MemoryStore
from control_plane.tunnel import GatewayConfig
from outpost_wire.version import SOFTWARE_VERSION
from tests.integration.api._support import utcnow


def test_exports() -> None:
    assert set(cp_metrics.__all__) == {
        "ControlPlaneMetrics",
        "MeteredEdgeRegistry",
        "MeteredGateway",
        "MeteredModelClient",
        "metrics_router",
    }


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
    registry = MeteredEdgeRegistry(metrics)
    gateway = MeteredGateway(registry, GatewayConfig(edge_wait_s=0.01), metrics=metrics)  # no edge comes
    with pytest.raises(EdgeUnavailable):
        await gateway.execute("sesn_1", "env_1", "bash", {"command": "true"}, idempotency_key="k")
    labels = {"edge_id": "none", "tool": "bash", "outcome": "edge_unavailable"}
    assert metrics.registry.get_sample_value("outpost_tool_calls_total", labels) == 1
    assert metrics.registry.get_sample_value("outpost_sessions_active") == 0


@pytest.mark.parametrize("public", [False, True])
async def test_metrics_route_needs_an_api_key_unless_public(tmp_path: Path, public: bool) -> None:
    store = MemoryStore()
    key, _ = await create_api_key(store, "test", utcnow())
    read_write, _ = await create_api_key(store, "rw", utcnow(), scope=KeyScope.READ_WRITE)
    metrics = ControlPlaneMetrics("cp_1")
    registry = MeteredEdgeRegistry(metrics)
    app = create_app(
        ApiServices(
            store=store,
            enrollment=EnrollmentService(
                store, CertificateAuthority.load_or_create(tmp_path / "ca"), clock=utcnow
            ),
            registry=registry,
            gateway=MeteredGateway(registry, metrics=metrics),
            clock=utcnow,
            tunnel_address=None,
            config=ApiConfig(metrics_public=public),
            metrics=metrics,
        )
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        anonymous = await client.get("/metrics")
        assert anonymous.status_code == (200 if public else 401)
        reader = await client.get("/metrics", headers={"authorization": f"Bearer {read_write}"})
        assert reader.status_code == (200 if public else 403)  # not public: admin keys only
        r = await client.get("/metrics", headers={"authorization": f"Bearer {key}"})
        assert r.status_code == 200
        assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
        families = {f.name: f for f in text_string_to_metric_families(r.text)}
        (info,) = families["outpost_control_plane_info"].samples
        assert info.labels == {"control_plane_id": "cp_1", "version": SOFTWARE_VERSION}
        (build,) = families["outpost_control_build_info"].samples
        assert build.labels == {"version": SOFTWARE_VERSION}
        assert {"process_cpu_seconds", "process_resident_memory_bytes", "process_open_fds"} <= set(families)
        r = await client.get(
            "/metrics",
            headers={"authorization": f"Bearer {key}", "accept": "application/openmetrics-text"},
        )
        assert r.headers["content-type"].startswith("application/openmetrics-text")
        assert r.text.endswith("# EOF\n")
