"""Issue 14 items 3 and 4, the sandbox half: a session's files and its agent's skill pushed through
the tunnel to a real edge and mounted read-only in its Docker sandbox, seen by bash."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

import anthropic
import pytest

from control_plane.server import ControlPlane
from scripted_model import LocalModelServer
from tests.support.e2e import calls_responder, result_text, run_calls

pytestmark = pytest.mark.docker

SKILL_MD = (
    b"---\nname: csv-stats\ndescription: Summarises CSV files.\n---\n\n# CSV stats\nRun scripts/stats.sh.\n"
)


@pytest.fixture
async def model_server() -> AsyncIterator[LocalModelServer]:
    async with LocalModelServer(calls_responder) as server:
        yield server


async def test_files_and_a_skill_are_mounted_read_only(
    control_plane: ControlPlane, model_server: LocalModelServer, enroll, run_edge
) -> None:
    client = anthropic.AsyncAnthropic(
        base_url=control_plane.http_url, api_key=control_plane.admin_key(), max_retries=0
    )
    small = b"name,count\napples,3\npears,5\n"
    # Over two 256 KiB chunks, so the push is chunked and the edge checks the sha256 of the whole.
    large = b"".join(f"row {i:07d}\n".encode() for i in range(60_000))
    small_file = await client.beta.files.upload(file=("fruit.csv", small, "text/csv"))
    large_file = await client.beta.files.upload(file=("rows.txt", large, "text/plain"))
    later = await client.beta.files.upload(file=("later.txt", b"added later\n", "text/plain"))
    skill = await client.beta.skills.create(
        files=[("csv-stats/SKILL.md", SKILL_MD), ("csv-stats/scripts/stats.sh", b'#!/bin/sh\nwc -l "$1"\n')]
    )
    agent = await client.beta.agents.create(
        name="f",
        model="claude-sonnet-5-5",
        tools=[{"type": "agent_toolset_20260401"}],
        skills=[{"type": "custom", "skill_id": skill.id}],
    )
    environment = await client.beta.environments.create(name="e2e-files", config={"type": "self_hosted"})
    await run_edge(await enroll(environment.id))
    session = await client.beta.sessions.create(
        agent=agent.id,
        environment_id=environment.id,
        resources=[
            {"type": "file", "file_id": small_file.id},
            {"type": "file", "file_id": large_file.id, "mount_path": "/mnt/session/data/rows.txt"},
        ],
    )
    uploads = f"/mnt/session/uploads/{small_file.id}"
    results = await run_calls(
        client,
        session.id,
        [
            ["bash", {"command": f"cat {uploads}"}],
            ["bash", {"command": "sha256sum /mnt/session/data/rows.txt"}],
            [
                "bash",
                {
                    "command": "cat /mnt/skills/csv-stats/SKILL.md && ls /mnt/skills/csv-stats/scripts"
                    " && grep -E ' /mnt/(session|skills) ' /proc/mounts"
                },
            ],
            ["bash", {"command": f"echo x >> {uploads}"}],
            ["bash", {"command": "echo x > /mnt/skills/csv-stats/SKILL.md"}],
        ],
    )
    texts = [result_text(r) for r in results]
    assert [r.is_error for r in results] == [False, False, False, True, True], texts
    assert texts[0].strip() == small.decode().strip()
    assert hashlib.sha256(large).hexdigest() in texts[1]
    assert "name: csv-stats" in texts[2] and "stats.sh" in texts[2]
    mounts = [line.split() for line in texts[2].splitlines() if line.count(" ") >= 3 and "/mnt/s" in line]
    assert {m[1] for m in mounts} == {"/mnt/session", "/mnt/skills"}, texts[2]
    assert all("ro" in m[3].split(",") for m in mounts), texts[2]
    for refused in texts[3:]:  # the file's mode refuses first; the mount is read-only anyway
        assert "Read-only file system" in refused or "Permission denied" in refused, refused

    # A file added to the running session appears at the next call; a deleted one goes.
    added = await client.beta.sessions.resources.add(
        session.id, type="file", file_id=later.id, mount_path="/mnt/session/later.txt"
    )
    first = next(r for r in session.resources if getattr(r, "file_id", None) == small_file.id)
    await client.beta.sessions.resources.delete(first.id, session_id=session.id)
    results = await run_calls(
        client, session.id, [["bash", {"command": f"cat /mnt/session/later.txt; ls {uploads}"}]]
    )
    text = result_text(results[0])
    assert "added later" in text and "No such file" in text, text
    assert added.mount_path == "/mnt/session/later.txt"

    # The model was offered the skill where it is.
    system = model_server.requests[-1].to_json()["body"]["system"]
    assert "/mnt/skills/csv-stats/SKILL.md" in "".join(block["text"] for block in system)
    await client.beta.sessions.delete(session.id)
    await client.close()
