"""``GitCloner`` against the authenticated git HTTP server on 127.0.0.1 (no Docker): the credential
reaches the server but never the command line, the clone's files or its config; failures are
typed."""

from __future__ import annotations

import asyncio
import socket
import stat
import subprocess
from pathlib import Path

import pytest

from edge_agent.errors import (
    RepositoryAuthenticationFailed,
    RepositoryCheckoutFailed,
    RepositoryError,
    RepositoryNotFound,
    RepositoryRefused,
)
from edge_agent.git import GitCloner, GitCredential, RepositoryPolicy, parse_remote
from outpost_wire.frames import Repository
from tests.integration.git._git_support import CANARY, LOOPBACK_REPOS
from tests.support.git_server import GitHttpServer, git

RELAY = "http://10.0.0.1:3128/git/session-token/sesrsc_1"


def credential(secret: str = CANARY) -> GitCredential:
    return GitCredential("delivered", "basic", "x-access-token", secret)


def every_byte_under(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.is_symlink())


@pytest.fixture
def recording_git(tmp_path: Path) -> tuple[str, Path]:
    """A ``git`` that logs its argv, then runs the real one (to check the command lines)."""
    log = tmp_path / "argv.log"
    script = tmp_path / "git-wrapper"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {log}\nexec /usr/bin/git "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script), log


async def test_clone_with_the_credential_outside_the_clone(
    git_server: GitHttpServer, tmp_path: Path, recording_git: tuple[str, Path]
) -> None:
    wrapper, argv_log = recording_git
    repo = Repository("sesrsc_1", git_server.url("app.git"), "/workspace/app", token=CANARY)
    dest = tmp_path / "scratch" / "tree"
    dest.parent.mkdir()
    cloner = GitCloner(git=wrapper, policy=LOOPBACK_REPOS)
    await cloner.clone(repo, parse_remote(repo.url), dest, credential(), origin_url=RELAY)
    assert (dest / "README.md").read_text() == "hello from upstream\n"
    assert git("remote", "get-url", "origin", cwd=dest) == RELAY
    assert git("rev-parse", "--abbrev-ref", "HEAD", cwd=dest) == "main"
    assert CANARY.encode() not in every_byte_under(dest)
    assert CANARY not in argv_log.read_text()
    assert {s.authorization for s in git_server.seen} == {"ok"}


async def test_git_is_pinned_to_the_checked_address(git_server: GitHttpServer, tmp_path: Path) -> None:
    """A name the edge resolved (to the loopback server) is the only address real git dials: the
    name itself does not resolve on this host, so the clone works only through the pin."""

    async def resolver(host: str, port: int) -> list[str]:
        assert host == "git.pinned.invalid"
        return ["127.0.0.1"]

    policy = RepositoryPolicy(
        allowed_hosts=("git.pinned.invalid",), allow_http=True, allow_networks=("127.0.0.0/8",)
    )
    url = f"http://git.pinned.invalid:{git_server.port}/app.git"
    repo = Repository("r", url, "/workspace/app")
    await GitCloner(policy=policy, resolver=resolver).clone(
        repo, parse_remote(url), tmp_path / "tree", credential(), origin_url=RELAY
    )
    assert (tmp_path / "tree" / "README.md").read_text() == "hello from upstream\n"
    # Without the operator's allow_networks the same clone is refused before git runs.
    strict = RepositoryPolicy(allowed_hosts=("git.pinned.invalid",), allow_http=True)
    before = len(git_server.seen)
    with pytest.raises(RepositoryRefused, match=r"repositories\.address\.loopback"):
        await GitCloner(policy=strict, resolver=resolver).clone(
            repo, parse_remote(url), tmp_path / "tree2", None, origin_url=RELAY
        )
    assert len(git_server.seen) == before


