"""Many edges serve one environment: a session sticks to the edge holding its sandbox, and when that
edge dies (SIGKILL, not restarted) the next tool call provisions on another edge of the
environment, with a clear ``session.error`` in the session log naming both edges.

Edge A runs as a subprocess (so it can be killed); edge B joins in this process once the first
tool call has run on A. The model waits for the test before asking for the second call."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anthropic
import docker
import httpx
import pytest

from control_plane.server import ControlPlane
from scripted_model import LocalModelServer, Turn
from scripted_model.responders import tool_result_text, tool_results_since_prompt
from tests.support import eventually
from tests.support.e2e import NAME_PREFIX

pytestmark = pytest.mark.docker

WRITE = "echo from-a > /workspace/note && echo wrote"
READ = "cat /workspace/note 2>/dev/null || echo no-note; echo pwd=$(pwd)"


class GatedResponder:
    """Call 1 writes a file; call 2 (once ``go`` is set) reads it; then the turn ends."""

    def __init__(self) -> None:
        self.go = asyncio.Event()

    async def __call__(self, request: Mapping[str, Any]) -> Turn:
        results = tool_results_since_prompt(request)
        if not results:
            return Turn.tool_use("bash", {"command": WRITE})
        if len(results) == 1:
            await self.go.wait()
            return Turn.tool_use("bash", {"command": READ})
        return Turn.text(f"Second call said: {tool_result_text(results[-1])}")


@pytest.fixture
def responder() -> GatedResponder:
    return GatedResponder()


@pytest.fixture
async def model_server(responder: GatedResponder) -> AsyncIterator[LocalModelServer]:
    async with LocalModelServer(responder) as server:
        yield server


@pytest.fixture
def control_plane_overrides() -> dict[str, Any]:
    return {"reconnect_grace_s": 2.0, "edge_wait_s": 5.0}


async def test_a_dead_edges_session_moves_to_another_edge_with_an_event(
    control_plane: ControlPlane,
    responder: GatedResponder,
    environment: str,
    enroll: Any,
    run_edge: Any,
    edge_processes: Any,
    docker_client: docker.DockerClient,
) -> None:
    client = anthropic.AsyncAnthropic(
        base_url=control_plane.http_url, api_key=control_plane.admin_key(), max_retries=0
    )
    edge_a = edge_processes(await enroll(environment))
    edge_a_id = edge_a.edge.identity.edge_id

    async def a_connected() -> bool:
        return control_plane.registry.get(edge_a_id) is not None

    await eventually(a_connected, 30, "edge A connected")
    agent = await client.beta.agents.create(
        name="mover", model="claude-sonnet-5-5", tools=[{"type": "agent_toolset_20260401"}]
    )
    session = await client.beta.sessions.create(agent=agent.id, environment_id=environment)
    await client.beta.sessions.events.send(
        session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "go"}]}]
    )

    async def events() -> list[Any]:
        return [e async for e in client.beta.sessions.events.list(session.id)]

    async def first_result() -> bool:
        return any(e.type == "agent.tool_result" for e in await events())

    await eventually(first_result, 60, "the first tool result (on edge A)")
    assert control_plane.gateway.edge_for_session(session.id) == edge_a_id
    assert control_plane.store is not None
    assert await control_plane.store.get_sandbox_edge(session.id) == edge_a_id

    # A second edge joins the environment. Its own name prefix stands for another host: edges on
    # one Docker host would share the session's workspace volume.
    # No warm pool (as in conftest): the test finds the session's container by its label.
    sandbox = {"name_prefix": NAME_PREFIX + "-b", "warm_pool_size": 0}
    edge_b = await run_edge(await enroll(environment, extra={"sandbox": sandbox}))
    await asyncio.to_thread(edge_a.kill9)  # edge A dies for good
    responder.go.set()

    async def idle() -> bool:
        return any(
            e.type == "session.status_idle" and e.stop_reason.type == "end_turn" for e in await events()
        )

    await eventually(idle, 90, "the session to finish on edge B")
    log = await events()
    errors = [e for e in log if e.type == "session.error"]
    assert len(errors) == 1, errors
    error = errors[0].error
    assert error.type == "unknown_error" and error.retry_status.type == "retrying"
    moved = error.model_extra["sandbox_moved"] if error.model_extra else None
    assert moved == {
        "from_edge_id": edge_a_id,
        "to_edge_id": edge_b.edge_id,
        "reason": f"edge {edge_a_id} did not come back within 2 s",
    }
    results = [e for e in log if e.type == "agent.tool_result"]
    assert len(results) == 2 and not any(r.is_error for r in results)
    second = "".join(getattr(block, "text", "") for block in results[1].content)
    assert "sandbox was replaced" in second and "no-note" in second and "pwd=/workspace" in second
    assert log.index(errors[0]) == log.index(results[1]) - 1

    # The workspace the session now uses is edge B's; the placement follows it.
    assert await control_plane.store.get_sandbox_edge(session.id) == edge_b.edge_id
    [container] = docker_client.containers.list(
        filters={"label": [f"outpost.edge_id={edge_b.edge_id}", f"outpost.session_id={session.id}"]}
    )
    assert container.status == "running"

    async with httpx.AsyncClient(base_url=control_plane.http_url) as http:
        metrics = await http.get("/metrics", headers={"authorization": f"Bearer {control_plane.admin_key()}"})
    assert f'outpost_sandbox_moves_total{{from_edge_id="{edge_a_id}"}} 1' in metrics.text

    await client.beta.sessions.delete(session.id)
    assert await control_plane.store.get_sandbox_edge(session.id) is None
    assert not docker_client.containers.list(
        all=True, filters={"label": [f"outpost.edge_id={edge_b.edge_id}", f"outpost.session_id={session.id}"]}
    )
    await client.close()
