"""The SDK's own self-hosted worker (``client.beta.environments.work.worker``) against a real control
plane (``outpost-control serve`` in its own process) and the scripted model: the worker runs the
session's toolset calls with the SDK's local tool registry in a temp workdir, no edge, no Docker.

The model's prompt is a JSON list of ``[tool, input]`` calls (``calls_responder``): it makes them in
order, then ends the turn."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
import yaml

from scripted_model import LocalModelServer
from tests.support import eventually
from tests.support.control_plane_process import ControlPlaneProcess
from tests.support.e2e import calls_responder, result_text

pytestmark = pytest.mark.timeout(240)  # control plane start-up, worker polls, a lease expiry


@dataclass
class Served:
    cp: ControlPlaneProcess
    client: anthropic.AsyncAnthropic
    environment_id: str
    environment_key: str
    agent_id: str


def _set_config(cp: ControlPlaneProcess, **values: Any) -> None:
    config = yaml.safe_load(cp.config.read_text())
    cp.config.write_text(yaml.safe_dump({**config, **values}))


@contextlib.asynccontextmanager
async def _served(tmp_path: Path, **config: Any) -> AsyncIterator[Served]:
    async with LocalModelServer(calls_responder) as model:
        cp = ControlPlaneProcess(tmp_path, model.base_url)
        _set_config(cp, **config)
        cp.start()
        try:
            await cp.wait_up()
            admin = (cp.data_dir / "admin-api-key").read_text().strip()
            client = anthropic.AsyncAnthropic(base_url=cp.url, api_key=admin, max_retries=3)
            worker_env: Any = {"type": "self_hosted", "tool_runner": "worker"}
            env = await client.beta.environments.create(name="workers", config=worker_env)
            async with httpx.AsyncClient(
                base_url=cp.url, headers={"authorization": f"Bearer {admin}"}
            ) as http:
                made = await http.post(f"/v1/environments/{env.id}/keys", json={"name": "test worker"})
                assert made.status_code == 200, made.text
            agent = await client.beta.agents.create(
                name="w", model="claude-sonnet-5-5", tools=[{"type": "agent_toolset_20260401"}]
            )
            yield Served(cp, client, env.id, made.json()["key"], agent.id)
        finally:
            cp.stop()


@contextlib.asynccontextmanager
async def _worker(served: Served, workdir: Path) -> AsyncIterator[None]:
    """The SDK's worker in this process, cancelled on exit."""
    workdir.mkdir(exist_ok=True)
    client = anthropic.AsyncAnthropic(base_url=served.cp.url, api_key="unused", max_retries=0)
    worker = client.beta.environments.work.worker(
        environment_id=served.environment_id,
        environment_key=served.environment_key,
        workdir=str(workdir),
        memory_sync_interval=5.0,  # the SDK's floor: the test waits for one sync
    )
    task = asyncio.create_task(worker.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


async def _turn(client: anthropic.AsyncAnthropic, session_id: str, calls: list[Any]) -> list[Any]:
    """Send the calls as one message; wait for the turn's ``end_turn``; the turn's tool results."""
    before = len([e async for e in client.beta.sessions.events.list(session_id)])
    await client.beta.sessions.events.send(
        session_id,
        events=[{"type": "user.message", "content": [{"type": "text", "text": json.dumps(calls)}]}],
    )

    found: list[Any] = []

    async def ended() -> bool:
        events = [e async for e in client.beta.sessions.events.list(session_id)][before:]
        found[:] = [e for e in events if e.type == "user.tool_result"]
        return any(e.type == "session.status_idle" and e.stop_reason.type == "end_turn" for e in events)

    await eventually(ended, 90, "the turn ended")
    return found


async def test_worker_runs_bash_and_file_tools_syncs_memory_and_reads_skills(tmp_path: Path) -> None:
    async with _served(tmp_path) as served:
        client = served.client
        skill = await client.beta.skills.create(
            files=[
                ("greeter/SKILL.md", b"---\nname: greeter\ndescription: Greets.\n---\nSay hello warmly.\n")
            ]
        )
        await client.beta.agents.update(
            served.agent_id, version=1, skills=[{"type": "custom", "skill_id": skill.id, "version": "latest"}]
        )
        # The worker mounts a store at the path the session names (/mnt/memory/<name>, as the hosted
        # API does; it must not exist yet): a name of its own, and the folder removed at the end.
        store = await client.beta.memory_stores.create(name=f"notes-{uuid.uuid4().hex[:12]}")
        session = await client.beta.sessions.create(
            agent=served.agent_id,
            environment_id=served.environment_id,
            resources=[{"type": "memory_store", "memory_store_id": store.id}],
        )
        [mount] = [r for r in session.resources if r.type == "memory_store"]
        memory_root = Path(str(mount.mount_path))
        workdir = tmp_path / "wd"
        async with contextlib.AsyncExitStack() as stack:
            stack.callback(_rmdir_if_empty, memory_root.parent)  # runs last
            stack.callback(shutil.rmtree, memory_root, ignore_errors=True)
            await stack.enter_async_context(_worker(served, workdir))
            results = await _turn(
                client,
                session.id,
                [
                    ["bash", {"command": "echo ran >> count.txt; echo from-bash"}],
                    ["write", {"file_path": "hello.txt", "content": "hi there"}],
                    ["read", {"file_path": "hello.txt"}],
                    ["read", {"file_path": "skills/greeter/SKILL.md"}],
                    ["write", {"file_path": str(memory_root / "fact.md"), "content": "the sky is blue"}],
                ],
            )
            assert [r.is_error for r in results] == [False] * 5, [result_text(r) for r in results]
            texts = [result_text(r) for r in results]
            assert "from-bash" in texts[0]
            assert "hi there" in texts[2]
            assert "Say hello warmly." in texts[3]  # the worker downloaded the skill
            assert (workdir / "count.txt").read_text() == "ran\n"

            async def synced() -> bool:
                paths = [m.path async for m in client.beta.memory_stores.memories.list(store.id)]
                return "/fact.md" in paths

            await eventually(synced, 60, "the worker's memory write reached the store")
            item = await _only_item(served, session.id)
            assert item["state"] == "active"


def _rmdir_if_empty(path: Path) -> None:
    with contextlib.suppress(OSError):  # another test's store is still mounted there
        path.rmdir()


async def _only_item(served: Served, session_id: str) -> dict[str, Any]:
    async with httpx.AsyncClient(
        base_url=served.cp.url, headers={"authorization": f"Bearer {served.environment_key}"}
    ) as http:
        listed = (await http.get(f"/v1/environments/{served.environment_id}/work")).json()["data"]
    [item] = [i for i in listed if i["data"]["id"] == session_id]
    return dict(item)


def _worker_process(served: Served, workdir: Path, log: Path) -> subprocess.Popen[bytes]:
    workdir.mkdir(exist_ok=True)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.sdk_worker",
            served.cp.url,
            served.environment_id,
            str(workdir),
        ],
        env={**os.environ, "OUTPOST_TEST_ENVIRONMENT_KEY": served.environment_key},
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )


