"""No edge, said plainly: a real control plane (SQLite), the official ``anthropic`` SDK pointed at it,
the local Messages-API server scripted to call ``bash``, and a real edge link (the edge's ``Dialer``
+ ``Link`` over gRPC/mTLS, with a fake request handler: no Docker) where one is needed.

* The environment object counts its edges, enrolled and connected, and the SDK's ``BetaEnvironment``
  parses it strictly (the counts are an extra field); with two control-plane processes on one
  store, an edge connected to either counts as connected on both (presence).
* A session whose environment has no connected edge gets one non-fatal ``session.error``
  (``unknown_error``, ``retrying``, ``edge_unavailable``) per outage, its tool call fails after
  ``edge_wait_s`` with a tool error saying why, and the session goes idle, ready for more.
* An edge that connects while a call waits takes the call.
* ``exec`` with no connected edge answers 503 ``edge_unavailable`` at once.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from anthropic.types.beta.beta_environment import BetaEnvironment
from anthropic.types.beta.sessions.beta_managed_agents_session_error_event import (
    BetaManagedAgentsSessionErrorEvent,
)

from control_plane.server import ControlPlane
from edge_agent.enroll import register
from edge_agent.identity import Identity
from scripted_model import LocalModelServer, Turn
from tests.support import eventually
from tests.support.edge_link import (
    api_client,
    control_plane_config,
    make_dialer,
    running_link,
)
from tests.support.edge_link import no_ambient_proxy as no_ambient_proxy

pytestmark = pytest.mark.usefixtures("no_ambient_proxy")


def bash_then_answer(request: Mapping[str, Any]) -> Turn:
    """Every user message is answered by a ``bash`` call; its result by a sentence quoting it."""
    last = request["messages"][-1]["content"]
    results = [b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"]
    if not results:
        return Turn.tool_use("bash", {"command": "echo hi"})
    content = results[-1].get("content")
    text = content if isinstance(content, str) else " ".join(b.get("text", "") for b in content or [])
    return Turn.text(f"the tool said: {text}")


@asynccontextmanager
async def control_planes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int = 1, **config: Any
) -> AsyncIterator[list[ControlPlane]]:
    """``count`` control-plane processes on one store, each with the scripted local model."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "unused")
    async with AsyncExitStack() as stack:
        model = await stack.enter_async_context(LocalModelServer(bash_then_answer))
        settings = control_plane_config(tmp_path, model_base_url=model.base_url, **config)
        yield [await stack.enter_async_context(ControlPlane(settings)) for _ in range(count)]


def sdk(cp: ControlPlane) -> anthropic.AsyncAnthropic:
    # Strict response validation: every reply must fit the SDK's models as they are.
    return anthropic.AsyncAnthropic(
        base_url=cp.http_url, api_key=cp.admin_key(), max_retries=0, _strict_response_validation=True
    )


async def enroll(cp: ControlPlane, environment: str, state_dir: Path) -> Identity:
    async with api_client(cp) as http:
        r = await http.post(f"/v1/environments/{environment}/enrollment_tokens", json={})
        assert r.status_code == 200, r.text
        token = r.json()
    return await register(
        cp.http_url, token["token"], state_dir, name=state_dir.name, ca_fingerprint=token["ca_fingerprint"]
    )


def edge_counts(env: BetaEnvironment) -> Any:
    return (env.model_extra or {}).get("edges")


async def start_session(client: anthropic.AsyncAnthropic, environment: str) -> str:
    agent = await client.beta.agents.create(
        name="coder", model="claude-sonnet-5-5", tools=[{"type": "agent_toolset_20260401"}]
    )
    session = await client.beta.sessions.create(agent=agent.id, environment_id=environment)
    return session.id


async def say(client: anthropic.AsyncAnthropic, session_id: str, text: str = "go") -> None:
    await client.beta.sessions.events.send(
        session_id, events=[{"type": "user.message", "content": [{"type": "text", "text": text}]}]
    )


async def events_of(client: anthropic.AsyncAnthropic, session_id: str) -> list[Any]:
    return [e async for e in client.beta.sessions.events.list(session_id)]


async def wait_idle(
    client: anthropic.AsyncAnthropic, session_id: str, turns: int, timeout_s: float
) -> list[Any]:
    """The session's log once ``turns`` turns ended (``end_turn``)."""
    found: list[Any] = []

    async def done() -> bool:
        found[:] = await events_of(client, session_id)
        ended = [e for e in found if e.type == "session.status_idle" and e.stop_reason.type == "end_turn"]
        return len(ended) >= turns

    await eventually(done, timeout_s, f"{turns} finished turn(s) in {session_id}")
    return found


