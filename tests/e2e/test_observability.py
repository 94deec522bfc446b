"""Observability end to end: the edge's /readyz follows the tunnel, /metrics on both sides count a
tool call, and ``outpost-edge doctor`` passes against a live control plane and says what to fix
against a stopped one."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from control_plane.server import ControlPlane
from edge_agent.daemon import EdgeAgent
from tests.e2e.conftest import REPO, Api, EnrolledEdge, text_of

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
        assert "outpost_edge_tunnel_up 1" in text
        assert "outpost_edge_tunnel_reconnects_total 1" in text


class SilentRelay:
    """A TCP relay between the edge and the control plane's tunnel port that can go silent the way
    a lost network path does: connections already open stay open but carry nothing (no FIN, no
    RST), new ones are refused. ``restore`` brings the path back for new connections."""

    def __init__(self, target_port: int) -> None:
        self._target_port = target_port
        self._up = asyncio.Event()
        self._up.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    async def __aenter__(self) -> SilentRelay:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def go_silent(self) -> None:
        self._up.clear()

    def restore(self) -> None:
        self._up.set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self._up.is_set():
            writer.close()  # nothing answers any more
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._target_port)
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(src, dst))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                await self._up.wait()  # silent: hold every byte, close nothing
                dst.write(data)
                await dst.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            if self._up.is_set():
                dst.close()


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
                "connection": {},  # the defaults: heartbeats 3 s / 9 s, backoff 1 s up to 8 s
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


async def test_metrics_on_both_sides_count_a_tool_call(
    control_plane: ControlPlane, api: Api, environment: str, observed_edge: EdgeAgent
) -> None:
    assert observed_edge.observe is not None
    result = await api.exec(environment, "s-metrics", "bash", {"command": "echo hi"})
    assert text_of(result).strip() == "hi"

    edge_text = await _metrics(f"{observed_edge.observe.url}/metrics")
    assert 'outpost_edge_tool_calls_total{tool="bash",outcome="ok"} 1' in edge_text
    assert 'outpost_edge_tool_call_duration_seconds_count{tool="bash",outcome="ok"} 1' in edge_text
    assert 'outpost_edge_tool_call_duration_seconds_bucket{tool="bash",outcome="ok",le="+Inf"} 1' in edge_text
    assert "outpost_edge_sandboxes_live 1" in edge_text
    assert "outpost_edge_tunnel_up 1" in edge_text

    edge_id = observed_edge.edge_id
    cp_url = f"{control_plane.http_url}/metrics"
    async with httpx.AsyncClient(timeout=5.0) as client:
        assert (await client.get(cp_url)).status_code == 401  # an API key, like the other routes
    cp_text = await _metrics(cp_url, {"authorization": f"Bearer {control_plane.admin_key()}"})
    assert f'outpost_tool_calls_total{{edge_id="{edge_id}",tool="bash",outcome="ok"}} 1' in cp_text
    assert 'outpost_tool_call_duration_seconds_count{tool="bash",outcome="ok"} 1' in cp_text
    assert f'outpost_edge_connected{{edge_id="{edge_id}",environment_id="{environment}"}} 1' in cp_text
    assert f'outpost_edge_connections_total{{edge_id="{edge_id}"}} 1' in cp_text
    assert f'outpost_edge_requests_in_flight{{edge_id="{edge_id}"}} 0' in cp_text
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