async def test_a_worker_that_dies_loses_its_lease_and_another_takes_over_running_each_tool_once(
    tmp_path: Path,
) -> None:
    # A 6 s lease (the SDK heartbeats every ttl/2): the dead worker's item is queued again within the test.
    async with _served(tmp_path, work_lease_ttl_s=6) as served:
        client = served.client
        session = await client.beta.sessions.create(
            agent=served.agent_id, environment_id=served.environment_id
        )
        shared = tmp_path / "shared"
        first = _worker_process(served, shared, tmp_path / "worker1.log")
        try:
            [one] = await _turn(client, session.id, [["bash", {"command": "echo a >> ran-1.txt"}]])
            assert not one.is_error
            first_item = await _only_item(served, session.id)
            first.send_signal(signal.SIGKILL)  # its heartbeats stop; its lease runs out
            first.wait(10)
        finally:
            if first.poll() is None:
                first.kill()
        second = _worker_process(served, shared, tmp_path / "worker2.log")
        try:
            [two] = await _turn(client, session.id, [["bash", {"command": "echo b >> ran-2.txt"}]])
            assert not two.is_error
        finally:
            second.send_signal(signal.SIGTERM)
            second.wait(10)
        assert (shared / "ran-1.txt").read_text() == "a\n"  # each call ran once
        assert (shared / "ran-2.txt").read_text() == "b\n"
        item = await _only_item(served, session.id)
        assert item["id"] == first_item["id"]  # the same item, taken over after its lease expired
        log = (tmp_path / "worker2.log").read_text()
        assert "claimed work" in log
