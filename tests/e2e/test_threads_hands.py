"""Hands of a multiagent session, end to end (real edge, real Docker sandboxes):

* "brains hand hands to each other" (``sandbox: "shared"``, the default): the subagent works in the
  sandbox the coordinator used, and sees the file the coordinator wrote;
* "one brain, many hands" (``sandbox: "own"``): the subagent gets a container of its own (keyed
  ``<session id>.<thread id>`` at the edge), where the coordinator's file is not.

Both sandboxes go when the session is deleted."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import anthropic
import docker
import pytest

from control_plane.server import ControlPlane
from scripted_model import LocalModelServer, ToolUse, Turn
from scripted_model.responders import tool_result_text, tool_results_since_prompt
from tests.support import eventually

pytestmark = pytest.mark.docker

MODEL = "claude-hands-test"


class Hands:
    """The lead writes a note with bash, then asks the helper (in ``mode``) to read it."""

    mode = "shared"

    def __call__(self, request: Mapping[str, Any]) -> Turn:
        system = " ".join(b.get("text", "") for b in request.get("system") or [])
        results = tool_results_since_prompt(request)
        if "helper" in system:
            if not results:
                return Turn((ToolUse("bash", {"command": "cat /workspace/note.txt"}),))
            return Turn.text("SAW: " + tool_result_text(results[-1]))
        if not results:
            return Turn((ToolUse("bash", {"command": "echo from-the-lead > /workspace/note.txt"}),))
        if len(results) == 1 and "call_agent" not in str(request["messages"][-2]):
            return Turn((ToolUse("call_agent_helper", {"message": "Read the note.", "sandbox": self.mode}),))
        return Turn.text("REPORT: " + tool_result_text(results[-1]))


@pytest.fixture
async def model_server() -> AsyncIterator[LocalModelServer]:
    async with LocalModelServer(Hands()) as server:
        yield server


@pytest.mark.parametrize("mode", ["shared", "own"])
async def test_a_subagent_works_with_shared_or_own_hands(
    mode: str,
    control_plane: ControlPlane,
    model_server: LocalModelServer,
    enroll: Any,
    run_edge: Any,
    docker_client: docker.DockerClient,
) -> None:
    Hands.mode = mode
    client = anthropic.AsyncAnthropic(base_url=control_plane.http_url, api_key=control_plane.admin_key())
    toolset = [{"type": "agent_toolset_20260401"}]
    helper = await client.beta.agents.create(
        name="helper", model=MODEL, system="You are the helper.", tools=toolset
    )
    lead = await client.beta.agents.create(
        name="lead",
        model=MODEL,
        system="You lead.",
        tools=toolset,
        multiagent={"type": "coordinator", "agents": [helper.id]},
    )
    environment = await client.beta.environments.create(name=f"hands-{mode}", config={"type": "self_hosted"})
    await run_edge(await enroll(environment.id))
    session = await client.beta.sessions.create(agent=lead.id, environment_id=environment.id)
    await client.beta.sessions.events.send(
        session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "Go."}]}]
    )
    events: list[Any] = []

    async def idle() -> bool:
        events[:] = [e async for e in client.beta.sessions.events.list(session.id)]
        return any(e.type == "session.status_idle" for e in events)

    await eventually(idle, 120, "the session to finish")
    [thread] = [t async for t in client.beta.sessions.threads.list(session.id) if t.parent_thread_id]
    report = [e for e in events if e.type == "agent.message" and not getattr(e, "session_thread_id", None)][
        -1
    ]
    containers = {
        c.labels["outpost.session_id"]
        for c in docker_client.containers.list(filters={"label": "outpost.managed=1"})
        if c.labels.get("outpost.session_id", "").startswith(session.id)
    }
    if mode == "shared":
        assert "SAW: from-the-lead" in report.content[0].text
        assert containers == {session.id}
    else:
        assert "from-the-lead" not in report.content[0].text  # a fresh workspace: no note there
        assert containers == {session.id, f"{session.id}.{thread.id}"}

    await client.beta.sessions.delete(session.id)

    def gone() -> bool:
        left = docker_client.containers.list(all=True, filters={"label": "outpost.managed=1"})
        return not [c for c in left if c.labels.get("outpost.session_id", "").startswith(session.id)]

    await eventually(gone, 30, "the sandboxes to go with the session")
    await client.close()
