"""Three control-plane replicas on one store: ``kill -9`` of the replica running a turn, mid tool call.

Three ``outpost-control serve`` processes share a store (SQLite, or PostgreSQL) and a data dir
(CA, admin key). The edge
(in the test process) is given all three addresses; the replica it connects to holds its tunnel
and so runs the session (the brain follows the hands). The user's message goes in through another
replica, and the client's stream is open on the third, as behind a load balancer. While the first
bash call runs, the replica running the turn is SIGKILLed: the edge dials another replica, the
session's lease expires and the replica now holding the tunnel finishes the session. Each tool
call ran once (counters in the workspace), no finished model turn was requested twice, and the
stream on the third replica delivered every event of the log, in order.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import docker
import httpx
import pytest
import yaml

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
from tests.support.pg import PG_URL, drop_schema, new_schema, pg_config

pytestmark = pytest.mark.docker


class Replica(SharedStoreControlPlane):
    def __init__(
        self, workdir: Path, name: str, data_dir: Path, model_url: str, store: dict[str, Any]
    ) -> None:
        super().__init__(workdir, name, data_dir, model_url)
        settings = yaml.safe_load(self.config.read_text())
        self.config.write_text(yaml.safe_dump(settings | store))


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """The replicas' shared store settings: SQLite in their shared data dir, or a schema of the
    test PostgreSQL server (``scripts/setup.sh``), dropped afterwards."""
    if request.param == "sqlite":
        yield {}
        return
    schema = new_schema()
    config = pg_config(schema)
    settings: dict[str, Any] = {"store_url": PG_URL, "store_schema": schema}
    if config.password_file is not None:
        settings["store_password_file"] = str(config.password_file)
    try:
        yield settings
    finally:
        asyncio.run(drop_schema(schema))


# Three control-plane processes, a kill -9 and a lease expiry, each waited on with its own deadline
# (up to 120 s for the stream); on PostgreSQL as well.
@pytest.mark.timeout(600)
async def test_kill9_of_the_replica_running_a_turn_mid_tool_call(
    tmp_path: Path, docker_client: docker.DockerClient, store: dict[str, Any]
) -> None:
    async with LocalModelServer(two_slow_calls) as model:
        data_dir = tmp_path / "cp-data"
        replicas = [Replica(tmp_path, f"cp-{i}", data_dir, model.base_url, store) for i in range(3)]
        edge: EdgeAgent | None = None
        clients: list[anthropic.AsyncAnthropic] = []
        try:
            replicas[0].start()
            await replicas[0].wait_up()  # the first creates the store, CA and admin key
            for replica in replicas[1:]:
                replica.start()
            for replica in replicas[1:]:
                await replica.wait_up()
            key = (data_dir / "admin-api-key").read_text().strip()
            clients = [anthropic.AsyncAnthropic(base_url=r.url, api_key=key, max_retries=3) for r in replicas]
            agent = await clients[0].beta.agents.create(
                name="replicas", model="claude-sonnet-5-5", tools=[{"type": "agent_toolset_20260401"}]
            )
            env = await clients[1].beta.environments.create(name="replicas", config={"type": "self_hosted"})
            async with httpx.AsyncClient(
                base_url=replicas[2].url, headers={"authorization": f"Bearer {key}"}
            ) as http:
                token = (await http.post(f"/v1/environments/{env.id}/enrollment_tokens", json={})).json()
            identity = await register(
                replicas[0].url,
                token["token"],
                tmp_path / "edge",
                name="replicas-edge",
                ca_fingerprint=token["ca_fingerprint"],
            )
            edge = EdgeAgent(
                EdgeConfig.model_validate(
                    {
                        "state_dir": str(tmp_path / "edge"),
                        "control_plane": {
                            "addresses": [
                                {"tunnel_address": r.tunnel_address, "url": r.url} for r in replicas
                            ]
                        },
                        # no warm pool: the test finds the session's container by its label
                        "sandbox": {"name_prefix": NAME_PREFIX, "warm_pool_size": 0},
                        # The replicas' heartbeats (1 s / 5 s, SharedStoreControlPlane) and a quick
                        # backoff: the edge finds a live replica within seconds of the kill.
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
            running = edge.dialer.endpoint_index  # this replica holds the tunnel: it runs the turn
            entry, watcher = (running + 1) % 3, (running + 2) % 3

            session = await clients[entry].beta.sessions.create(agent=agent.id, environment_id=env.id)
            seen: list[Any] = []
            stream_open = asyncio.Event()

            async def watch() -> None:
                # The call returns with the response's headers, which the server sends once the
                # stream has subscribed to the session's events (EventStream.open): from then on
                # nothing appended is missed.
                stream = await clients[watcher].beta.sessions.events.stream(session.id)
                stream_open.set()
                async with stream:
                    async for event in stream:
                        seen.append(event)
                        if event.type == "session.status_idle" and event.stop_reason.type == "end_turn":
                            return

            watching = asyncio.create_task(watch())
            await asyncio.wait_for(stream_open.wait(), 30)  # open before the message is sent
            await clients[entry].beta.sessions.events.send(
                session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "go"}]}]
            )

            async def first_tool_running() -> bool:
                return any(
                    e.type == "agent.tool_use" for e in await session_events(clients[entry], session.id)
                )

            await eventually(first_tool_running, 30, "first tool_use")
            await eventually(
                lambda: exists_in_session_sandbox(docker_client, session.id, "/workspace/counter1"),
                30,
                "the first bash call running in the sandbox",
            )
            replicas[running].kill9()

            await asyncio.wait_for(watching, 120)
            events = await session_events(clients[watcher], session.id)
            assert edge.dialer.endpoint_index != running  # the edge moved to a live replica
            assert_both_calls_ran_once(events, docker_client, session.id)
            by_stage = Counter(len(tool_results_since_prompt(r.body)) for r in model.requests)
            assert by_stage == Counter({0: 1, 1: 1, 2: 1}), by_stage  # no finished turn re-billed
            # The stream on the third replica delivered every event of the log, in log order.
            assert [e.id for e in seen] == [e.id for e in events], [e.type for e in seen]
            await clients[watcher].beta.sessions.delete(session.id)
        finally:
            for client in clients:
                await client.close()
            if edge is not None:
                if edge.manager is not None:
                    await destroy_all_sandboxes(edge.manager)
                await edge.close()
            for replica in replicas:
                replica.stop()
