"""Dreams that run: the real API (SQLite, uvicorn, the official SDK), a real
:class:`~control_plane.dreams.DreamScheduler` on the same store, the real model client against the
scripted Messages-API server. A dream over three sessions and a memory store completes and its
output store holds the memories; ``update_existing`` writes new versions; a malformed answer fails
the dream with a typed error; a cancel while the model is answering stops it (no writes after);
the transcripts are trimmed to the context budget; the plan is applied once however often it runs."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic.types.beta import BetaDream

from control_plane.dreams import DreamScheduler, DreamsConfig
from control_plane.dreams.claim import DreamClaim
from control_plane.dreams.digest import MemoryPlan
from control_plane.dreams.job import DreamJob, Planned
from control_plane.harness import AnthropicModelClient
from control_plane.memory import MemoryService
from control_plane.sessions.events import new_event_id
from control_plane.store.base import MemoryVersionFilter, NewEvent
from scripted_model import LocalModelServer, Turn
from scripted_model.script import Text, ToolUse
from tests.support.api_app import Api, assert_complete, assert_valid, utcnow
from tests.support.api_server import serve_api
from tests.support.waiting import eventually

MODEL = "claude-opus-4-8"
# Fast scans and short claims so a test waits tenths of a second, not the default 5 s / 30 s.
FAST = DreamsConfig(scan_interval_s=0.1, claim_ttl_s=3.0, model_backoff_s=0.05)

HELLO: Any = {"type": "user.message", "content": [{"type": "text", "text": "hi"}]}
Responder = Callable[[Mapping[str, Any]], Awaitable[Turn]]


def plan_turn(writes: dict[str, str], deletes: list[str] | None = None, summary: str = "Merged.") -> Turn:
    items = [{"path": p, "content": c} for p, c in writes.items()]
    return Turn([ToolUse("record_memories", {"writes": items, "deletes": deletes or [], "summary": summary})])


class Model:
    """The scripted model's answers: ``answer`` per request (default: a plan), every request kept."""

    def __init__(self) -> None:
        self.answer: Responder = self._default
        self.requests: list[Mapping[str, Any]] = []

    async def _default(self, request: Mapping[str, Any]) -> Turn:
        return plan_turn({"/prefs/style.md": "Prefers tabs."})

    async def __call__(self, request: Mapping[str, Any]) -> Turn:
        self.requests.append(request)
        return await self.answer(request)


@contextlib.asynccontextmanager
async def running(
    tmp_path: Path, config: DreamsConfig = FAST, budget: int = 150_000
) -> AsyncIterator[tuple[Api, Model, DreamScheduler]]:
    model = Model()
    async with LocalModelServer(model) as server, serve_api(tmp_path) as api:
        client = AnthropicModelClient(base_url=server.base_url, api_key="test-model-key")
        scheduler = DreamScheduler(api.store, client, config, budget_tokens=lambda _model: budget)
        try:
            async with scheduler:
                yield api, model, scheduler
        finally:
            await client.close()


async def transcript(api: Api, session_id: str, *lines: str) -> None:
    events = []
    for i, line in enumerate(lines):
        kind = "user.message" if i % 2 == 0 else "agent.message"
        events.append(NewEvent(new_event_id(), kind, {"content": [{"type": "text", "text": line}]}))
    await api.store.append(session_id, events, utcnow())


async def setup_inputs(api: Api, sessions: int = 3) -> tuple[str, list[str]]:
    store = await api.client.beta.memory_stores.create(name="team notes")
    memories = api.client.beta.memory_stores.memories
    await memories.create(store.id, path="/old.md", content="Uses spaces.")
    await memories.create(store.id, path="/keep.md", content="Deploys on Fridays.")
    env = await api.environment()
    ids = []
    for n in range(sessions):
        session = await api.session(environment_id=env)
        await transcript(api, session.id, f"Session {n}: please use tabs", f"OK, tabs it is ({n}).")
        ids.append(session.id)
    return store.id, ids


async def create(api: Api, store_id: str, session_ids: list[str], **extra: Any) -> BetaDream:
    return await api.client.beta.dreams.create(
        model=MODEL,
        inputs=[
            {"type": "memory_store", "memory_store_id": store_id},
            {"type": "sessions", "session_ids": session_ids},
        ],
        **extra,
    )


async def until(api: Api, dream_id: str, *statuses: str) -> BetaDream:
    found: list[BetaDream] = []

    async def done() -> bool:
        found[:] = [await api.client.beta.dreams.retrieve(dream_id)]
        return found[0].status in statuses

    await eventually(done, 30, f"dream {dream_id} {statuses}")
    assert_complete(found[0])
    return found[0]


async def contents(api: Api, store_id: str) -> dict[str, str]:
    memories = api.client.beta.memory_stores.memories
    found = {}
    async for item in memories.list(store_id, view="full"):
        assert item.type == "memory"
        found[item.path] = item.content
    return found


