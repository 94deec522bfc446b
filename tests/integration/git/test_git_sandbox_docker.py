"""Git bundling at the edge with real Docker: repositories cloned into the workspace at provision
time with a credential the sandbox never sees, ``git pull`` / ``git push`` relayed by the edge.

The upstream is a bare repository served by an authenticated git HTTP server on the host's
127.0.0.1 (``_git_server``), which a sandbox cannot reach except through the edge. Requests go
through the :class:`~edge_agent.dispatch.Dispatcher`, as the tunnel delivers them.
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import Any

import pytest

from edge_agent.dispatch import Dispatcher
from edge_agent.git import GitConfig, GitCredentialConfig
from edge_agent.journal import ResultJournal
from edge_agent.policy import Policy
from outpost_wire.errors import ErrorCode
from outpost_wire.frames import Egress, Execute, Failure, Provision, Provisioned, Repository, Request
from outpost_wire.results import ToolResult
from tests.integration.git._git_support import CANARY, Edge
from tests.support.git_server import GitHttpServer, git, upstream_commit

pytestmark = pytest.mark.docker

_ids = itertools.count(1)
# The canary split in two, so that no command line of a check carries it whole.
HALF = len(CANARY) // 2
FIND_CANARY = (
    f'N="{CANARY[:HALF]}""{CANARY[HALF:]}"; '
    'grep -rlF -e "$N" /workspace /home /tmp /proc/[0-9]*/environ 2>/dev/null; '
    'env | grep -cF -e "$N"; '
    "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f 2>/dev/null; done | grep -cF -e \"$N\"; true"
)


class Sandbox:
    """One session at the edge, driven through the dispatcher with its repositories."""

    def __init__(self, dispatcher: Dispatcher, session_id: str, repositories: tuple[Repository, ...]) -> None:
        self.dispatcher = dispatcher
        self.session_id = session_id
        self.spec = Provision(repositories=repositories)

    async def provision(self) -> Any:
        return await self.dispatcher.handle(self._request(self.spec))

    async def run(self, command: str, *, ok: bool = True) -> str:
        op = Execute("bash", _json({"command": command}), 60_000, sandbox=self.spec)
        outcome = await self.dispatcher.handle(self._request(op))
        assert isinstance(outcome, ToolResult), outcome
        if ok:
            assert not outcome.is_error, outcome.plain_text
        return outcome.plain_text.strip()

    def _request(self, op: Any) -> Request:
        n = next(_ids)
        return Request(f"req_{n}", self.session_id, f"key_{n}", 0, op)


def _json(value: Any) -> str:
    return json.dumps(value)


@pytest.fixture
async def dispatcher(edge: Edge, tmp_path: Path) -> Any:
    async with ResultJournal(tmp_path / "journal.db", 3600) as journal:
        manager = await edge.start()
        yield Dispatcher(manager, Policy(), journal)


def app_repo(server: GitHttpServer, token: str = CANARY, **kw: Any) -> Repository:
    repository_id = kw.pop("id", "sesrsc_app")
    mount_path = kw.pop("mount_path", "/workspace/app")
    return Repository(repository_id, server.url("app.git"), mount_path, token=token, **kw)


async def test_clone_then_pull_and_push_through_the_edge(
    dispatcher: Dispatcher, edge: Edge, git_server: GitHttpServer, repos: Path
) -> None:
    sandbox = Sandbox(dispatcher, "sesn_git_1", (app_repo(git_server),))
    outcome = await sandbox.provision()
    assert isinstance(outcome, Provisioned), outcome
    assert await sandbox.run("cd /workspace/app && git log --format=%s") == "initial"
    assert (
        await sandbox.run("stat -c %U:%G /workspace/app /workspace/app/.git/config | sort -u")
        == "agent:agent"
    )
    assert await sandbox.run("cat /workspace/app/README.md") == "hello from upstream"

    proxy = edge.manager.egress.proxy if edge.manager else None
    assert proxy is not None
    remotes = await sandbox.run("cd /workspace/app && git remote -v")
    relay = f"{proxy.url}/git/{edge.git.routes.token_for('sesn_git_1') if edge.git else ''}/sesrsc_app"
    assert remotes.splitlines() == [f"origin\t{relay} (fetch)", f"origin\t{relay} (push)"]
    assert CANARY not in remotes and "@" not in remotes
    config = await sandbox.run("cat /workspace/app/.git/config")
    assert CANARY not in config and "extraheader" not in config.lower() and "Authorization" not in config
    assert await sandbox.run(FIND_CANARY) == "0\n0"

    # A new upstream commit arrives with `git pull`, through the edge.
    upstream_commit(repos, "app.git", "CHANGES.md", "upstream change\n", "upstream: changes")
    pulled = await sandbox.run("cd /workspace/app && git pull --ff-only 2>&1 && cat CHANGES.md")
    assert pulled.endswith("upstream change"), pulled
    # A commit made in the sandbox goes upstream with `git push`.
    await sandbox.run(
        "cd /workspace/app && echo sandbox > sandbox.txt && git add sandbox.txt && "
        "git -c user.name=Agent -c user.email=agent@sandbox commit -qm 'from the sandbox' && git push -q 2>&1"
    )
    assert git("log", "-1", "--format=%s %an", "main", cwd=repos / "app.git") == "from the sandbox Agent"
    assert await sandbox.run(FIND_CANARY) == "0\n0"
    # The probe does find the canary where it is (so the empty results above mean something).
    await sandbox.run(f'N="{CANARY[:HALF]}""{CANARY[HALF:]}"; echo "$N" > /tmp/probe')
    assert await sandbox.run(FIND_CANARY) == "/tmp/probe\n0\n0"
    # Every request reached the upstream with the credential (added by the edge).
    assert git_server.seen and {s.authorization for s in git_server.seen} == {"ok"}
    assert {s.path.split("?")[0].rsplit("/", 1)[-1] for s in git_server.seen} >= {
        "refs",
        "git-upload-pack",
        "git-receive-pack",
    }


async def test_branch_commit_and_several_repositories(
    dispatcher: Dispatcher, git_server: GitHttpServer, repos: Path
) -> None:
    first = git("rev-list", "--max-parents=0", "main", cwd=repos / "app.git")
    sandbox = Sandbox(
        dispatcher,
        "sesn_git_2",
        (
            app_repo(git_server, id="sesrsc_f", mount_path="/workspace/src/feature", checkout_kind="branch",
                     checkout_ref="feature"),
            app_repo(git_server, id="sesrsc_p", mount_path="/workspace/pinned", checkout_kind="commit",
                     checkout_ref=first),
        ),
    )  # fmt: skip
    assert isinstance(await sandbox.provision(), Provisioned)
    assert await sandbox.run("cd /workspace/src/feature && git rev-parse --abbrev-ref HEAD && ls") == (
        "feature\nREADME.md\nfeature.txt\nsrc"
    )
    assert await sandbox.run("stat -c %U /workspace/src") == "agent"
    assert await sandbox.run("cd /workspace/pinned && git rev-parse HEAD") == first
    assert await sandbox.run("cd /workspace/pinned && git fetch -q origin && git branch -r | sort") == (
        "origin/HEAD -> origin/main\n  origin/feature\n  origin/main"
    )


@pytest.mark.parametrize(
    ("repo_kwargs", "code", "words"),
    [
        ({"token": "wrong-token"}, ErrorCode.REPOSITORY_AUTHENTICATION_FAILED, "refused the session's"),
        ({"token": ""}, ErrorCode.REPOSITORY_AUTHENTICATION_FAILED, "neither the session"),
        ({"checkout_kind": "branch", "checkout_ref": "nope"}, ErrorCode.REPOSITORY_CHECKOUT_FAILED, "nope"),
    ],
)
async def test_clone_errors_are_typed_failures_and_leave_no_sandbox(
    dispatcher: Dispatcher,
    edge: Edge,
    git_server: GitHttpServer,
    repo_kwargs: dict[str, Any],
    code: ErrorCode,
    words: str,
) -> None:
    sandbox = Sandbox(dispatcher, "sesn_git_bad", (app_repo(git_server, **repo_kwargs),))
    outcome = await sandbox.provision()
    assert isinstance(outcome, Failure) and outcome.code is code, outcome
    assert (
        outcome.message.startswith(f"repository {git_server.url('app.git')}: ") and words in outcome.message
    )
    assert CANARY not in outcome.message and "wrong-token" not in outcome.message
    assert edge.manager is not None and edge.manager.in_use() == 0
    # A tool call that would make the sandbox fails the same way (not a tool result).
    op = Execute("bash", '{"command": "true"}', sandbox=sandbox.spec)
    again = await dispatcher.handle(Request("req_x", "sesn_git_bad", "key_x", 0, op))
    assert isinstance(again, Failure) and again.code is code


async def test_missing_repository(dispatcher: Dispatcher, git_server: GitHttpServer) -> None:
    missing = Repository("sesrsc_m", git_server.url("missing.git"), "/workspace/m", token=CANARY)
    outcome = await Sandbox(dispatcher, "sesn_git_m", (missing,)).provision()
    assert isinstance(outcome, Failure) and outcome.code is ErrorCode.REPOSITORY_NOT_FOUND, outcome


async def test_a_second_sandbox_cannot_use_the_first_ones_git_url(
    dispatcher: Dispatcher, edge: Edge, git_server: GitHttpServer
) -> None:
    a = Sandbox(dispatcher, "sesn_git_a", (app_repo(git_server, id="sesrsc_a"),))
    b = Sandbox(dispatcher, "sesn_git_b", (app_repo(git_server, id="sesrsc_b", mount_path="/workspace/b"),))
    assert isinstance(await a.provision(), Provisioned)
    assert isinstance(await b.provision(), Provisioned)
    a_url = await a.run("cd /workspace/app && git remote get-url origin")
    b_url = await b.run("cd /workspace/b && git remote get-url origin")
    assert a_url != b_url
    assert "refs/heads/main" in await b.run(f"git ls-remote {b_url}")
    before = len(git_server.seen)
    stolen = await b.run(f"git ls-remote {a_url} 2>&1; echo rc=$?", ok=False)
    assert "rc=128" in stolen and ("404" in stolen or "not found" in stolen), stolen
    # Its own session token with the other session's repository id does not work either.
    mixed = b_url.rsplit("/", 1)[0] + "/sesrsc_a"
    assert "rc=128" in await b.run(f"git ls-remote {mixed} 2>&1; echo rc=$?", ok=False)
    assert len(git_server.seen) == before  # nothing of it reached the upstream


async def test_the_clone_survives_a_replaced_container(
    dispatcher: Dispatcher, edge: Edge, git_server: GitHttpServer, docker_api: Any
) -> None:
    sandbox = Sandbox(dispatcher, "sesn_git_r", (app_repo(git_server),))
    info = await sandbox.provision()
    assert isinstance(info, Provisioned)
    await sandbox.run(
        "cd /workspace/app && echo wip > wip.txt && git add wip.txt && "
        "git -c user.name=A -c user.email=a@b commit -qm 'work in progress'"
    )
    origin = await sandbox.run("cd /workspace/app && git remote get-url origin")
    # As if the proxy had to take another port after an edge restart: the replacement re-points it.
    stale = "http://192.0.2.1:9" + origin[origin.index("/git/") :]
    await sandbox.run(f"cd /workspace/app && git remote set-url origin {stale}")
    docker_api.containers.get(info.sandbox_id).kill()
    await sandbox.run("true", ok=False)  # the dead sandbox is a tool error; the next call replaces it
    assert await sandbox.run("cd /workspace/app && git log -1 --format=%s") == "work in progress"
    assert await sandbox.run("cd /workspace/app && git remote get-url origin") == origin
    assert "refs/heads/main" in await sandbox.run("cd /workspace/app && git ls-remote origin")
    assert len([s for s in git_server.seen if "upload-pack" in s.path]) >= 2  # one clone only
    clones = [s for s in git_server.seen if s.path.endswith("service=git-upload-pack")]
    assert len(clones) == 2  # the clone, and the ls-remote; not a second clone


async def test_the_edges_own_credential_from_a_0600_file(
    edge: Edge, git_server: GitHttpServer, tmp_path: Path
) -> None:
    secret = tmp_path / "git.token"
    secret.write_text(CANARY + "\n")
    os.chmod(secret, 0o600)
    config = GitConfig.model_validate(
        {"credentials": [{"host": f"127.0.0.1:{git_server.port}", "token": {"from_file": str(secret)}}]}
    )
    assert isinstance(config.credentials[0], GitCredentialConfig)
    manager = await edge.start(config)
    async with ResultJournal(tmp_path / "journal2.db", 3600) as journal:
        dispatcher = Dispatcher(manager, Policy(), journal)
        sandbox = Sandbox(dispatcher, "sesn_git_e", (app_repo(git_server, token=""),))
        assert isinstance(await sandbox.provision(), Provisioned)
        await sandbox.run("cd /workspace/app && git pull -q && git ls-remote origin >/dev/null")
        assert await sandbox.run(FIND_CANARY) == "0\n0"
        # A delivered token wins over the edge's own credential, even a wrong one.
        wrong = Sandbox(dispatcher, "sesn_git_w", (app_repo(git_server, token="delivered-but-wrong"),))
        outcome = await wrong.provision()
        assert isinstance(outcome, Failure) and outcome.code is ErrorCode.REPOSITORY_AUTHENTICATION_FAILED


async def test_an_unrestricted_sandbox_gets_the_clone_without_the_relay(
    edge: Edge, git_server: GitHttpServer, tmp_path: Path
) -> None:
    """No proxy on its network: ``origin`` stays the repository's own URL (no credential in it)."""
    manager = await edge.start()
    policy = Policy.model_validate({"egress": {"max_mode": "unrestricted"}})
    async with ResultJournal(tmp_path / "journal3.db", 3600) as journal:
        sandbox = Sandbox(Dispatcher(manager, policy, journal), "sesn_git_u", (app_repo(git_server),))
        sandbox.spec = Provision(egress=Egress("unrestricted"), repositories=sandbox.spec.repositories)
        assert isinstance(await sandbox.provision(), Provisioned)
        assert await sandbox.run("cd /workspace/app && git log --format=%s && git remote get-url origin") == (
            f"initial\n{git_server.url('app.git')}"
        )
        assert await sandbox.run(FIND_CANARY) == "0\n0"
