"""A coordinator agent with two subagents, through the official SDK: a real control plane (SQLite,
the real harness), the local scripted Messages server playing all three agents (told apart by their
system prompts), and ``anthropic`` with strict response validation."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic.types.beta.sessions.beta_managed_agents_session_thread import BetaManagedAgentsSessionThread

from control_plane.server import ControlPlane
from scripted_model import LocalModelServer, Text, ToolUse, Turn
from scripted_model.responders import last_prompt_text, tool_result_text, tool_results_since_prompt
from tests.support import eventually
from tests.support.api_app import assert_complete, assert_valid
from tests.support.edge_link import control_plane_config
from tests.support.edge_link import no_ambient_proxy as no_ambient_proxy

pytestmark = pytest.mark.usefixtures("no_ambient_proxy")

MODEL = "claude-threads-test"


class Team:
    """The coordinator delegates to both subagents at once, then sums up their answers."""

    def __init__(self) -> None:
        self.requests: dict[str, int] = {"coordinator": 0, "researcher": 0, "writer": 0}
        self.writer_release: asyncio.Event | None = None  # set: the writer waits for it
        self.writer_started = asyncio.Event()

    async def __call__(self, request: Mapping[str, Any]) -> Turn:
        system = " ".join(b.get("text", "") for b in request.get("system") or [])
        if "researcher" in system:
            self.requests["researcher"] += 1
            return Turn.text(f"FACT: Paris is the capital ({last_prompt_text(request)}).")
        if "writer" in system:
            self.requests["writer"] += 1
            self.writer_started.set()
            if self.writer_release is not None:
                await self.writer_release.wait()
            return Turn.text("PROSE: A fine sentence.")
        self.requests["coordinator"] += 1
        results = tool_results_since_prompt(request)
        if not results:
            tools = {t["name"] for t in request.get("tools") or []}
            assert {"call_agent_researcher", "call_agent_writer"} <= tools, tools
            return Turn(
                (
                    Text("Delegating."),
                    ToolUse("call_agent_researcher", {"message": "Find the capital of France."}),
                    ToolUse("call_agent_writer", {"message": "Write a sentence."}),
                )
            )
        return Turn.text("DONE: " + " | ".join(tool_result_text(r) for r in results))


def _thread_of(event: Any) -> str | None:
    return getattr(event, "session_thread_id", None)


def sdk(cp: ControlPlane) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        base_url=cp.http_url, api_key=cp.admin_key(), max_retries=0, _strict_response_validation=True
    )


async def team_session(client: anthropic.AsyncAnthropic) -> str:
    researcher = await client.beta.agents.create(
        name="researcher", model=MODEL, system="You are the researcher."
    )
    writer = await client.beta.agents.create(name="writer", model=MODEL, system="You are the writer.")
    lead = await client.beta.agents.create(
        name="lead",
        model=MODEL,
        system="You coordinate.",
        multiagent={"type": "coordinator", "agents": [researcher.id, {"type": "agent", "id": writer.id}]},
    )
    assert lead.multiagent is not None and lead.multiagent.type == "coordinator"
    environment = await client.beta.environments.create(name="pool")
    session = await client.beta.sessions.create(agent=lead.id, environment_id=environment.id)
    assert session.agent.multiagent is not None
    return session.id


async def idle_events(client: anthropic.AsyncAnthropic, session_id: str, count: int = 1) -> list[Any]:
    events: list[Any] = []

    async def done() -> bool:
        events[:] = [e async for e in client.beta.sessions.events.list(session_id)]
        return sum(e.type == "session.status_idle" for e in events) >= count

    await eventually(done, 30.0, f"{count} idle(s) of {session_id}")
    return events


async def test_a_coordinator_and_two_subagents_finish_a_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "unused")
    team = Team()
    async with LocalModelServer(team) as model:
        settings = control_plane_config(tmp_path, model_base_url=model.base_url)
        async with ControlPlane(settings) as cp, sdk(cp) as client:
            session_id = await team_session(client)
            await client.beta.sessions.events.send(
                session_id, events=[{"type": "user.message", "content": [{"type": "text", "text": "Go."}]}]
            )
            events = await idle_events(client, session_id)
            for event in events:
                assert_valid(event)
            kinds = [e.type for e in events]
            assert kinds.count("session.thread_created") == 2, kinds
            final = [e for e in events if e.type == "agent.message" and not _thread_of(e)]
            assert "FACT: Paris" in final[-1].content[0].text and "PROSE" in final[-1].content[0].text
            assert team.requests == {"coordinator": 2, "researcher": 1, "writer": 1}


async def collect_until(stream: Any, last_type: str) -> list[Any]:
    seen: list[Any] = []
    async with asyncio.timeout(30):
        async for event in stream:
            seen.append(event)
            if event.type == last_type:
                return seen
    raise AssertionError(f"stream ended before {last_type}: {[e.type for e in seen]}")


async def threads_of(client: anthropic.AsyncAnthropic, session_id: str, **query: Any) -> list[Any]:
    return [t async for t in client.beta.sessions.threads.list(session_id, **query)]


async def test_threads_are_listed_streamed_and_archived(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "unused")
    team = Team()
    team.writer_release = asyncio.Event()
    async with LocalModelServer(team) as model:
        settings = control_plane_config(tmp_path, model_base_url=model.base_url)
        async with ControlPlane(settings) as cp, sdk(cp) as client:
            session_id = await team_session(client)
            [primary] = await threads_of(client, session_id)
            assert primary.parent_thread_id is None and primary.agent.type == "agent"
            primary_stream = await client.beta.sessions.threads.events.stream(
                primary.id, session_id=session_id
            )
            async with primary_stream:
                await client.beta.sessions.events.send(
                    session_id,
                    events=[{"type": "user.message", "content": [{"type": "text", "text": "Go."}]}],
                )

                async def writer_started() -> bool:
                    return len(await threads_of(client, session_id)) == 3

                await eventually(writer_started, 30.0, "both subagent threads")
                threads = await threads_of(client, session_id)
                writer = next(t for t in threads if t.agent.type == "agent" and t.agent.name == "writer")
                assert writer.parent_thread_id == primary.id
                writer_stream = await client.beta.sessions.threads.events.stream(
                    writer.id, session_id=session_id
                )
                async with writer_stream:
                    team.writer_release.set()
                    own = await collect_until(writer_stream, "session.thread_status_idle")
                assert all(e.session_thread_id == writer.id for e in own), [e.type for e in own]
                assert "agent.message" in [e.type for e in own]
                on_primary = await collect_until(primary_stream, "session.status_idle")
            for event in on_primary:
                assert_valid(event)
            crossposted = {e.session_thread_id for e in on_primary if _thread_of(e)}
            assert crossposted == {t.id for t in threads if t.id != primary.id}
            kinds = [e.type for e in on_primary]
            for kind in (
                "session.thread_created",
                "agent.thread_message_sent",
                "agent.thread_message_received",
            ):
                assert kinds.count(kind) >= 2, kinds
            assert kinds.count("session.thread_status_idle") == 2

            # the list, its filter and pages, retrieve, thread events
            threads = await threads_of(client, session_id)
            for thread in threads:
                assert isinstance(thread, BetaManagedAgentsSessionThread)
                assert_complete(thread)
            assert [t.status for t in threads] == ["idle", "idle", "idle"]
            assert await threads_of(client, session_id, statuses=["running"]) == []
            first = await client.beta.sessions.threads.list(session_id, limit=1)
            assert len(first.data) == 1 and first.has_next_page()
            fetched = await client.beta.sessions.threads.retrieve(writer.id, session_id=session_id)
            assert fetched.id == writer.id and fetched.usage is not None and fetched.usage.output_tokens
            events = [
                e
                async for e in client.beta.sessions.threads.events.list(
                    writer.id, session_id=session_id, limit=2
                )
            ]
            assert events and all(e.session_thread_id == writer.id for e in events)
            assert [e.type for e in events][:3] == [
                "session.thread_created",
                "agent.thread_message_received",
                "session.thread_status_running",
            ]

            # archive: a subagent thread at rest, not the primary; unknown threads are 404s
            archived = await client.beta.sessions.threads.archive(writer.id, session_id=session_id)
            assert archived.archived_at is not None
            with pytest.raises(anthropic.BadRequestError, match="primary"):
                await client.beta.sessions.threads.archive(primary.id, session_id=session_id)
            with pytest.raises(anthropic.NotFoundError):
                await client.beta.sessions.threads.retrieve("sthr_nope", session_id=session_id)


async def test_an_interrupt_naming_a_thread_stops_only_that_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "unused")
    team = Team()
    team.writer_release = asyncio.Event()  # never set: the writer works until interrupted
    async with LocalModelServer(team) as model:
        settings = control_plane_config(tmp_path, model_base_url=model.base_url)
        async with ControlPlane(settings) as cp, sdk(cp) as client:
            session_id = await team_session(client)
            await client.beta.sessions.events.send(
                session_id, events=[{"type": "user.message", "content": [{"type": "text", "text": "Go."}]}]
            )
            await asyncio.wait_for(team.writer_started.wait(), 30)
            threads = await threads_of(client, session_id)
            writer = next(t for t in threads if t.agent.type == "agent" and t.agent.name == "writer")
            await client.beta.sessions.events.send(
                session_id, events=[{"type": "user.interrupt", "session_thread_id": writer.id}]
            )
            events = await idle_events(client, session_id)
            idles = {
                e.session_thread_id: e.stop_reason.type
                for e in events
                if e.type == "session.thread_status_idle"
            }
            assert set(idles) == {t.id for t in threads[1:]}  # both subagents ended their turns ...
            final = [e for e in events if e.type == "agent.message" and not _thread_of(e)][-1]
            assert "FACT: Paris" in final.content[0].text  # ... the researcher's with its answer
            results = [e for e in events if e.type == "agent.tool_result"]
            assert len(results) == 2
            assert team.requests == {"coordinator": 2, "researcher": 1, "writer": 1}
            [last_idle] = [e for e in events if e.type == "session.status_idle"]
            assert last_idle.stop_reason.type == "end_turn"  # the coordinator was not interrupted


async def test_thread_routes_refuse_hostile_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "unused")
    async with LocalModelServer(Team()) as model:
        settings = control_plane_config(tmp_path, model_base_url=model.base_url)
        async with ControlPlane(settings) as cp, sdk(cp) as client:
            agent = await client.beta.agents.create(name="solo", model=MODEL)
            environment = await client.beta.environments.create(name="pool")
            session = await client.beta.sessions.create(agent=agent.id, environment_id=environment.id)
            [primary] = await threads_of(client, session.id)  # a single-agent session: its primary
            assert primary.agent.type == "agent" and primary.agent.name == "solo"
            anonymous = anthropic.AsyncAnthropic(base_url=cp.http_url, api_key="sk-ant-nope", max_retries=0)
            with pytest.raises(anthropic.AuthenticationError):
                await anonymous.beta.sessions.threads.list(session.id)
            await anonymous.close()
            with pytest.raises(anthropic.BadRequestError, match="statuses"):
                await client.beta.sessions.threads.list(session.id, statuses=["sleeping"])  # type: ignore[list-item]
            with pytest.raises(anthropic.BadRequestError, match="page"):
                await client.beta.sessions.threads.list(session.id, page="garbage!")
            with pytest.raises(anthropic.BadRequestError, match="limit"):
                await client.beta.sessions.threads.events.list(
                    primary.id, session_id=session.id, limit=100_000
                )
            with pytest.raises(anthropic.NotFoundError):
                await client.beta.sessions.threads.list("sesn_missing")
            with pytest.raises(anthropic.NotFoundError):
                await client.beta.sessions.threads.events.list("sthr_missing", session_id=session.id)
            with pytest.raises(anthropic.BadRequestError, match="multiagent"):
                await client.beta.agents.create(
                    name="deep", model=MODEL, multiagent={"type": "coordinator", "agents": ["agent_nope"]}
                )
