"""A coordinator sends a follow-up to the subagent thread it started, through the official SDK (a real
control plane on SQLite, the real harness, the local scripted Messages server playing both agents);
a subagent thread's stream carries its own previews; client events naming a thread the session does
not have (or an archived one, for an interrupt) are refused with a 400 naming the field."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anthropic
import pytest

from control_plane.server import ControlPlane
from scripted_model import LocalModelServer, Text, ToolUse, Turn
from scripted_model.responders import last_prompt_text, tool_result_text, tool_results_since_prompt
from tests.support import eventually
from tests.support.api_app import assert_valid
from tests.support.edge_link import control_plane_config
from tests.support.edge_link import no_ambient_proxy as no_ambient_proxy

pytestmark = pytest.mark.usefixtures("no_ambient_proxy")

MODEL = "claude-threads-test"
_THREAD_NOTE = re.compile(r"session_thread_id: (sthr_[0-9a-f]+)")


class Pair:
    """The coordinator delegates the first prompt to the researcher, and follows up in the same
    thread on the second; the researcher says how many briefs its thread has seen."""

    def __init__(self) -> None:
        self.researcher_requests: list[Mapping[str, Any]] = []
        self.release: asyncio.Event | None = None  # set: the researcher waits for it

    async def __call__(self, request: Mapping[str, Any]) -> Turn:
        system = " ".join(b.get("text", "") for b in request.get("system") or [])
        if "researcher" in system:
            self.researcher_requests.append(request)
            if self.release is not None:
                await self.release.wait()
            briefs = sum(m["role"] == "user" for m in request["messages"])
            return Turn.text(f"BRIEFS={briefs}: {last_prompt_text(request)}")
        results = tool_results_since_prompt(request)
        if results:
            return Turn.text("DONE: " + tool_result_text(results[0]))
        if last_prompt_text(request) == "Go.":
            return Turn((ToolUse("call_agent_researcher", {"message": "Capital of France?"}),))
        said = _THREAD_NOTE.findall(json.dumps(request["messages"]))
        follow = {"message": "And its population?", "session_thread_id": said[-1]}
        return Turn((Text("Following up."), ToolUse("call_agent_researcher", follow)))


def sdk(cp: ControlPlane) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        base_url=cp.http_url, api_key=cp.admin_key(), max_retries=0, _strict_response_validation=True
    )


async def pair_session(client: anthropic.AsyncAnthropic) -> str:
    researcher = await client.beta.agents.create(
        name="researcher", model=MODEL, system="You are the researcher."
    )
    lead = await client.beta.agents.create(
        name="lead",
        model=MODEL,
        system="You coordinate.",
        multiagent={"type": "coordinator", "agents": [researcher.id]},
    )
    environment = await client.beta.environments.create(name="pool")
    session = await client.beta.sessions.create(agent=lead.id, environment_id=environment.id)
    return session.id


async def say(client: anthropic.AsyncAnthropic, session_id: str, text: str) -> None:
    await client.beta.sessions.events.send(
        session_id, events=[{"type": "user.message", "content": [{"type": "text", "text": text}]}]
    )


async def idle_events(client: anthropic.AsyncAnthropic, session_id: str, count: int) -> list[Any]:
    events: list[Any] = []

    async def done() -> bool:
        events[:] = [e async for e in client.beta.sessions.events.list(session_id)]
        return sum(e.type == "session.status_idle" for e in events) >= count

    await eventually(done, 30.0, f"{count} idle(s) of {session_id}")
    return events


async def test_a_coordinator_follows_up_in_an_existing_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "unused")
    pair = Pair()
    async with LocalModelServer(pair) as model:
        settings = control_plane_config(tmp_path, model_base_url=model.base_url)
        async with ControlPlane(settings) as cp, sdk(cp) as client:
            session_id = await pair_session(client)
            await say(client, session_id, "Go.")
            await idle_events(client, session_id, 1)
            await say(client, session_id, "More.")
            events = await idle_events(client, session_id, 2)
            for event in events:
                assert_valid(event)
            kinds = [e.type for e in events]
            assert kinds.count("session.thread_created") == 1, kinds  # the follow-up made no thread
            assert kinds.count("agent.thread_message_received") == 4  # 2 briefs in, 2 replies back
            threads = [t async for t in client.beta.sessions.threads.list(session_id)]
            assert len(threads) == 2 and threads[1].status == "idle"
            # the researcher's second request holds its whole thread: the first brief and answer
            assert len(pair.researcher_requests) == 2
            second = json.dumps(pair.researcher_requests[1]["messages"])
            assert "Capital of France?" in second and "And its population?" in second
            final = [
                e for e in events if e.type == "agent.message" and not getattr(e, "session_thread_id", None)
            ]
            assert final[-1].content[0].text.startswith("DONE: BRIEFS=2: And its population?")
            own = [
                e
                async for e in client.beta.sessions.threads.events.list(threads[1].id, session_id=session_id)
            ]
            assert [e.type for e in own].count("session.thread_status_idle") == 2


async def test_a_subagent_thread_stream_carries_its_previews(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "unused")
    pair = Pair()
    pair.release = asyncio.Event()
    async with LocalModelServer(pair) as model:
        settings = control_plane_config(tmp_path, model_base_url=model.base_url)
        async with ControlPlane(settings) as cp, sdk(cp) as client:
            session_id = await pair_session(client)
            await say(client, session_id, "Go.")

            async def started() -> bool:
                return len(pair.researcher_requests) == 1

            await eventually(started, 30.0, "the researcher's request")
            threads = [t async for t in client.beta.sessions.threads.list(session_id)]
            stream = await client.beta.sessions.threads.events.stream(
                threads[1].id, session_id=session_id, event_deltas=["agent.message"]
            )
            seen: list[Any] = []
            async with stream:
                pair.release.set()
                async with asyncio.timeout(30):
                    async for event in stream:
                        seen.append(event)
                        if event.type == "session.thread_status_idle":
                            break
            kinds = [e.type for e in seen]
            assert "event_start" in kinds and "event_delta" in kinds, kinds
            [message] = [e for e in seen if e.type == "agent.message"]
            start = next(e for e in seen if e.type == "event_start")
            assert start.event.id == message.id  # the preview is of the thread's own message
            assert kinds.index("event_start") < kinds.index("agent.message")


async def test_client_events_naming_unknown_or_archived_threads_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "unused")
    async with LocalModelServer(Pair()) as model:
        settings = control_plane_config(tmp_path, model_base_url=model.base_url)
        async with ControlPlane(settings) as cp, sdk(cp) as client:
            session_id = await pair_session(client)
            refused: list[dict[str, Any]] = [
                {"type": "user.interrupt", "session_thread_id": "sthr_nope"},
                {
                    "type": "user.tool_confirmation",
                    "session_thread_id": "sthr_nope",
                    "tool_use_id": "sevt_x",
                    "result": "allow",
                },
                {"type": "user.tool_result", "session_thread_id": "sthr_nope", "tool_use_id": "sevt_x"},
                {
                    "type": "user.custom_tool_result",
                    "session_thread_id": "sthr_nope",
                    "custom_tool_use_id": "sevt_x",
                },
            ]
            for event in refused:
                with pytest.raises(anthropic.BadRequestError, match=r"events\[0\]\.session_thread_id") as err:
                    await client.beta.sessions.events.send(session_id, events=[event])  # type: ignore[list-item]
                assert "sthr_nope" in str(err.value)
            await say(client, session_id, "Go.")
            await idle_events(client, session_id, 1)
            threads = [t async for t in client.beta.sessions.threads.list(session_id)]
            primary, researcher = threads[0].id, threads[1].id
            await client.beta.sessions.events.send(
                session_id, events=[{"type": "user.interrupt", "session_thread_id": primary}]
            )  # the primary thread exists: accepted
            await client.beta.sessions.threads.archive(researcher, session_id=session_id)
            with pytest.raises(anthropic.BadRequestError, match="archived"):
                await client.beta.sessions.events.send(
                    session_id,
                    events=[
                        {"type": "user.message", "content": [{"type": "text", "text": "x"}]},
                        {"type": "user.interrupt", "session_thread_id": researcher},
                    ],
                )
            # nothing of a refused batch was written
            events = [e async for e in client.beta.sessions.events.list(session_id)]
            assert not any(e.type == "user.message" and e.content[0].text == "x" for e in events)
