"""Fixtures of the failover tests: two control planes on one store, and an edge enrolled with them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from control_plane.config import ControlPlaneConfig
from control_plane.harness import HarnessConfig
from control_plane.server import ControlPlane
from edge_agent.enroll import register
from edge_agent.identity import Identity
from tests.support.edge_link import api_client, control_plane_config


@pytest.fixture
async def pair(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[ControlPlane, ControlPlane]]:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "unused")

    def config() -> ControlPlaneConfig:
        # Timing: a long drain grace so a draining process's turn is never cut short by the machine's
        # load, and a 0.2 s lease scan (default 5 s) so a released session is taken up within the
        # test's waits. The defaults run in tests/e2e/test_shipped_defaults.py and the kill -9 tests.
        return control_plane_config(  # the same data_dir: one store, one CA, one admin key
            tmp_path,
            drain_grace_s=30.0,
            harness=HarnessConfig(follow_tunnels=True, lease_scan_interval_s=0.2),
        )

    async with ControlPlane(config()) as a, ControlPlane(config()) as b:  # A creates the CA first
        yield a, b


@pytest.fixture
async def enrolled(pair: tuple[ControlPlane, ControlPlane], tmp_path: Path) -> tuple[str, Identity]:
    a, _ = pair
    async with api_client(a) as api:
        r = await api.post("/v1/environments", json={"name": "drain", "config": {"type": "self_hosted"}})
        assert r.status_code == 200, r.text
        environment = str(r.json()["id"])
        r = await api.post(f"/v1/environments/{environment}/enrollment_tokens", json={"ttl_seconds": 600})
        token = r.json()
    identity = await register(
        a.http_url,
        token["token"],
        tmp_path / "edge",
        name="drain-edge",
        ca_fingerprint=token["ca_fingerprint"],
    )
    return environment, identity