def text_of(event: Any) -> str:
    return "".join(getattr(block, "text", "") for block in event.content or [])


def edge_errors(log: list[Any]) -> list[BetaManagedAgentsSessionErrorEvent]:
    return [e for e in log if isinstance(e, BetaManagedAgentsSessionErrorEvent)]


async def test_the_environment_counts_its_edges_on_every_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with control_planes(tmp_path, monkeypatch, count=2) as (a, b):
        client_a, client_b = sdk(a), sdk(b)
        created = await client_a.beta.environments.create(name="pool")
        assert isinstance(created, BetaEnvironment)
        assert edge_counts(created) == {"enrolled": 0, "connected": 0}
        BetaEnvironment.model_validate(created.model_dump(mode="json"))  # strict, extras included

        identity = await enroll(a, created.id, tmp_path / "edge1")
        await enroll(a, created.id, tmp_path / "edge2")  # enrolled, never started
        env = await client_b.beta.environments.retrieve(created.id)
        assert edge_counts(env) == {"enrolled": 2, "connected": 0}

        async with running_link(identity, make_dialer(identity, tmp_path / "edge1")):
            # The edge's tunnel is on A only; B learns of it from the store's presence records.
            async def counted(client: anthropic.AsyncAnthropic) -> bool:
                found = await client.beta.environments.retrieve(created.id)
                return bool(edge_counts(found) == {"enrolled": 2, "connected": 1})

            await eventually(lambda: counted(client_a), 15, "A counting the edge")
            await eventually(lambda: counted(client_b), 15, "B counting the edge held by A")
            assert a.registry.get(identity.edge_id) is not None and b.registry.get(identity.edge_id) is None
            listed = [e async for e in client_b.beta.environments.list()]
            assert [(e.id, edge_counts(e)) for e in listed] == [(created.id, {"enrolled": 2, "connected": 1})]

            # exec on B: no edge of the environment here, and the message says where it is.
            async with api_client(b) as http:
                r = await http.post(
                    "/v1/sandboxes/exec",
                    json={"environment_id": created.id, "session_id": "s1", "tool": "bash", "input": {}},
                )
            assert r.status_code == 503, r.text
            assert "connected to another process" in r.json()["error"]["message"]
            # exec on A runs on the edge.
            async with api_client(a) as http:
                r = await http.post(
                    "/v1/sandboxes/exec",
                    json={"environment_id": created.id, "session_id": "s1", "tool": "bash", "input": {}},
                )
            assert r.status_code == 200, r.text
            assert r.json()["content"] == [{"type": "text", "text": "fake bash ran"}]

        async with api_client(a) as http:  # the edge is revoked: it no longer counts as enrolled
            r = await http.post(f"/v1/edges/{identity.edge_id}/revoke", json={})
            assert r.status_code == 200, r.text

        async def gone() -> bool:
            found = await client_b.beta.environments.retrieve(created.id)
            return bool(edge_counts(found) == {"enrolled": 1, "connected": 0})

        await eventually(gone, 15, "the edge counted neither enrolled nor connected")


async def test_exec_without_a_connected_edge_fails_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # edge_wait_s at its default (30 s): exec must not wait it.
    async with control_planes(tmp_path, monkeypatch) as (cp,):
        env = await sdk(cp).beta.environments.create(name="empty")
        body = {"environment_id": env.id, "session_id": "s1", "tool": "bash", "input": {"command": "ls"}}
        async with api_client(cp) as http:
            started = time.monotonic()
            r = await http.post("/v1/sandboxes/exec", json=body)
            took = time.monotonic() - started
            print(f"\nexec with no edge enrolled answered {r.status_code} in {took * 1000:.0f} ms")
            assert r.status_code == 503, r.text
            assert took < 5.0
            error = r.json()["error"]
            assert error["type"] == "api_error"
            assert error["details"] == {"error_code": "edge_unavailable", "environment_id": env.id}
            assert error["message"].startswith(
                f"no edge of environment {env.id} is connected: none is enrolled"
            )
            assert "\n" not in error["message"]

            await enroll(cp, env.id, tmp_path / "edge1")  # enrolled, not running
            started = time.monotonic()
            r = await http.post("/v1/sandboxes/exec", json=body)
            took = time.monotonic() - started
            print(
                f"exec with an enrolled edge not connected answered {r.status_code} in {took * 1000:.0f} ms"
            )
            assert r.status_code == 503 and took < 5.0
            assert r.json()["error"]["message"] == (
                f"no edge of environment {env.id} is connected (1 enrolled, none with a tunnel up: "
                "see outpost-control edges list)"
            )

        # The SDK's client reads it as a ServiceUnavailableError with the error code.
        client = anthropic.AsyncAnthropic(base_url=cp.http_url, api_key=cp.admin_key(), max_retries=0)
        with pytest.raises(anthropic.ServiceUnavailableError) as caught:
            await client.post("/v1/sandboxes/exec", cast_to=httpx.Response, body=body)
        assert caught.value.status_code == 503
        assert caught.value.error_code == "edge_unavailable"


