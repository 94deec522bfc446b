"""The /metrics route: its auth and its exposition (the series: ``tests/unit/test_metering.py``)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

import control_plane.api.metrics as cp_metrics
from control_plane.api.app import ApiConfig, ApiServices, create_app
from control_plane.api.auth import create_api_key
from control_plane.api.caller import KeyScope
from control_plane.enroll import CertificateAuthority, EnrollmentService
from control_plane.metering import ControlPlaneMetrics, MeteredGateway
from control_plane.store.memory import MemoryStore
from control_plane.tunnel import EdgeGateway, EdgeRegistry
from outpost_wire.version import SOFTWARE_VERSION
from tests.support.api_app import utcnow


def test_exports() -> None:
    assert set(cp_metrics.__all__) == {"metrics_router"}


@pytest.mark.parametrize("public", [False, True])
async def test_metrics_route_needs_an_api_key_unless_public(tmp_path: Path, public: bool) -> None:
    store = MemoryStore()
    key, _ = await create_api_key(store, "test", utcnow())
    read_write, _ = await create_api_key(store, "rw", utcnow(), scope=KeyScope.READ_WRITE)
    metrics = ControlPlaneMetrics("cp_1")
    registry = EdgeRegistry(on_edge_ready=metrics.edge_ready)
    metrics.bind(edges=registry)
    app = create_app(
        ApiServices(
            store=store,
            enrollment=EnrollmentService(
                store, CertificateAuthority.load_or_create(tmp_path / "ca"), clock=utcnow
            ),
            registry=registry,
            gateway=MeteredGateway(EdgeGateway(registry), metrics),
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
