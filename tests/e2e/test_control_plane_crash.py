"""Issue 3: ``kill -9`` of the control plane mid-tool and between model turns loses nothing.

The control plane runs as a real process (``outpost-control serve``) on fixed loopback ports and a
SQLite file; the model server and the edge live in the test process and outlive both crashes.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anthropic
import docker
import httpx
import pytest
import yaml

from control_plane.model import LocalModelServer, Turn
from control_plane.model.responders import tool_results_since_prompt
from control_plane.model.script import ToolUse
from edge_agent.config import EdgeConfig
from edge_agent.daemon import EdgeAgent
from edge_agent.enroll import register
from tests.e2e.conftest import NAME_PREFIX, eventually

pytestmark = pytest.mark.docker

FIRST = "echo run >> /workspace/counter1; sleep 4; echo first done"
SECOND = "echo run >> /workspace/counter2; echo second done"


class CrashScript:
    """Turn 1: a slow bash call (the first crash lands while it runs). Turn 2: held for a while
    (the second crash lands while the model request is in flight). Turn 3: a final answer."""

    def __init__(self) -> None:
        self.hold_second = asyncio.Event()

    async def __call__(self, request: Mapping[str, Any]) -> Turn:
        results = len(tool_results_since_prompt(request))
        if results == 0:
            return Turn([ToolUse("bash", {"command": FIRST})], stop_reason="tool_use")
        if results == 1:
            if not self.hold_second.is_set():
                await asyncio.sleep(30)  # this request is cut by the crash; the retry is not held
            return Turn([ToolUse("bash", {"command": SECOND})], stop_reason="tool_use")
        return Turn.text("Both commands ran.")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ControlPlaneProcess:
    def __init__(self, workdir: Path, model_url: str) -> None:
        self.http_port, self.tunnel_port = _free_port(), _free_port()
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


async def test_kill9_mid_tool_and_between_turns_runs_each_tool_once(
    tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    script = CrashScript()
    async with LocalModelServer(script) as model:
        cp = ControlPlaneProcess(tmp_path, model.base_url)
        cp.start()
        edge: EdgeAgent | None = None
        try:
            await cp.wait_up()
            key = (cp.data_dir / "admin-api-key").read_text().strip()
            client = anthropic.AsyncAnthropic(base_url=cp.url, api_key=key, max_retries=3)
            agent = await client.beta.agents.create(
                name="crash", model="claude-sonnet-5-5", tools=[{"type": "agent_toolset_20260401"}]
            )
            env = await client.beta.environments.create(name="crash", config={"type": "self_hosted"})
            async with httpx.AsyncClient(base_url=cp.url, headers={"authorization": f"Bearer {key}"}) as http:
                token = (await http.post(f"/v1/environments/{env.id}/enrollment_tokens", json={})).json()
            identity = await register(
                cp.url,
                token["token"],
                tmp_path / "edge",
                name="crash-edge",
                ca_fingerprint=token["ca_fingerprint"],
            )
            edge = EdgeAgent(
                EdgeConfig.model_validate(
                    {
                        "state_dir": str(tmp_path / "edge"),
                        "control_plane": {"tunnel_address": f"127.0.0.1:{cp.tunnel_port}"},
                        # no warm pool: the test finds the session's container by its label
                        "sandbox": {"name_prefix": NAME_PREFIX, "warm_pool_size": 0},
                        "connection": {
                            "heartbeat_interval_s": 1,
                            "heartbeat_timeout_s": 5,
                            "backoff_initial_s": 0.2,
                            "backoff_max_s": 1,
                        },
                    }
                ),
                identity=identity,
            )
            await edge.start()
            assert await edge.wait_connected(20)
            session = await client.beta.sessions.create(agent=agent.id, environment_id=env.id)
            await client.beta.sessions.events.send(
                session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "go"}]}]
            )

            # Crash 1: while the first bash call runs in the sandbox (it sleeps 4 s).
            async def first_tool_running() -> bool:
                return any(e.type == "agent.tool_use" for e in await session_events(client, session.id))

            await eventually(first_tool_running, 30, "first tool_use")
            await asyncio.sleep(1.0)
            cp.kill9()
            cp.start()
            await cp.wait_up()

            # Crash 2: while the second model request is in flight (the responder holds it).
            await eventually(lambda: _async(model.request_count >= 2), 60, "second model request")
            cp.kill9()
            script.hold_second.set()
            cp.start()
            await cp.wait_up()

            async def idle() -> bool:
                events = await session_events(client, session.id)
                statuses = [e for e in events if e.type == "session.status_idle"]
                return (
                    bool(statuses)
                    and statuses[-1].stop_reason.type == "end_turn"
                    and events[-1].type.startswith("session.")
                )

            await eventually(idle, 60, "session idle after the crashes")
            assert_both_calls_ran_once(await session_events(client, session.id), docker_client, session.id)

            # No finished model turn was requested twice: group requests by conversation state.
            by_stage = Counter(len(tool_results_since_prompt(r.body)) for r in model.requests)
            assert by_stage[0] == 1, by_stage  # turn 1 finished before crash 1
            assert by_stage[1] == 2, by_stage  # turn 2 was cut by crash 2 and requested again
            assert by_stage[2] == 1, by_stage
            await client.beta.sessions.delete(session.id)
            await client.close()
        finally:
            if edge is not None:
                if edge.manager is not None:
                    await edge.manager.destroy_all_for_tests()
                await edge.close()
            cp.stop()


async def _async(value: bool) -> bool:
    return value
