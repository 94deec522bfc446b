"""Issue 3 end to end: the official anthropic SDK drives a session whose tools run at a real edge."""

from __future__ import annotations

from typing import Any

import anthropic
import docker
import pytest

from control_plane.server import ControlPlane
from scripted_model import LocalModelServer

pytestmark = pytest.mark.docker


def _text(content: Any) -> str:
    return "".join(getattr(block, "text", "") or "" for block in content or [])


async def test_official_sdk_session_runs_bash_in_a_container_at_the_edge(
    control_plane: ControlPlane,
    model_server: LocalModelServer,
    enroll,
    run_edge,
    docker_client: docker.DockerClient,
) -> None:
    client = anthropic.AsyncAnthropic(
        base_url=control_plane.http_url, api_key=control_plane.admin_key(), max_retries=0
    )
    agent = await client.beta.agents.create(
        name="coder",
        model="claude-sonnet-5-5",
        system="You write and run small programs.",
        tools=[{"type": "agent_toolset_20260401"}],
    )
    environment = await client.beta.environments.create(name="e2e-sdk", config={"type": "self_hosted"})
    edge = await run_edge(await enroll(environment.id))  # the operator's step: enroll an edge
    session = await client.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    assert session.status == "idle"

    stream = await client.beta.sessions.events.stream(session.id, event_deltas=["agent.message"])
    await client.beta.sessions.events.send(
        session.id,
        events=[
            {"type": "user.message", "content": [{"type": "text", "text": "Write a program and run it."}]}
        ],
    )
    seen: list[Any] = []
    async for event in stream:
        seen.append(event)
        if event.type == "session.status_idle" and event.stop_reason.type == "end_turn":
            break
    types = [e.type for e in seen]
    assert "event_delta" in types and "agent.tool_use" in types and "agent.tool_result" in types

    events = [e async for e in client.beta.sessions.events.list(session.id)]
    uses = {e.id: e for e in events if e.type == "agent.tool_use"}
    results = [e for e in events if e.type == "agent.tool_result"]
    bash = [r for r in results if uses[r.tool_use_id].name == "bash"]
    assert bash and not bash[0].is_error
    assert "Hello from the Outpost sandbox!" in _text(bash[0].content)
    final = [e for e in events if e.type == "agent.message"][-1]
    assert "Hello from the Outpost sandbox!" in _text(final.content)
    assert (await client.beta.sessions.retrieve(session.id)).status == "idle"

    # It ran in a real container at the edge: the session's sandbox is there, with the program in it.
    [container] = docker_client.containers.list(
        filters={"label": [f"outpost.edge_id={edge.edge_id}", f"outpost.session_id={session.id}"]}
    )
    code, out = container.exec_run(["cat", "/workspace/hello.py"], user="1000:1000")
    assert code == 0 and b"Outpost sandbox" in out

    await client.beta.sessions.delete(session.id)
    assert not docker_client.containers.list(all=True, filters={"label": f"outpost.session_id={session.id}"})
    await client.close()
