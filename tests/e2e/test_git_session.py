"""Git bundling end to end: the official SDK creates a session with a repository resource, the
control plane delivers it (token unsealed for that request only) to a real edge, which clones it
into the sandbox's workspace and relays pull/push; a clone failure is a typed ``session.error``.

The upstream is a bare repository behind an authenticated git smart-HTTP server on 127.0.0.1
(``tests/integration/git/_git_server.py``)."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from control_plane.server import ControlPlane
from scripted_model import DemoResponder, LocalModelServer
from tests.support.e2e import Api, text_of
from tests.support.git_server import GitHttpServer, git, make_repo

pytestmark = pytest.mark.docker

CANARY = "canary-e2e-git-" + uuid.uuid4().hex[:12]
COMMAND = "cd /workspace/app && git log --format=%s && git pull -q 2>&1 && git remote get-url origin"


@pytest.fixture
async def model_server() -> AsyncIterator[LocalModelServer]:
    """The demo model, whose bash step looks at the cloned repository."""
    async with LocalModelServer(DemoResponder(command=COMMAND)) as server:
        yield server


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[GitHttpServer]:
    root = tmp_path / "upstream"
    root.mkdir()
    make_repo(root, "app.git", {"README.md": "hello\n"})
    server = GitHttpServer(root, CANARY).start()
    yield server
    server.stop()


# The test's git server listens on loopback over plain http: the edge's repositories rule (by
# default no repository, https only, public addresses only) must let exactly that through.
LOOPBACK_REPOSITORIES = {
    "repositories": {"allowed_hosts": ["127.0.0.1"], "allow_http": True, "allow_networks": ["127.0.0.0/8"]}
}


def _text(content: Any) -> str:
    return "".join(getattr(block, "text", "") or "" for block in content or [])


async def _run_turn(client: anthropic.AsyncAnthropic, session_id: str) -> list[Any]:
    await client.beta.sessions.events.send(
        session_id,
        events=[{"type": "user.message", "content": [{"type": "text", "text": "Look at the repo."}]}],
    )
    async with asyncio.timeout(120):
        while True:
            events = [e async for e in client.beta.sessions.events.list(session_id)]
            if any(e.type == "session.status_idle" for e in events):
                return events
            await asyncio.sleep(0.2)


async def test_a_session_repository_is_cloned_and_relayed_without_its_token_in_the_sandbox(
    control_plane: ControlPlane,
    api: Api,
    enroll,
    run_edge,
    upstream: GitHttpServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    client = anthropic.AsyncAnthropic(
        base_url=control_plane.http_url, api_key=control_plane.admin_key(), max_retries=0
    )
    agent = await client.beta.agents.create(
        name="coder", model="claude-sonnet-5-5", tools=[{"type": "agent_toolset_20260401"}]
    )
    environment = await client.beta.environments.create(name="git", config={"type": "self_hosted"})
    await run_edge(await enroll(environment.id, policy=LOOPBACK_REPOSITORIES))
    url = upstream.url("app.git")
    session = await client.beta.sessions.create(
        agent=agent.id,
        environment_id=environment.id,
        resources=[{"type": "github_repository", "url": url, "authorization_token": CANARY}],
    )
    assert [r.mount_path for r in session.resources] == ["/workspace/app"]

    events = await _run_turn(client, session.id)
    uses = {e.id: e for e in events if e.type == "agent.tool_use"}
    (bash,) = [e for e in events if e.type == "agent.tool_result" and uses[e.tool_use_id].name == "bash"]
    out = _text(bash.content)
    assert not bash.is_error, out
    lines = out.strip().splitlines()
    assert lines[0] == "initial" and "/git/" in lines[-1] and lines[-1].endswith(session.resources[0].id)
    assert not [e for e in events if e.type == "session.error"]

    # The operator's exec path uses the same spec: push a commit made in the sandbox.
    pushed = await api.exec(
        environment.id,
        session.id,
        "bash",
        {
            "command": "cd /workspace/app && echo x > x.txt && git add x.txt && "
            "git -c user.name=Agent -c user.email=a@b commit -qm 'agent commit' && git push -q 2>&1 && "
            f'N="{CANARY[:8]}""{CANARY[8:]}"; '
            'grep -rlF -e "$N" /workspace /proc/[0-9]*/environ; env | grep -cF -e "$N"'
        },
    )
    assert text_of(pushed).strip() == "0", text_of(pushed)
    assert git("log", "-1", "--format=%s", "main", cwd=upstream.root / "app.git") == "agent commit"
    assert {s.authorization for s in upstream.seen} == {"ok"}

    # The token is in no event, no API answer and no log line of either side.
    dumped = json.dumps([e.model_dump(mode="json") for e in events])
    assert CANARY not in dumped
    assert CANARY not in (await api.client.get(f"/v1/sessions/{session.id}")).text
    # (The test's own SDK client logs its request bodies at DEBUG: the anthropic loggers are not ours.)
    ours = [
        r.getMessage() for r in caplog.records if not r.name.startswith(("anthropic", "httpcore2", "httpx2"))
    ]
    assert ours and not [line for line in ours if CANARY in line]
    await client.beta.sessions.delete(session.id)
    await client.close()


async def test_a_refused_token_is_a_typed_session_error(
    control_plane: ControlPlane, enroll, run_edge, upstream: GitHttpServer
) -> None:
    client = anthropic.AsyncAnthropic(
        base_url=control_plane.http_url, api_key=control_plane.admin_key(), max_retries=0
    )
    agent = await client.beta.agents.create(
        name="coder", model="claude-sonnet-5-5", tools=[{"type": "agent_toolset_20260401"}]
    )
    environment = await client.beta.environments.create(name="git-bad", config={"type": "self_hosted"})
    await run_edge(await enroll(environment.id, policy=LOOPBACK_REPOSITORIES))
    url = upstream.url("app.git")
    session = await client.beta.sessions.create(
        agent=agent.id,
        environment_id=environment.id,
        resources=[{"type": "github_repository", "url": url, "authorization_token": "not-the-token"}],
    )
    events = await _run_turn(client, session.id)
    errors = [e for e in events if e.type == "session.error"]
    assert errors, [e.type for e in events]
    error = errors[0].error
    assert error.type == "repository_authentication_error"
    assert error.retry_status.type == "retrying"
    assert getattr(error, "repository_url", None) == url
    (result,) = [e for e in events if e.type == "agent.tool_result"]
    assert result.is_error and "refused the session's authorization_token" in _text(result.content)
    idle = [e for e in events if e.type == "session.status_idle"][-1]
    assert idle.stop_reason.type == "end_turn"
    assert "not-the-token" not in json.dumps([e.model_dump(mode="json") for e in events])
    await client.beta.sessions.delete(session.id)
    await client.close()
