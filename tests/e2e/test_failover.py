"""Graceful failover: two control-plane processes on one store, one stopped during a session.

Both processes (``outpost-control serve``) share one data dir (SQLite store, CA, admin key) on
distinct loopback ports, with ``harness.follow_tunnels``. The edge (in the test process) knows
both addresses and connects to A. While the first tool call runs, A gets SIGTERM: it refuses new
calls to edges, tells the edge to drain, lets the running call answer, and releases the session's
lease; the edge moves to B at once, and B (which now holds the tunnel) takes the lease and
finishes the session. Every tool call runs once; no finished model turn is requested twice.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from pathlib import Path

import anthropic
import docker
import httpx
import pytest

from edge_agent.config import EdgeConfig
from edge_agent.daemon import EdgeAgent
from edge_agent.enroll import register
from scripted_model import LocalModelServer
from scripted_model.responders import tool_results_since_prompt
from tests.support import eventually
from tests.support.control_plane_process import (
    SharedStoreControlPlane,
    assert_both_calls_ran_once,
    session_events,
    two_slow_calls,
)
from tests.support.docker_engine import destroy_all_sandboxes, exists_in_session_sandbox
from tests.support.e2e import NAME_PREFIX

pytestmark = pytest.mark.docker


async def test_sigterm_of_one_control_plane_moves_edge_and_session(
    tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    async with LocalModelServer(two_slow_calls) as model:
        data_dir = tmp_path / "cp-data"
        cp_a = SharedStoreControlPlane(tmp_path, "cp-a", data_dir, model.base_url)
        cp_b = SharedStoreControlPlane(tmp_path, "cp-b", data_dir, model.base_url)
        edge: EdgeAgent | None = None
        try:
            cp_a.start()
            await cp_a.wait_up()  # A creates the store, CA and admin key; B then shares them
            cp_b.start()
            await cp_b.wait_up()
            key = (data_dir / "admin-api-key").read_text().strip()
            client_a = anthropic.AsyncAnthropic(base_url=cp_a.url, api_key=key, max_retries=3)
            client_b = anthropic.AsyncAnthropic(base_url=cp_b.url, api_key=key, max_retries=3)
            agent = await client_a.beta.agents.create(
                name="failover", model="claude-sonnet-5-5", tools=[{"type": "agent_toolset_20260401"}]
            )
            env = await client_a.beta.environments.create(name="failover", config={"type": "self_hosted"})
            async with httpx.AsyncClient(
                base_url=cp_a.url, headers={"authorization": f"Bearer {key}"}
            ) as http:
                token = (await http.post(f"/v1/environments/{env.id}/enrollment_tokens", json={})).json()
            identity = await register(
                cp_a.url,
                token["token"],
                tmp_path / "edge",
                name="failover-edge",
                ca_fingerprint=token["ca_fingerprint"],
            )
            edge = EdgeAgent(
                EdgeConfig.model_validate(
                    {
                        "state_dir": str(tmp_path / "edge"),
                        "control_plane": {
                            "addresses": [
                                {"tunnel_address": cp_a.tunnel_address, "url": cp_a.url},
                                {"tunnel_address": cp_b.tunnel_address, "url": cp_b.url},
                            ],
                            "address_order": "in_order",  # start on A, the process this test stops
                        },
                        "sandbox": {"name_prefix": NAME_PREFIX},
                        "connection": {
                            "transport": "grpc",
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
            assert edge.dialer.endpoint_index == 0  # on A

            session = await client_a.beta.sessions.create(agent=agent.id, environment_id=env.id)
            await client_a.beta.sessions.events.send(
                session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "go"}]}]
            )

            async def first_tool_running() -> bool:
                return any(e.type == "agent.tool_use" for e in await session_events(client_a, session.id))

            await eventually(first_tool_running, 30, "first tool_use")
            await eventually(
                lambda: exists_in_session_sandbox(docker_client, session.id, "/workspace/counter1"),
                30,
                "the first bash call running in the sandbox",
            )
            assert cp_a.proc is not None
            cp_a.proc.send_signal(signal.SIGTERM)

            async def idle() -> bool:
                events = await session_events(client_b, session.id)
                statuses = [e for e in events if e.type == "session.status_idle"]
                return (
                    bool(statuses)
                    and statuses[-1].stop_reason.type == "end_turn"
                    and events[-1].type.startswith("session.")
                )

            await eventually(idle, 90, "session idle on B")
            assert await asyncio.to_thread(cp_a.proc.wait, 30) == 0, cp_a.log.read_text()

            # The edge moved to B (its second address) and kept its link.
            assert edge.dialer.endpoint_index == 1
            assert edge.link is not None and edge.link.connections >= 2

            assert_both_calls_ran_once(await session_events(client_b, session.id), docker_client, session.id)

            by_stage = Counter(len(tool_results_since_prompt(r.body)) for r in model.requests)
            assert by_stage == Counter({0: 1, 1: 1, 2: 1}), by_stage
            await client_b.beta.sessions.delete(session.id)
            await client_a.close()
            await client_b.close()
        finally:
            if edge is not None:
                if edge.manager is not None:
                    await destroy_all_sandboxes(edge.manager)
                await edge.close()
            cp_a.stop()
            cp_b.stop()
