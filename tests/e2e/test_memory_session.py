"""Issue 14 item 1, the session half: a memory store mounted in a real Docker sandbox at the edge,
written by bash and by the file tools and read back through the official SDK; a read-only mount is
truly read-only; two sessions writing the same memory at once lose nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import docker
import pytest

from control_plane.server import ControlPlane
from scripted_model import LocalModelServer
from tests.support.docker_engine import exists_in_session_sandbox, session_container
from tests.support.e2e import calls_responder, result_text, run_calls
from tests.support.waiting import eventually

pytestmark = pytest.mark.docker


@pytest.fixture
async def model_server() -> AsyncIterator[LocalModelServer]:
    async with LocalModelServer(calls_responder) as server:
        yield server


async def test_bash_writes_a_memory_that_the_sdk_reads_back_and_read_only_stays_read_only(
    control_plane: ControlPlane, model_server: LocalModelServer, enroll, run_edge
) -> None:
    client = anthropic.AsyncAnthropic(
        base_url=control_plane.http_url, api_key=control_plane.admin_key(), max_retries=0
    )
    store = await client.beta.memory_stores.create(name="User Notes", description="What the user told us.")
    facts = await client.beta.memory_stores.create(name="facts")
    await client.beta.memory_stores.memories.create(store.id, path="/notes.md", content="base\n")
    await client.beta.memory_stores.memories.create(facts.id, path="/f.md", content="fixed\n")
    agent = await client.beta.agents.create(
        name="m", model="claude-sonnet-5-5", system="Be brief.", tools=[{"type": "agent_toolset_20260401"}]
    )
    environment = await client.beta.environments.create(name="e2e-memory", config={"type": "self_hosted"})
    await run_edge(await enroll(environment.id))
    session = await client.beta.sessions.create(
        agent=agent.id,
        environment_id=environment.id,
        resources=[
            {"type": "memory_store", "memory_store_id": store.id, "instructions": "Keep it short."},
            {"type": "memory_store", "memory_store_id": facts.id, "access": "read_only"},
        ],
    )
    mounted = {r.memory_store_id: r for r in session.resources if r.type == "memory_store"}
    assert (
        mounted[store.id].mount_path == "/mnt/memory/user-notes" and mounted[store.id].access == "read_write"
    )
    assert mounted[facts.id].mount_path == "/mnt/memory/facts" and mounted[facts.id].access == "read_only"
    assert (
        mounted[store.id].name == "User Notes" and mounted[store.id].description == "What the user told us."
    )

    results = await run_calls(
        client,
        session.id,
        [
            [
                "bash",
                {"command": "cat /mnt/memory/facts/f.md && echo hello >> /mnt/memory/user-notes/notes.md"},
            ],
            ["bash", {"command": "echo nope >> /mnt/memory/facts/f.md"}],
            [
                "bash",
                {
                    "command": "echo new > /mnt/memory/user-notes/sub.md"
                    " && cat /mnt/memory/user-notes/notes.md"
                },
            ],
        ],
    )
    assert [r.is_error for r in results] == [False, True, False], [result_text(r) for r in results]
    assert "fixed" in result_text(results[0])
    assert "Read-only file system" in result_text(results[1])
    assert "base\nhello" in result_text(results[2])

    memories = {m.path: m async for m in client.beta.memory_stores.memories.list(store.id)}
    assert set(memories) == {"/notes.md", "/sub.md"}
    notes = await client.beta.memory_stores.memories.retrieve(
        memories["/notes.md"].id, memory_store_id=store.id
    )
    assert notes.content == "base\nhello\n"
    versions = [
        v async for v in client.beta.memory_stores.memory_versions.list(store.id, session_id=session.id)
    ]
    assert {v.operation for v in versions} == {"created", "modified"}
    # Written back before the tool result was recorded: once a result is in the log, the memory is
    # in the store, so the sandbox dying after it loses nothing.
    modified = next(v for v in versions if v.operation == "modified")
    assert modified.created_at <= results[0].processed_at
    fixed = [m async for m in client.beta.memory_stores.memories.list(facts.id, view="full")]
    assert [m.content for m in fixed] == ["fixed\n"]

    # The file tools reach the mounts too, and a read-only mount refuses them as it refuses bash.
    results = await run_calls(
        client,
        session.id,
        [
            ["read", {"file_path": "/mnt/memory/facts/f.md"}],
            ["write", {"file_path": "/mnt/memory/facts/f.md", "content": "nope\n"}],
            [
                "edit",
                {"file_path": "/mnt/memory/user-notes/notes.md", "old_string": "hello", "new_string": "hi"},
            ],
            ["grep", {"pattern": "new", "path": "/mnt/memory"}],
        ],
    )
    assert [r.is_error for r in results] == [False, True, False, False], [result_text(r) for r in results]
    assert result_text(results[0]) == "fixed\n"
    assert result_text(results[1]) == (
        "write: /mnt/memory/facts/f.md: read-only: /mnt/memory/facts is mounted read-only"
    )
    assert result_text(results[3]) == "/mnt/memory/user-notes/sub.md:1:new"
    notes = await client.beta.memory_stores.memories.retrieve(
        memories["/notes.md"].id, memory_store_id=store.id
    )
    assert notes.content == "base\nhi\n"
    fixed = [m async for m in client.beta.memory_stores.memories.list(facts.id, view="full")]
    assert [m.content for m in fixed] == ["fixed\n"]

    # The model was told of the stores in its system prompt.
    system = model_server.requests[-1].to_json()["body"]["system"]
    text = "".join(block["text"] for block in system)
    assert "/mnt/memory/user-notes (read-write)" in text and "Keep it short." in text
    assert "/mnt/memory/facts (read-only)" in text
    await client.beta.sessions.delete(session.id)
    await client.close()


async def test_two_sessions_writing_one_memory_at_once_lose_nothing(
    control_plane: ControlPlane,
    model_server: LocalModelServer,
    enroll,
    run_edge,
    docker_client: docker.DockerClient,
) -> None:
    """Session A appends by ``bash echo >>``, session B replaces by ``write``, both from the same
    baseline. A's append is held (it waits for a file the test creates) until B's write is a
    memory version: B wins (first writer), A's change is a version too and A's model is told."""
    client = anthropic.AsyncAnthropic(
        base_url=control_plane.http_url, api_key=control_plane.admin_key(), max_retries=0
    )
    store = await client.beta.memory_stores.create(name="shared")
    memory = await client.beta.memory_stores.memories.create(store.id, path="/notes.md", content="base\n")
    agent = await client.beta.agents.create(
        name="m", model="claude-sonnet-5-5", system="Be brief.", tools=[{"type": "agent_toolset_20260401"}]
    )
    environment = await client.beta.environments.create(
        name="e2e-memory-race", config={"type": "self_hosted"}
    )
    await run_edge(await enroll(environment.id))
    resources: Any = [{"type": "memory_store", "memory_store_id": store.id}]
    session_a = await client.beta.sessions.create(
        agent=agent.id, environment_id=environment.id, resources=resources
    )
    session_b = await client.beta.sessions.create(
        agent=agent.id, environment_id=environment.id, resources=resources
    )
    path = "/mnt/memory/shared/notes.md"

    hold = "touch /workspace/started; while [ ! -e /workspace/go ]; do sleep 0.05; done"
    run_a = asyncio.create_task(
        run_calls(client, session_a.id, [["bash", {"command": f"{hold}; echo A >> {path}"}]])
    )
    try:
        # A's call runs in its sandbox, which holds the baseline ("base"), and waits.
        await eventually(
            lambda: exists_in_session_sandbox(docker_client, session_a.id, "/workspace/started"),
            180,
            "session A's bash call to start",
        )
        results_b = await run_calls(
            client, session_b.id, [["write", {"file_path": path, "content": "base\nB\n"}]]
        )
        assert [r.is_error for r in results_b] == [False], [result_text(r) for r in results_b]
        assert "Memory conflict" not in result_text(results_b[0])
        # B's write is a memory version (written back before its tool result was recorded).
        by_b = [
            v async for v in client.beta.memory_stores.memory_versions.list(store.id, session_id=session_b.id)
        ]
        assert [v.operation for v in by_b] == ["modified"]

        container = session_container(docker_client, session_a.id)
        assert container is not None
        code, _ = await asyncio.to_thread(container.exec_run, ["touch", "/workspace/go"], user="1000:1000")
        assert code == 0
        results_a = await asyncio.wait_for(run_a, 180)
    finally:
        run_a.cancel()

    # A lost the race: its tool result carries the conflict note naming its recorded version.
    assert [r.is_error for r in results_a] == [False], [result_text(r) for r in results_a]
    note = result_text(results_a[0])
    assert "Memory conflict: " in note and "another writer" in note, note

    # The current content is the first writer's (B's) ...
    current = await client.beta.memory_stores.memories.retrieve(memory.id, memory_store_id=store.id)
    assert current.content == "base\nB\n"
    # ... and memory_versions shows both writers; A's change is kept in a version of its own.
    versions = [
        v
        async for v in client.beta.memory_stores.memory_versions.list(
            store.id, memory_id=memory.id, view="full"
        )
    ]
    contents = {
        (getattr(v.created_by, "session_id", None), v.content) for v in versions if v.operation == "modified"
    }
    assert (session_b.id, "base\nB\n") in contents, contents
    assert (session_a.id, "base\nA\n") in contents, contents
    loser = next(v for v in versions if v.content == "base\nA\n")
    assert loser.id in note
    await client.beta.sessions.delete(session_a.id)
    await client.beta.sessions.delete(session_b.id)
    await client.close()
