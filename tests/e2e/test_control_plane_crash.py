"""Issue 3: ``kill -9`` of the control plane mid-tool and between model turns loses nothing.

The control plane runs as a real process (``outpost-control serve``) on fixed loopback ports and a
SQLite file; the model server and the edge live in the test process and outlive both crashes.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anthropic
import docker
import httpx
import pytest

from edge_agent.config import EdgeConfig
from edge_agent.daemon import EdgeAgent
from edge_agent.enroll import register
from scripted_model import LocalModelServer, Turn
from scripted_model.responders import tool_results_since_prompt
from scripted_model.script import ToolUse
from tests.support import eventually
from tests.support.control_plane_process import (
    ControlPlaneProcess,
    assert_both_calls_ran_once,
    session_events,
)
from tests.support.docker_engine import destroy_all_sandboxes, exists_in_session_sandbox
from tests.support.e2e import NAME_PREFIX

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
            await eventually(
                lambda: exists_in_session_sandbox(docker_client, session.id, "/workspace/counter1"),
                30,
                "the first bash call running in the sandbox",
            )
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
                    await destroy_all_sandboxes(edge.manager)
                await edge.close()
            cp.stop()


async def _async(value: bool) -> bool:
    return value