async def test_branch_and_commit_checkouts(git_server: GitHttpServer, tmp_path: Path, repos: Path) -> None:
    cloner = GitCloner(policy=LOOPBACK_REPOS)
    url = git_server.url("app.git")
    feature = Repository("r1", url, "/workspace/f", "branch", "feature")
    await cloner.clone(feature, parse_remote(url), tmp_path / "f", credential(), origin_url=RELAY)
    assert (tmp_path / "f" / "feature.txt").exists()
    first = git("rev-list", "--max-parents=0", "main", cwd=repos / "app.git")
    pinned = Repository("r2", url, "/workspace/p", "commit", first[:10])
    await cloner.clone(pinned, parse_remote(url), tmp_path / "p", credential(), origin_url=RELAY)
    assert git("rev-parse", "HEAD", cwd=tmp_path / "p") == first
    assert not (tmp_path / "p" / "feature.txt").exists()


@pytest.mark.parametrize(
    ("repo_name", "checkout", "secret", "cls", "message"),
    [
        ("app.git", ("", ""), "wrong-secret", RepositoryAuthenticationFailed, "refused the session's"),
        ("app.git", ("", ""), None, RepositoryAuthenticationFailed, "neither the session"),
        ("missing.git", ("", ""), CANARY, RepositoryNotFound, "not found"),
        ("app.git", ("branch", "nope"), CANARY, RepositoryCheckoutFailed, "nope not found"),
        (
            "app.git",
            ("commit", "0123456789abcdef"),
            CANARY,
            RepositoryCheckoutFailed,
            "not in the repository",
        ),
    ],
)
async def test_failures_are_typed_and_redacted(
    git_server: GitHttpServer,
    tmp_path: Path,
    repo_name: str,
    checkout: tuple[str, str],
    secret: str | None,
    cls: type[RepositoryError],
    message: str,
) -> None:
    url = git_server.url(repo_name)
    repo = Repository("r", url, "/workspace/x", *checkout)
    with pytest.raises(RepositoryError) as info:
        await GitCloner(policy=LOOPBACK_REPOS).clone(
            repo, parse_remote(url), tmp_path / "x", credential(secret) if secret else None, origin_url=RELAY
        )
    assert type(info.value) is cls
    assert message in str(info.value) and str(info.value).startswith(f"repository {url}: ")
    assert CANARY not in str(info.value) and "wrong-secret" not in str(info.value)


async def test_an_unreachable_server_and_a_timeout(tmp_path: Path) -> None:
    url = "http://127.0.0.1:9/nothing.git"  # discard port: nothing listens
    with pytest.raises(RepositoryError) as info:
        cloner = GitCloner(policy=LOOPBACK_REPOS)
        await cloner.clone(Repository("r", url, "/workspace/x"), parse_remote(url), tmp_path / "x", None,
                           origin_url=RELAY)  # fmt: skip
    assert type(info.value) is RepositoryError and "Failed to connect" in str(info.value)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/slow.git"  # accepts, never answers
        with pytest.raises(RepositoryError, match=r"did not finish within 0\.5 s"):
            # 0.5 s: the clone timeout itself is what this test checks, without waiting the default.
            await GitCloner(timeout_s=0.5, policy=LOOPBACK_REPOS).clone(
                Repository("r", url, "/workspace/y"),
                parse_remote(url),
                tmp_path / "y",
                None,
                origin_url=RELAY,
            )
    finally:
        listener.close()
    helpers = subprocess.run(["pgrep", "-f", "remote-http.*slow.git"], capture_output=True, check=False)
    assert helpers.stdout == b"", "git's helper outlived the timeout"


async def test_redirects_are_not_followed(git_server: GitHttpServer, tmp_path: Path) -> None:
    """A server answering with a redirect (to a repository the clone could read) fails the clone:
    git runs with http.followRedirects=false, so the target sees no request."""
    target = git_server.url("app.git")

    async def redirect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        path = head.split(b" ")[1].decode().split("/", 2)[2]  # /moved.git/<rest>
        writer.write(
            f"HTTP/1.1 301 Moved\r\nLocation: {target}/{path}\r\nContent-Length: 0\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(redirect, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/moved.git"
    try:
        with pytest.raises(RepositoryError):
            await GitCloner(policy=LOOPBACK_REPOS).clone(
                Repository("r", url, "/workspace/m"),
                parse_remote(url),
                tmp_path / "m",
                None,
                origin_url=RELAY,
            )
    finally:
        server.close()
        await server.wait_closed()
    assert git_server.seen == []
