"""Health, readiness and status on both sides, against real parts (no Docker):

* the control plane's ``/readyz`` (no API key) is ready with its store, tunnel and harness up, and
  answers 503 naming the check when the harness stops, the tunnel drains or the store goes away;
* the edge's ``/status`` and ``outpost-edge status`` (a subprocess, as an operator runs it) read a
  real link (the edge's ``Dialer`` + ``Link`` over gRPC/mTLS to a real control plane): connected,
  transport, control plane, identity, certificate expiry; then the operator revokes the edge and
  both say so, and ``/readyz`` and ``outpost_edge_revoked`` follow.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from control_plane.server import ControlPlane
from edge_agent.connection import Dialer, Link
from edge_agent.enroll import register
from edge_agent.identity import Identity
from edge_agent.observe import EdgeMetrics, ObserveServer
from edge_agent.status import status_document
from tests.support import eventually
from tests.support.edge_link import (
    api_client,
    make_dialer,
    running_link,
)
from tests.support.edge_link import api_fixture as api_fixture
from tests.support.edge_link import cp_fixture as cp_fixture
from tests.support.edge_link import no_ambient_proxy as no_ambient_proxy

pytestmark = pytest.mark.usefixtures("no_ambient_proxy")

REPO = Path(__file__).resolve().parents[2]


async def _readyz(cp: ControlPlane) -> tuple[int, dict[str, Any]]:
    async with httpx.AsyncClient(base_url=cp.http_url, timeout=30) as anonymous:
        r = await anonymous.get("/readyz")
    return r.status_code, r.json()


async def test_control_plane_readyz_names_the_failing_check(cp: ControlPlane) -> None:
    assert await _readyz(cp) == (
        200,
        {"status": "ready", "checks": {"store": "ok", "tunnel": "ok", "harness": "ok"}},
    )

    assert cp.harness is not None
    await cp.harness.close()
    code, body = await _readyz(cp)
    assert code == 503 and body["status"] == "not ready"
    assert body["checks"] == {"store": "ok", "tunnel": "ok", "harness": "failed: stopped"}

    assert cp.tunnel is not None
    cp.tunnel.announce_drain(1.0)
    code, body = await _readyz(cp)
    assert code == 503
    assert body["checks"]["tunnel"] == "failed: draining: this control plane is shutting down"

    assert cp.store is not None
    await cp.store.close()  # the store is gone: the probe says so instead of hanging or crashing
    code, body = await _readyz(cp)
    assert code == 503
    assert body["checks"]["store"] == "failed: the store is closed"
    async with httpx.AsyncClient(base_url=cp.http_url, timeout=30) as anonymous:
        assert (await anonymous.get("/healthz")).status_code == 200  # alive, only not ready


async def _enroll(cp: ControlPlane, api: httpx.AsyncClient, state_dir: Path) -> Identity:
    r = await api.post("/v1/environments", json={"name": "status", "config": {"type": "self_hosted"}})
    environment = r.json()["id"]
    r = await api.post(f"/v1/environments/{environment}/enrollment_tokens", json={})
    token = r.json()
    return await register(
        cp.http_url, token["token"], state_dir, name="status-edge", ca_fingerprint=token["ca_fingerprint"]
    )


@dataclass
class _Edge:
    """The edge's status pieces around a real link: metrics, the local endpoint, a config file."""

    identity: Identity
    dialer: Dialer
    link: Link
    server: ObserveServer
    config: Path

    async def get(self, path: str) -> httpx.Response:
        async with httpx.AsyncClient(base_url=self.server.url, timeout=30, trust_env=False) as client:
            return await client.get(path)

    async def cli(self, *args: str) -> tuple[int, str, str]:
        """``outpost-edge status`` in its own process, as an operator runs it."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "edge_agent.cli",
            "status",
            "--config",
            str(self.config),
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=REPO,
            env={k: v for k, v in os.environ.items() if "proxy" not in k.lower()},
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()


@pytest.fixture
async def edge(cp: ControlPlane, api: httpx.AsyncClient, tmp_path: Path) -> AsyncIterator[_Edge]:
    state_dir = tmp_path / "edge"
    identity = await _enroll(cp, api, state_dir)
    dialer = make_dialer(identity, state_dir)
    async with running_link(identity, dialer) as link:
        metrics = EdgeMetrics(edge_id=identity.edge_id, tools=("bash",))
        metrics.bind(link=link, capacity=2)

        def status() -> dict[str, Any]:
            return status_document(
                identity=identity,
                name="status-edge",
                link=link,
                dialer=dialer,
                sandboxes_live=0,
                sandbox_capacity=2,
            )

        async with ObserveServer(
            "127.0.0.1", 0, registry=metrics.registry, readiness=metrics.readiness, status=status
        ) as server:
            config = tmp_path / "config.yaml"
            config.write_text(
                yaml.safe_dump(
                    {"state_dir": str(state_dir), "observability": {"listen": f"127.0.0.1:{server.port}"}}
                )
            )
            yield _Edge(identity, dialer, link, server, config)


def _metric(text: str, name: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    raise AssertionError(f"{name} not in the exposition")


async def test_edge_status_and_the_cli_follow_a_real_link_until_revoked(
    cp: ControlPlane, api: httpx.AsyncClient, edge: _Edge
) -> None:
    await asyncio.wait_for(edge.link.connected.wait(), 30)
    r = await edge.get("/status")
    assert r.status_code == 200
    doc = r.json()
    assert doc["state"] == "connected" and doc["connected"] is True
    assert doc["edge_id"] == edge.identity.edge_id
    assert doc["environment_id"] == edge.identity.environment_id
    assert doc["transport"] == "grpc"
    assert doc["control_plane"] == cp.tunnel_address
    assert doc["control_plane_id"] == cp.id
    assert doc["revoked"] is False and doc["refusal"] is None and doc["last_error"] is None
    assert doc["handshakes"] == 1
    assert datetime.fromisoformat(doc["certificate_not_after"]) == edge.identity.not_after
    since = datetime.fromisoformat(doc["since"])
    assert abs((datetime.now(UTC) - since).total_seconds()) < 120

    started = time.perf_counter()
    code, out, err = await edge.cli("-o", "json")
    print(f"`outpost-edge status -o json` took {time.perf_counter() - started:.2f} s (a new process)")
    assert code == 0, err
    assert json.loads(out) == doc
    code, out, err = await edge.cli("-o", "table")
    assert code == 0, err
    rows = {line.split("  ", 1)[0]: line.split("  ", 1)[1].strip() for line in out.splitlines()[1:]}
    assert rows["tunnel"].startswith("connected since ")
    assert rows["control plane"] == f"{cp.tunnel_address} over grpc ({cp.id})"
    assert rows["revoked"] == "no"

    async with api_client(cp) as admin:
        r = await admin.post(f"/v1/edges/{edge.identity.edge_id}/revoke")
        assert r.status_code == 200, r.text

    async def refused() -> bool:
        return bool((await edge.get("/status")).json()["revoked"])

    await eventually(refused, 30, "the edge to see its revocation")
    doc = (await edge.get("/status")).json()
    assert doc["state"] == "revoked" and doc["connected"] is False and doc["refusal"] == "revoked"
    assert "revoked" in doc["last_error"]
    code, out, err = await edge.cli("-o", "table")
    assert code == 0, err
    assert "YES (revoked): enroll it again" in out
    r = await edge.get("/readyz")
    assert r.status_code == 503 and "refuses this edge for good (revoked)" in r.text
    assert _metric((await edge.get("/metrics")).text, "outpost_edge_revoked") == 1


async def test_cli_says_when_no_daemon_answers(edge: _Edge) -> None:
    await edge.server.close()
    code, out, err = await edge.cli()
    assert code == 4 and out == ""
    assert err.startswith(
        "outpost-edge: the edge daemon is not running: nothing answers on http://127.0.0.1:"
    )
    assert err.count("\n") == 1 and "Traceback" not in err