async def test_a_dream_over_three_sessions_completes(tmp_path: Path) -> None:
    async with running(tmp_path) as (api, model, scheduler):
        store_id, session_ids = await setup_inputs(api)
        model.answer = lambda r: _async(
            plan_turn(
                {"/prefs/style.md": "Prefers tabs.", "/keep.md": "Deploys on Fridays, after 2 pm."},
                ["/old.md"],
            )
        )
        dream = await create(api, store_id, session_ids, instructions="Keep it short.")
        done = await until(api, dream.id, "completed", "failed")
        assert done.status == "completed", done.error
        assert done.error is None and done.ended_at is not None
        assert done.usage.input_tokens > 0 and done.usage.output_tokens > 0
        [output] = done.outputs
        assert output.memory_store_id != store_id  # create_new
        assert await contents(api, output.memory_store_id) == {
            "/keep.md": "Deploys on Fridays, after 2 pm.",
            "/prefs/style.md": "Prefers tabs.",
        }
        assert await contents(api, store_id) == {"/keep.md": "Deploys on Fridays.", "/old.md": "Uses spaces."}
        versions = [
            v async for v in api.client.beta.memory_stores.memory_versions.list(output.memory_store_id)
        ]
        assert versions and all(v.created_by is not None for v in versions)
        assert {
            (v.created_by.type, getattr(v.created_by, "session_id", None)) for v in versions if v.created_by
        } == {("session_actor", done.session_id)}
        # the model saw every transcript, the memories and the instructions, and had to answer with the tool
        [request] = model.requests
        prompt = request["messages"][0]["content"][0]["text"]
        assert all(f"Session {n}: please use tabs" in prompt for n in range(3))
        assert "Uses spaces." in prompt and "Keep it short." in prompt
        assert request["tool_choice"] == {"type": "tool", "name": "record_memories"}
        # the dream's session: readable through the SDK, its log tells what the dream did
        assert done.session_id is not None
        session = await api.client.beta.sessions.retrieve(done.session_id)
        assert_complete(session)
        assert session.status == "terminated" and session.metadata == {"dream_id": dream.id}
        events = [e async for e in api.client.beta.sessions.events.list(done.session_id)]
        for event in events:
            assert_valid(event)
        assert [e.type for e in events] == [
            "session.status_running",
            "span.model_request_start",
            "agent.custom_tool_use",
            "span.model_request_end",
            "agent.message",
            "session.status_terminated",
        ]
        assert events[2].name == "record_memories" and events[2].input["deletes"] == ["/old.md"]
        with pytest.raises(anthropic.BadRequestError, match="terminated"):
            await api.client.beta.sessions.events.send(done.session_id, events=[HELLO])
        assert scheduler.active() == set()
        with pytest.raises(anthropic.BadRequestError, match="completed"):
            await api.client.beta.dreams.cancel(dream.id)
        assert (await api.client.beta.dreams.archive(dream.id)).archived_at is not None


async def _async(turn: Turn) -> Turn:
    return turn


async def test_update_existing_writes_new_versions(tmp_path: Path) -> None:
    async with running(tmp_path) as (api, model, _):
        store_id, session_ids = await setup_inputs(api, sessions=1)
        model.answer = lambda r: _async(plan_turn({"/old.md": "Uses tabs now.", "/new.md": "Likes tea."}))
        behavior = {"type": "update_existing", "memory_store_id": store_id}
        dream = await create(api, store_id, session_ids, output_behavior=behavior)
        done = await until(api, dream.id, "completed", "failed")
        assert done.status == "completed", done.error
        assert [o.memory_store_id for o in done.outputs] == [store_id]
        assert await contents(api, store_id) == {
            "/keep.md": "Deploys on Fridays.",
            "/new.md": "Likes tea.",
            "/old.md": "Uses tabs now.",
        }
        versions = [
            v
            async for v in api.client.beta.memory_stores.memory_versions.list(
                store_id, session_id=done.session_id
            )
        ]
        assert sorted((v.operation, v.path) for v in versions) == [
            ("created", "/new.md"),
            ("modified", "/old.md"),
        ]


async def test_malformed_answers_fail_the_dream(tmp_path: Path) -> None:
    async with running(tmp_path) as (api, model, _):
        store_id, session_ids = await setup_inputs(api, sessions=1)
        answers = [
            Turn([Text("I would rather chat.")]),
            Turn(
                [
                    ToolUse(
                        "record_memories", {"writes": [{"path": "no-slash", "content": "x"}], "deletes": []}
                    )
                ]
            ),
            Turn([ToolUse("record_memories", {"writes": "everything", "deletes": []})]),
        ]
        for turn in answers:
            model.answer = lambda r, t=turn: _async(t)
            dream = await create(api, store_id, session_ids)
            failed = await until(api, dream.id, "completed", "failed")
            assert failed.status == "failed"
            assert failed.error is not None and failed.error.type == "invalid_model_output", failed.error
            [output] = failed.outputs
            assert await contents(api, output.memory_store_id) == await contents(
                api, store_id
            )  # the copy only
            assert failed.session_id is not None
            events = [e async for e in api.client.beta.sessions.events.list(failed.session_id)]
            for event in events:
                assert_valid(event)
            assert [e.type for e in events][-2:] == ["session.error", "session.status_terminated"]


