"""``kill -9`` of the control plane in the middle of a dream: the restarted process resumes it once
its claim expires, and nothing is written twice.

The control plane runs as a real process (``outpost-control serve``) on a SQLite file; the scripted
model server lives in the test process and outlives the crash. Two crashes: during the model
request (the request is made again; the copy of the input store is not repeated), and in the
middle of the plan's 400 writes (the recorded plan is applied from where it stopped; the model is
not asked again). No edge, no Docker: a dream runs in the control plane only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anthropic
import yaml

from control_plane.store.base import MemoryVersionFilter
from control_plane.store.sqlite import SqliteStore
from scripted_model import LocalModelServer, Turn
from scripted_model.script import ToolUse
from tests.support import eventually
from tests.support.control_plane_process import ControlPlaneProcess

MODEL = "claude-crash-test"
WRITES = 400


class DreamModel:
    """Answers dream requests with a plan of ``writes`` memories; can hold the first one until
    released (the crash lands meanwhile). Other requests (none expected) get text."""

    def __init__(self, writes: int, *, hold_first: bool) -> None:
        self.writes = writes
        self.hold_first = hold_first
        self.dream_requests = 0
        self.held = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, request: Mapping[str, Any]) -> Turn:
        if request.get("tool_choice", {}).get("name") != "record_memories":
            return Turn.text("ok")
        self.dream_requests += 1
        if self.hold_first and self.dream_requests == 1:
            self.held.set()
            await self.release.wait()  # cut by the crash: its answer goes nowhere
        writes = [{"path": f"/plan/{i:04d}.md", "content": f"fact {i}"} for i in range(self.writes)]
        return Turn([ToolUse("record_memories", {"writes": writes, "deletes": [], "summary": "Many facts."})])


def configure(cp: ControlPlaneProcess) -> None:
    config = yaml.safe_load(cp.config.read_text())
    # A dead process's claim expires after 3 s (default 30 s) and scans run every 0.3 s (default 5 s):
    # the test waits seconds, not a minute. The defaults are what tests/integration/dreams/test_dream_runs.py
    # covers apart from the scan cadence.
    config["dreams"] = {"claim_ttl_s": 3, "scan_interval_s": 0.3}
    cp.config.write_text(yaml.safe_dump(config))


async def start_dream(client: anthropic.AsyncAnthropic) -> tuple[str, str]:
    store = await client.beta.memory_stores.create(name="crash notes")
    await client.beta.memory_stores.memories.create(store.id, path="/seed.md", content="seed")
    agent = await client.beta.agents.create(name="crash", model=MODEL)
    env = await client.beta.environments.create(name="crash", config={"type": "self_hosted"})
    session = await client.beta.sessions.create(agent=agent.id, environment_id=env.id)
    dream = await client.beta.dreams.create(
        model=MODEL,
        inputs=[
            {"type": "memory_store", "memory_store_id": store.id},
            {"type": "sessions", "session_ids": [session.id]},
        ],
    )
    return dream.id, store.id


async def finish(cp: ControlPlaneProcess, client: anthropic.AsyncAnthropic, dream_id: str) -> Any:
    cp.start()
    await cp.wait_up()

    async def ended() -> bool:
        return (await client.beta.dreams.retrieve(dream_id)).status in ("completed", "failed")

    await eventually(ended, 60, "the resumed dream to end")
    dream = await client.beta.dreams.retrieve(dream_id)
    assert dream.status == "completed", dream.error
    return dream


async def versions(client: anthropic.AsyncAnthropic, store_id: str) -> list[Any]:
    return [v async for v in client.beta.memory_stores.memory_versions.list(store_id, limit=100)]


def assert_once_each(found: list[Any], writes: int) -> None:
    paths = sorted(v.path for v in found)
    assert [v.operation for v in found] == ["created"] * len(found)
    assert paths == sorted(["/seed.md", *(f"/plan/{i:04d}.md" for i in range(writes))])  # no duplicate


async def test_kill9_during_the_model_request(tmp_path: Path) -> None:
    model = DreamModel(3, hold_first=True)
    async with LocalModelServer(model) as server:
        cp = ControlPlaneProcess(tmp_path, server.base_url)
        configure(cp)
        cp.start()
        try:
            await cp.wait_up()
            key = (cp.data_dir / "admin-api-key").read_text().strip()
            async with anthropic.AsyncAnthropic(base_url=cp.url, api_key=key, max_retries=3) as client:
                dream_id, _ = await start_dream(client)
                await asyncio.wait_for(model.held.wait(), 30)
                cp.kill9()
                model.release.set()
                dream = await finish(cp, client, dream_id)
                assert model.dream_requests == 2  # cut once, asked again once
                [output] = dream.outputs
                assert_once_each(await versions(client, output.memory_store_id), 3)
                events = [e.type async for e in client.beta.sessions.events.list(dream.session_id)]
                assert events.count("session.status_running") == 1
                assert events.count("span.model_request_start") == 2
                assert events.count("span.model_request_end") == 2  # the cut one closed as failed
                assert events.count("agent.custom_tool_use") == 1
        finally:
            cp.stop()


async def test_kill9_in_the_middle_of_the_writes(tmp_path: Path) -> None:
    model = DreamModel(WRITES, hold_first=False)
    async with LocalModelServer(model) as server:
        cp = ControlPlaneProcess(tmp_path, server.base_url)
        configure(cp)
        cp.start()
        try:
            await cp.wait_up()
            key = (cp.data_dir / "admin-api-key").read_text().strip()
            async with anthropic.AsyncAnthropic(base_url=cp.url, api_key=key, max_retries=3) as client:
                dream_id, _ = await start_dream(client)

                async def writing() -> bool:
                    dream = await client.beta.dreams.retrieve(dream_id)
                    if not dream.outputs:
                        return False
                    found = client.beta.memory_stores.memories.list(
                        dream.outputs[0].memory_store_id, path_prefix="/plan/", limit=1
                    )
                    return bool([m async for m in found])

                await eventually(writing, 30, "the dream's first writes", interval_s=0.005)
                cp.kill9()
                async with SqliteStore(cp.data_dir / "outpost.db") as store:
                    dream = await store.get_resource("dream", dream_id)
                    output = dream.body["outputs"][0]["memory_store_id"]
                    at_crash = await store.list_memory_versions(output, MemoryVersionFilter(), limit=1000)
                assert 1 < len(at_crash) < WRITES + 1, len(at_crash)  # the crash cut the writes
                dream_after = await finish(cp, client, dream_id)
                assert model.dream_requests == 1  # the recorded plan was applied, not asked for again
                assert [o.memory_store_id for o in dream_after.outputs] == [output]
                assert_once_each(await versions(client, output), WRITES)
        finally:
            cp.stop()
