"""Observability end to end: the edge's /readyz follows the tunnel, /metrics on both sides count a
tool call (parsed with prometheus_client's parser; process and build info on both, no series name
shared), the provisioning histogram times a cold start and a resume from paused in real Docker,
``/status`` and ``outpost-edge status`` describe a running edge, and ``outpost-edge doctor`` passes
against a live control plane and says what to fix against a stopped one."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from control_plane.server import ControlPlane
from edge_agent.daemon import EdgeAgent
from outpost_wire.version import SOFTWARE_VERSION
from tests.e2e.relay import SilentRelay
from tests.support import REPO
from tests.support.e2e import Api, EnrolledEdge, text_of

pytestmark = pytest.mark.docker

FLIP_S = 10.0  # the acceptance bound: /readyz follows the control plane within this


def _edge_extra() -> dict[str, object]:
    return {
        "connection": {
            "heartbeat_interval_s": 1.0,
            "heartbeat_timeout_s": 3.0,
            "backoff_initial_s": 0.2,
            "backoff_max_s": 1.0,
            "connect_timeout_s": 2.0,
            "drain_grace_s": 5.0,
        },
        "observability": {"listen": "127.0.0.1:0"},
    }


async def _status(url: str) -> int:
    async with httpx.AsyncClient(timeout=2.0) as client:
        try:
            return (await client.get(url)).status_code
        except httpx.HTTPError:
            return -1


async def _within(url: str, status: int, timeout_s: float) -> float:
    """Seconds until ``url`` answers ``status``; fails after ``timeout_s``."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if await _status(url) == status:
            return time.monotonic() - started
        await asyncio.sleep(0.1)
    raise AssertionError(f"{url} did not answer {status} within {timeout_s:g} s")


async def _doctor(edge: EnrolledEdge) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "edge_agent.cli",
        "doctor",
        "--config",
        str(edge.config_path),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        cwd=REPO,
        env=env,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


@pytest.fixture
async def observed_edge(api: Api, environment: str, enroll, run_edge) -> AsyncIterator[EdgeAgent]:  # type: ignore[no-untyped-def]
    edge = await enroll(environment, extra=_edge_extra())
    agent = await run_edge(edge)
    assert agent.observe is not None, "the observability endpoint did not start"
    agent.enrolled = edge  # type: ignore[attr-defined]
    yield agent


async def test_readyz_follows_the_control_plane(
    control_plane: ControlPlane, observed_edge: EdgeAgent
) -> None:
    assert observed_edge.observe is not None
    base = observed_edge.observe.url
    assert await _status(f"{base}/healthz") == 200
    await _within(f"{base}/readyz", 200, FLIP_S)

    http_port = int(control_plane.http_url.rsplit(":", 1)[1])
    tunnel_port = int(control_plane.tunnel_address.rsplit(":", 1)[1])
    await control_plane.close()
    took = await _within(f"{base}/readyz", 503, FLIP_S)
    assert await _status(f"{base}/healthz") == 200  # the process is alive, only not ready
    print(f"not ready {took:.1f} s after the control plane stopped")

    config = control_plane.config.model_copy(update={"http_port": http_port, "tunnel_port": tunnel_port})
    async with ControlPlane(config) as again:
        assert again.tunnel_address == control_plane.tunnel_address
        took = await _within(f"{base}/readyz", 200, FLIP_S)
        print(f"ready {took:.1f} s after the control plane came back")
        text = await _metrics(f"{base}/metrics")
        assert _value(text, "outpost_edge_tunnel_up") == 1
        assert _value(text, "outpost_edge_tunnel_reconnects_total") == 1


async def test_readyz_follows_a_silent_network_loss_with_default_settings(
    control_plane: ControlPlane,
    environment: str,
    enroll,
    run_edge,  # type: ignore[no-untyped-def]
) -> None:
    """The control plane disappears without a word (a dropped route, not a closed socket): with
    the default heartbeats and backoff, /readyz turns within 10 s, and comes back within 10 s of
    the path's return."""
    tunnel_port = int(control_plane.tunnel_address.rsplit(":", 1)[1])
    async with SilentRelay(tunnel_port) as relay:
        edge = await enroll(
            environment,
            extra={
                "control_plane": {"tunnel_address": f"127.0.0.1:{relay.port}"},
                "connection": {},  # the defaults: heartbeats 3 s / 7.5 s, backoff 1 s up to 8 s
                "observability": {"listen": "127.0.0.1:0"},
            },
        )
        agent = await run_edge(edge)
        assert agent.observe is not None
        base = agent.observe.url
        await _within(f"{base}/readyz", 200, FLIP_S)

        relay.go_silent()
        took = await _within(f"{base}/readyz", 503, FLIP_S)
        print(f"not ready {took:.1f} s after the path went silent")
        await asyncio.sleep(5)  # a while without a control plane: the edge backs off meanwhile
        relay.restore()
        took = await _within(f"{base}/readyz", 200, FLIP_S)
        print(f"ready {took:.1f} s after the path came back")


