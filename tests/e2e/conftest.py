"""End-to-end fixtures: a real control plane (SQLite, gRPC mTLS on loopback, uvicorn) and real edges
(in-process or as subprocesses) running real Docker sandboxes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest
import yaml

from control_plane.config import ControlPlaneConfig
from control_plane.harness import HarnessConfig
from control_plane.server import ControlPlane
from edge_agent.daemon import EdgeAgent
from edge_agent.enroll import register
from scripted_model import DemoResponder, LocalModelServer
from tests.support import REPO
from tests.support.docker_engine import destroy_all_sandboxes
from tests.support.e2e import NAME_PREFIX, SANDBOX_IMAGE, Api, EnrolledEdge


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    client = docker.from_env()
    if not client.images.list(name=SANDBOX_IMAGE):
        subprocess.run(["bash", str(REPO / "packaging/sandbox/build.sh")], check=True)
    yield client
    client.close()


@pytest.fixture(scope="session", autouse=True)
def no_leaks(docker_client: docker.DockerClient) -> Iterator[None]:
    """After the e2e suite, no container or volume of ours may be left behind."""
    yield
    containers = [
        c
        for c in docker_client.containers.list(all=True, filters={"label": "outpost.managed=1"})
        if c.name.startswith(NAME_PREFIX)
    ]
    volumes = [
        v
        for v in docker_client.volumes.list(filters={"label": "outpost.managed=1"})
        if v.name.startswith(NAME_PREFIX)
    ]
    for c in containers:
        c.remove(force=True)
    for v in volumes:
        v.remove(force=True)
    assert not containers, f"containers left behind: {[c.name for c in containers]}"
    assert not volumes, f"volumes left behind: {[v.name for v in volumes]}"


@pytest.fixture
async def model_server() -> AsyncIterator[LocalModelServer]:
    """The local Messages-API server with the demo's responder (write a program, run it, report)."""
    async with LocalModelServer(DemoResponder()) as server:
        yield server


@pytest.fixture
def control_plane_overrides() -> dict[str, Any]:
    """Settings a test module changes in the ``control_plane`` fixture's config (override it)."""
    return {}


@pytest.fixture
async def control_plane(
    tmp_path: Path,
    model_server: LocalModelServer,
    monkeypatch: pytest.MonkeyPatch,
    control_plane_overrides: dict[str, Any],
) -> AsyncIterator[ControlPlane]:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "e2e-model-key")
    settings: dict[str, Any] = {
        "model_base_url": model_server.base_url,
        "harness": HarnessConfig(lease_ttl_s=5, model_backoff_initial_s=0.1),
        "data_dir": tmp_path / "cp",
        "http_port": 0,
        "tunnel_port": 0,
        # Short heartbeats, leases and grace periods: these tests see in seconds what the defaults
        # show in a minute. The defaults themselves: test_shipped_defaults.py, test_soak_smoke.py.
        "heartbeat_interval_s": 1.0,
        "heartbeat_timeout_s": 5.0,
        "drain_grace_s": 2.0,
        "reconnect_grace_s": 20.0,
        "edge_wait_s": 2.0,
    }
    config = ControlPlaneConfig(**{**settings, **control_plane_overrides})
    async with ControlPlane(config) as cp:
        yield cp


@pytest.fixture
async def api(control_plane: ControlPlane) -> AsyncIterator[Api]:
    async with httpx.AsyncClient(
        base_url=control_plane.http_url,
        headers={"authorization": f"Bearer {control_plane.admin_key()}"},
        timeout=120,
    ) as client:
        yield Api(client)


@pytest.fixture
async def environment(api: Api) -> str:
    env = await api.post("/v1/environments", {"name": "e2e", "config": {"type": "self_hosted"}})
    return str(env["id"])


@pytest.fixture
def enroll(control_plane: ControlPlane, api: Api, tmp_path: Path) -> Callable[..., Awaitable[EnrolledEdge]]:
    counter = 0

    async def _enroll(
        environment_id: str,
        *,
        policy: dict[str, Any] | None = None,
        idle_pause_s: float = 60.0,
        extra: dict[str, Any] | None = None,
    ) -> EnrolledEdge:
        nonlocal counter
        counter += 1
        state_dir = tmp_path / f"edge{counter}"
        token = await api.post(f"/v1/environments/{environment_id}/enrollment_tokens", {"ttl_seconds": 600})
        identity = await register(
            control_plane.http_url,
            token["token"],
            state_dir,
            name=f"e2e-edge-{counter}",
            ca_fingerprint=token["ca_fingerprint"],
        )
        config = {
            "control_plane": {"tunnel_address": control_plane.tunnel_address},
            "state_dir": str(state_dir),
            "name": f"e2e-edge-{counter}",
            # No warm pool: these tests find a session's container by its session label, which a
            # claimed pool member never has (tests/integration/sandbox/test_warm_pool_docker.py).
            "sandbox": {"idle_pause_s": idle_pause_s, "name_prefix": NAME_PREFIX, "warm_pool_size": 0},
            "connection": {  # short timings, as in the control_plane fixture (see there why)
                "heartbeat_interval_s": 1.0,
                "heartbeat_timeout_s": 5.0,
                "backoff_initial_s": 0.2,
                "backoff_max_s": 1.0,
                "drain_grace_s": 10.0,
            },
            "logging": {"level": "DEBUG"},
        }
        if policy is not None:
            config["policy"] = policy
        config.update(extra or {})
        config_path = state_dir / "config.yaml"
        config_path.write_text(yaml.safe_dump(config))
        return EnrolledEdge(identity, state_dir, config_path)

    return _enroll


@pytest.fixture
async def run_edge(
    docker_client: docker.DockerClient,
) -> AsyncIterator[Callable[[EnrolledEdge], Awaitable[EdgeAgent]]]:
    """Start an in-process edge; it is closed and its sandboxes removed at teardown."""
    agents: list[EdgeAgent] = []

    async def _run(edge: EnrolledEdge) -> EdgeAgent:
        agent = EdgeAgent(edge.config())
        await agent.start()
        agents.append(agent)
        assert await agent.wait_connected(20), "edge did not connect"
        return agent

    yield _run
    for agent in agents:
        if agent.manager is not None:
            await destroy_all_sandboxes(agent.manager)
        await agent.close()


class EdgeProcess:
    """An edge agent in its own process, so it can be killed with SIGKILL or SIGTERM."""

    def __init__(self, edge: EnrolledEdge) -> None:
        self.edge = edge
        self.log_path = edge.state_dir / f"edge-{time.monotonic_ns()}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "edge_agent.cli", "run", "--config", str(self.edge.config_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture
def edge_processes(docker_client: docker.DockerClient) -> Iterator[Callable[[EnrolledEdge], EdgeProcess]]:
    procs: list[EdgeProcess] = []

    def _start(edge: EnrolledEdge) -> EdgeProcess:
        p = EdgeProcess(edge)
        p.start()
        procs.append(p)
        return p

    yield _start
    edge_ids = set()
    for p in procs:
        edge_ids.add(p.edge.identity.edge_id)
        if p.proc is not None and p.proc.poll() is None:
            p.proc.kill()
            p.proc.wait(10)
    for edge_id in edge_ids:
        for c in docker_client.containers.list(all=True, filters={"label": f"outpost.edge_id={edge_id}"}):
            c.remove(force=True)
        for v in docker_client.volumes.list(filters={"label": f"outpost.edge_id={edge_id}"}):
            v.remove(force=True)
