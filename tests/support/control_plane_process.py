"""Control planes in their own processes (``outpost-control serve``), to kill -9 or SIGTERM them, and
the model script and checks the crash, failover and replica tests share."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anthropic
import docker
import httpx
import yaml

from scripted_model import Turn
from scripted_model.responders import tool_results_since_prompt
from scripted_model.script import ToolUse
from tests.support.waiting import eventually

__all__ = [
    "ControlPlaneProcess",
    "SharedStoreControlPlane",
    "assert_both_calls_ran_once",
    "free_port",
    "session_events",
    "two_slow_calls",
]

_SLOW_FIRST = "echo run >> /workspace/counter1; sleep 4; echo first done"
_SLOW_SECOND = "echo run >> /workspace/counter2; sleep 1; echo second done"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ControlPlaneProcess:
    def __init__(self, workdir: Path, model_url: str) -> None:
        self.http_port, self.tunnel_port = free_port(), free_port()
        self.data_dir = workdir / "cp"
        self.config = workdir / "cp.yaml"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "data_dir": str(self.data_dir),
                    "http_port": self.http_port,
                    "tunnel_port": self.tunnel_port,
                    "model_base_url": model_url,
                    "heartbeat_interval_s": 1.0,
                    "heartbeat_timeout_s": 5.0,
                    "harness": {
                        "lease_ttl_s": 3,
                        "lease_scan_interval_s": 0.5,
                        "model_backoff_initial_s": 0.1,
                    },
                }
            )
        )
        self.log = workdir / "cp.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"http://127.0.0.1:{self.http_port}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "control_plane.cli", "serve", "--config", str(self.config)],
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
            env={**os.environ, "ANTHROPIC_API_KEY": "e2e-model-key"},
        )

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    async def wait_up(self) -> None:
        async def up() -> bool:
            try:
                async with httpx.AsyncClient() as c:
                    return (await c.get(f"{self.url}/healthz")).status_code == 200
            except httpx.HTTPError:
                return False

        await eventually(up, 30, "control plane up")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def assert_both_calls_ran_once(
    events: list[Any], docker_client: docker.DockerClient, session_id: str
) -> None:
    """The session answered after two successful tool calls, and each call ran exactly once: the
    side-effect counters its commands left in the sandbox's workspace."""
    results = [e for e in events if e.type == "agent.tool_result"]
    assert len(results) == 2 and not any(r.is_error for r in results), results
    assert "Both commands ran." in "".join(
        b.text for b in [e for e in events if e.type == "agent.message"][-1].content
    )
    [container] = docker_client.containers.list(filters={"label": f"outpost.session_id={session_id}"})
    for name in ("counter1", "counter2"):
        code, out = container.exec_run(["wc", "-l", f"/workspace/{name}"], user="1000:1000")
        assert code == 0 and out.split()[0] == b"1", (name, out)


async def session_events(client: anthropic.AsyncAnthropic, session_id: str) -> list[Any]:
    return [e async for e in client.beta.sessions.events.list(session_id)]


async def two_slow_calls(request: Mapping[str, Any]) -> Turn:
    results = len(tool_results_since_prompt(request))
    if results == 0:
        return Turn([ToolUse("bash", {"command": _SLOW_FIRST})], stop_reason="tool_use")
    if results == 1:
        return Turn([ToolUse("bash", {"command": _SLOW_SECOND})], stop_reason="tool_use")
    return Turn.text("Both commands ran.")


class SharedStoreControlPlane(ControlPlaneProcess):
    """A control-plane process whose data dir (store, CA, admin key) is shared with others."""

    def __init__(self, workdir: Path, name: str, data_dir: Path, model_url: str) -> None:
        super().__init__(workdir, model_url)
        self.data_dir = data_dir
        self.config = workdir / f"{name}.yaml"
        self.log = workdir / f"{name}.log"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "data_dir": str(data_dir),
                    "http_port": self.http_port,
                    "tunnel_port": self.tunnel_port,
                    "model_base_url": model_url,
                    "heartbeat_interval_s": 1.0,
                    "heartbeat_timeout_s": 5.0,
                    "drain_grace_s": 15.0,
                    "harness": {
                        "lease_ttl_s": 3,
                        "lease_scan_interval_s": 0.5,
                        "model_backoff_initial_s": 0.1,
                        "follow_tunnels": True,
                    },
                }
            )
        )

    @property
    def tunnel_address(self) -> str:
        return f"127.0.0.1:{self.tunnel_port}"
