"""/healthz and /readyz of the control plane's API: no API key, and /readyz names the failing check."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from control_plane.api.app import ApiServices, create_app
from control_plane.api.health import ReadinessCheck
from control_plane.enroll import CertificateAuthority, EnrollmentService
from control_plane.store.memory import MemoryStore
from control_plane.tunnel import EdgeGateway, EdgeRegistry
from tests.support.api_app import utcnow


def _app(tmp_path: Path, store: MemoryStore, readiness: dict[str, ReadinessCheck]) -> httpx.AsyncClient:
    registry = EdgeRegistry()
    ca = CertificateAuthority.load_or_create(tmp_path / "ca")
    app = create_app(
        ApiServices(
            store=store,
            enrollment=EnrollmentService(store, ca, clock=utcnow),
            registry=registry,
            gateway=EdgeGateway(registry),
            clock=utcnow,
            tunnel_address=None,
            readiness=readiness,
        )
    )
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")


async def test_ready_when_every_check_passes_then_names_the_one_that_fails(tmp_path: Path) -> None:
    store = MemoryStore()
    state = {"harness": True}

    async def store_ready() -> str | None:
        await store.ping()
        return None

    async def harness_ready() -> str | None:
        return None if state["harness"] else "stopped"

    async with _app(tmp_path, store, {"store": store_ready, "harness": harness_ready}) as client:
        assert (await client.get("/healthz")).json() == {"status": "ok"}  # no API key needed
        r = await client.get("/readyz")
        assert r.status_code == 200
        assert r.json() == {"status": "ready", "checks": {"store": "ok", "harness": "ok"}}

        state["harness"] = False
        r = await client.get("/readyz")
        assert r.status_code == 503
        assert r.json() == {"status": "not ready", "checks": {"store": "ok", "harness": "failed: stopped"}}

        await store.close()
        r = await client.get("/readyz")
        assert r.status_code == 503
        assert r.json()["checks"]["store"] == "failed: the store is closed"
        assert (await client.get("/healthz")).status_code == 200  # alive, only not ready


async def test_a_hanging_check_fails_within_its_timeout(tmp_path: Path) -> None:
    async def hangs() -> str | None:
        await asyncio.sleep(3600)
        return None

    async def breaks() -> str | None:
        raise RuntimeError("disk on fire")

    async with _app(tmp_path, MemoryStore(), {"slow": hangs, "broken": breaks}) as client:
        r = await asyncio.wait_for(client.get("/readyz"), 30)
    assert r.status_code == 503
    assert r.json()["checks"] == {"slow": "failed: no answer within 2 s", "broken": "failed: disk on fire"}


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
async def test_no_checks_means_ready(tmp_path: Path, path: str) -> None:
    async with _app(tmp_path, MemoryStore(), {}) as client:
        assert (await client.get(path)).status_code == 200