async def test_cancel_while_the_model_answers_stops_the_dream(tmp_path: Path) -> None:
    async with running(tmp_path) as (api, model, scheduler):
        store_id, session_ids = await setup_inputs(api, sessions=1)
        asked, release = asyncio.Event(), asyncio.Event()

        async def slow(request: Mapping[str, Any]) -> Turn:
            asked.set()
            await release.wait()
            return plan_turn({"/late.md": "written after the cancel"})

        model.answer = slow
        dream = await create(api, store_id, session_ids)
        await asyncio.wait_for(asked.wait(), 30)
        running_dream = await api.client.beta.dreams.retrieve(dream.id)
        assert running_dream.status == "running" and running_dream.session_id is not None
        session = await api.client.beta.sessions.retrieve(running_dream.session_id)
        assert session.status == "running"  # read from its log, as for any session
        with pytest.raises(anthropic.BadRequestError, match="runs a dream"):  # it takes no input
            await api.client.beta.sessions.events.send(running_dream.session_id, events=[HELLO])
        canceled = await api.client.beta.dreams.cancel(dream.id)
        assert canceled.status == "canceled"
        await eventually(lambda: not scheduler.active(), 30, "the dream's task to stop")
        release.set()
        final = await api.client.beta.dreams.retrieve(dream.id)
        assert final.status == "canceled" and final.ended_at is not None
        [output] = final.outputs
        assert "/late.md" not in await contents(api, output.memory_store_id)
        assert final.session_id is not None
        events = [e.type async for e in api.client.beta.sessions.events.list(final.session_id)]
        assert events[-1] == "session.status_terminated" and "agent.custom_tool_use" not in events
        assert (await api.client.beta.dreams.archive(dream.id)).archived_at is not None


async def test_the_transcripts_are_trimmed_to_the_context_budget(tmp_path: Path) -> None:
    budget = 4000  # tokens: ~12,000 characters of prompt at the conservative 3 characters a token
    async with running(tmp_path, budget=budget) as (api, model, _):
        store_id, session_ids = await setup_inputs(api, sessions=3)
        for session_id in session_ids:
            await transcript(api, session_id, *[f"line {i} " + "x" * 900 for i in range(40)])
        dream = await create(api, store_id, session_ids)
        done = await until(api, dream.id, "completed", "failed")
        assert done.status == "completed", done.error
        [request] = model.requests
        size = len(json.dumps(request))
        assert size < budget * 3, size
        prompt = request["messages"][0]["content"][0]["text"]
        assert prompt.count("transcript lines left out") == 3  # every session kept, each trimmed
        assert all(f"=== session {s}" in prompt for s in session_ids)
        assert "line 39" in prompt  # the end of a transcript is kept


async def test_a_plan_applied_twice_writes_once(tmp_path: Path) -> None:
    """What a resumed dream does after a crash in the middle of its writes: the same plan again."""
    async with running(tmp_path) as (api, _, scheduler):
        store_id, session_ids = await setup_inputs(api, sessions=1)
        behavior = {"type": "update_existing", "memory_store_id": store_id}
        await scheduler.close()  # this test drives the job itself
        dream = await create(api, store_id, session_ids, output_behavior=behavior)
        claim = DreamClaim(api.store, dream.id, "test", 30.0, utcnow)
        assert await claim.take()
        job = DreamJob(
            api.store,
            MemoryService(api.store, utcnow),
            None,
            FAST,
            claim,
            budget_tokens=lambda m: 1,
            clock=utcnow,
        )  # type: ignore[arg-type]
        plan = Planned(MemoryPlan((("/old.md", "Tabs."), ("/b.md", "B")), ("/keep.md",), "s"), store_id)
        before = await api.store.list_memory_versions(store_id, MemoryVersionFilter(), limit=100)
        await job.apply(plan)
        once = await api.store.list_memory_versions(store_id, MemoryVersionFilter(), limit=100)
        await job.apply(plan)
        twice = await api.store.list_memory_versions(store_id, MemoryVersionFilter(), limit=100)
        assert len(once) == len(before) + 3 and [v.id for v in twice] == [v.id for v in once]
        assert await contents(api, store_id) == {"/b.md": "B", "/old.md": "Tabs."}