async def test_a_session_without_an_edge_is_told_once_and_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # edge_wait_s of 1 s instead of 30: the test checks that a call gives up after the wait and
    # what the session sees then, not the default's length (which would add a minute here).
    async with control_planes(tmp_path, monkeypatch, edge_wait_s=1.0) as (cp,):
        client = sdk(cp)
        env = await client.beta.environments.create(name="no-edge")
        await enroll(cp, env.id, tmp_path / "edge1")  # enrolled, never started
        session_id = await start_session(client, env.id)

        await say(client, session_id)
        log = await wait_idle(client, session_id, 1, 30)
        [error] = edge_errors(log)
        assert error.error.type == "unknown_error"
        assert error.error.retry_status.type == "retrying"
        assert error.error.message.startswith(
            f"No edge of environment {env.id} is connected: none of its 1 enrolled edge(s) has a tunnel up."
        )
        assert "wait up to 1 s" in error.error.message
        assert (error.error.model_extra or {}).get("edge_unavailable") == {
            "environment_id": env.id,
            "edges_enrolled": 1,
            "edges_connected": 0,
            "edge_wait_s": 1.0,
        }
        [result] = [e for e in log if e.type == "agent.tool_result"]
        assert result.is_error
        assert f"The sandbox is unavailable: no edge of environment {env.id} is connected" in text_of(result)
        assert log.index(error) < log.index(result)
        [answer] = [e for e in log if e.type == "agent.message"]
        assert "no edge of environment" in text_of(answer)  # the model was told, and answered
        assert (await client.beta.sessions.retrieve(session_id)).status == "idle"

        # The next message runs a turn as usual; the outage goes on, and is not told again.
        await say(client, session_id, "again")
        log = await wait_idle(client, session_id, 2, 30)
        assert len(edge_errors(log)) == 1
        assert [e.is_error for e in log if e.type == "agent.tool_result"] == [True, True]
        assert (await client.beta.sessions.retrieve(session_id)).status == "idle"


async def test_an_edge_that_connects_during_the_wait_takes_the_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # edge_wait_s at its default (30 s): the edge connects well within it.
    async with control_planes(tmp_path, monkeypatch) as (cp,):
        client = sdk(cp)
        env = await client.beta.environments.create(name="late-edge")
        identity = await enroll(cp, env.id, tmp_path / "edge1")
        session_id = await start_session(client, env.id)
        await say(client, session_id)

        async def told() -> bool:
            return bool(edge_errors(await events_of(client, session_id)))

        await eventually(told, 15, "the session told it has no edge")
        async with running_link(identity, make_dialer(identity, tmp_path / "edge1")):
            log = await wait_idle(client, session_id, 1, 30)
            [result] = [e for e in log if e.type == "agent.tool_result"]
            assert not result.is_error and text_of(result) == "fake bash ran"
            assert len(edge_errors(log)) == 1

            # The outage is over: the next turn runs on the edge and says nothing of it.
            await say(client, session_id, "again")
            log = await wait_idle(client, session_id, 2, 30)
            assert len(edge_errors(log)) == 1

        # The edge goes away: a new outage, told again at the next call; the edge comes back
        # during that call's wait and takes it.
        async def disconnected() -> bool:
            found = await client.beta.environments.retrieve(env.id)
            return bool(edge_counts(found) == {"enrolled": 1, "connected": 0})

        await eventually(disconnected, 15, "the edge counted as disconnected")
        await say(client, session_id, "and again")

        async def told_again() -> bool:
            return len(edge_errors(await events_of(client, session_id))) == 2

        await eventually(told_again, 15, "the session told of the second outage")
        async with running_link(identity, make_dialer(identity, tmp_path / "edge1")):
            log = await wait_idle(client, session_id, 3, 30)
        assert len(edge_errors(log)) == 2
        assert [e.is_error for e in log if e.type == "agent.tool_result"] == [False, False, False]