async def _metrics(url: str, headers: dict[str, str] | None = None) -> str:
    async with httpx.AsyncClient(timeout=5.0) as client:
        response = await client.get(url, headers=headers or {})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return response.text


def _value(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample of a scrape (parsed with prometheus_client's own parser), or None."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return None


async def test_metrics_on_both_sides_count_a_tool_call(
    control_plane: ControlPlane, api: Api, environment: str, observed_edge: EdgeAgent
) -> None:
    assert observed_edge.observe is not None
    result = await api.exec(environment, "s-metrics", "bash", {"command": "echo hi"})
    assert text_of(result).strip() == "hi"

    edge_text = await _metrics(f"{observed_edge.observe.url}/metrics")
    ok = {"tool": "bash", "outcome": "ok"}
    assert _value(edge_text, "outpost_edge_tool_calls_total", **ok) == 1
    assert _value(edge_text, "outpost_edge_tool_call_duration_seconds_count", **ok) == 1
    assert _value(edge_text, "outpost_edge_tool_call_duration_seconds_bucket", **ok, le="+Inf") == 1
    assert _value(edge_text, "outpost_edge_sandboxes_live") == 1
    assert _value(edge_text, "outpost_edge_tunnel_up") == 1
    assert _value(edge_text, "outpost_edge_revoked") == 0
    cold = _value(edge_text, "outpost_edge_sandbox_provision_duration_seconds_count", kind="cold")
    assert cold == 1  # the call made the session's sandbox: one cold provision, timed
    assert _value(edge_text, "outpost_edge_build_info", version=SOFTWARE_VERSION) == 1
    assert (_value(edge_text, "process_resident_memory_bytes") or 0) > 0
    assert (_value(edge_text, "process_open_fds") or 0) > 0

    edge_id = observed_edge.edge_id
    cp_url = f"{control_plane.http_url}/metrics"
    async with httpx.AsyncClient(timeout=5.0) as client:
        assert (await client.get(cp_url)).status_code == 401  # an API key, like the other routes
    cp_text = await _metrics(cp_url, {"authorization": f"Bearer {control_plane.admin_key()}"})
    assert _value(cp_text, "outpost_tool_calls_total", edge_id=edge_id, **ok) == 1
    assert _value(cp_text, "outpost_tool_call_duration_seconds_count", **ok) == 1
    edge = {"edge_id": edge_id}
    assert _value(cp_text, "outpost_control_edge_connected", **edge, environment_id=environment) == 1
    assert _value(cp_text, "outpost_control_edge_connections_total", **edge) == 1
    assert _value(cp_text, "outpost_control_edge_requests_in_flight", **edge) == 0
    assert _value(cp_text, "outpost_control_edge_sandbox_capacity", **edge) == 8  # the default policy
    assert _value(cp_text, "outpost_control_build_info", version=SOFTWARE_VERSION) == 1
    assert (_value(cp_text, "process_cpu_seconds_total") or 0) > 0
    # The control plane's per-edge series no longer share names with the edge's own series.
    edge_names = {f.name for f in text_string_to_metric_families(edge_text) if f.name.startswith("outpost_")}
    cp_names = {f.name for f in text_string_to_metric_families(cp_text) if f.name.startswith("outpost_")}
    assert not edge_names & cp_names, edge_names & cp_names
    await api.post("/v1/sandboxes/destroy", {"environment_id": environment, "session_id": "s-metrics"})


async def test_doctor_passes_then_names_the_tcp_fix(
    control_plane: ControlPlane, observed_edge: EdgeAgent
) -> None:
    edge: EnrolledEdge = observed_edge.enrolled  # type: ignore[attr-defined]
    code, out = await _doctor(edge)
    assert code == 0, out
    lines = [line for line in out.splitlines() if not line.startswith(" ")]
    checks = lines[:-1]
    assert [line.split()[0] for line in checks] == ["OK"] * len(checks), out
    assert {line.split()[1].rstrip(":") for line in checks} >= {
        "config",
        "identity",
        "certificate",
        "docker",
        "proxy",
        "dns",
        "tcp",
        "tls",
        "clock",
    }
    assert lines[-1] == "all checks passed"

    await control_plane.close()
    code, out = await _doctor(edge)
    assert code == 1, out
    assert "FAIL tcp: cannot connect to" in out, out
    assert "fix: nothing listens on" in out, out
    assert "SKIP tls" in out, out


async def _sandbox_state(docker_client: object, session_id: str) -> str:
    def state() -> str:
        found = docker_client.containers.list(  # type: ignore[attr-defined]
            all=True, filters={"label": f"outpost.session_id={session_id}"}
        )
        return str(found[0].status) if found else "gone"

    return await asyncio.to_thread(state)


async def test_provisioning_latency_cold_then_resume(
    control_plane: ControlPlane,
    api: Api,
    environment: str,
    enroll,  # type: ignore[no-untyped-def]
    run_edge,  # type: ignore[no-untyped-def]
    docker_client: object,
) -> None:
    # idle_pause_s 1 s (not 60): the sandbox pauses between the two calls, so the second resumes it.
    edge = await enroll(environment, idle_pause_s=1.0, extra=_edge_extra())
    agent = await run_edge(edge)
    assert agent.observe is not None
    metrics_url = f"{agent.observe.url}/metrics"
    first = await api.exec(environment, "s-resume", "bash", {"command": "echo one"})
    assert text_of(first).strip() == "one"
    deadline = time.monotonic() + 60
    while await _sandbox_state(docker_client, "s-resume") != "paused":
        assert time.monotonic() < deadline, "the idle sandbox was not paused"
        await asyncio.sleep(0.2)
    second = await api.exec(environment, "s-resume", "bash", {"command": "echo two"})
    assert text_of(second).strip() == "two"

    text = await _metrics(metrics_url)
    name = "outpost_edge_sandbox_provision_duration_seconds"
    assert _value(text, f"{name}_count", kind="cold") == 1
    assert _value(text, f"{name}_count", kind="resume") == 1
    cold_s = _value(text, f"{name}_sum", kind="cold") or 0.0
    resume_s = _value(text, f"{name}_sum", kind="resume") or 0.0
    assert resume_s > 0 and cold_s > 0
    print(f"provisioning: cold {cold_s * 1000:.0f} ms, resume from paused {resume_s * 1000:.1f} ms")
    await api.post("/v1/sandboxes/destroy", {"environment_id": environment, "session_id": "s-resume"})


async def test_status_of_a_running_edge_and_the_cli(
    control_plane: ControlPlane, observed_edge: EdgeAgent, tmp_path: Path
) -> None:
    assert observed_edge.observe is not None
    base = observed_edge.observe.url
    async with httpx.AsyncClient(base_url=base, timeout=5.0) as client:
        doc = (await client.get("/status")).json()
        # A keep-alive scraper's figures (printed, not asserted): no ~40 ms stall per request.
        took = []
        for _ in range(20):
            started = time.perf_counter()
            assert (await client.get("/metrics")).status_code == 200
            took.append((time.perf_counter() - started) * 1000)
    took.sort()
    print(f"edge /metrics over keep-alive: median {took[10]:.1f} ms, max {took[-1]:.1f} ms")
    assert doc["state"] == "connected" and doc["connected"] is True
    assert doc["edge_id"] == observed_edge.edge_id
    assert doc["control_plane_id"] == control_plane.id
    assert doc["control_plane"] == control_plane.tunnel_address and doc["transport"] == "grpc"
    assert doc["revoked"] is False and doc["sandbox_capacity"] == 8 and doc["version"] == SOFTWARE_VERSION

    # `outpost-edge status` reads the same document from the address in its config.
    edge: EnrolledEdge = observed_edge.enrolled  # type: ignore[attr-defined]
    config = yaml.safe_load(edge.config_path.read_text())
    config["observability"] = {"listen": f"127.0.0.1:{observed_edge.observe.port}"}
    config_path = tmp_path / "status-config.yaml"
    config_path.write_text(yaml.safe_dump(config))
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "edge_agent.cli", "status", "--config", str(config_path), "-o", "json",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=REPO, env=env,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    shown = json.loads(out)
    assert shown["edge_id"] == doc["edge_id"] and shown["state"] == "connected"
