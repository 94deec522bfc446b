"""The edge's ``repositories`` rule at the git layer: scheme, hosts and addresses are checked
before git runs (nothing is dialled), and git is pinned to the checked addresses."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from pydantic import ValidationError

from edge_agent.errors import RepositoryError, RepositoryRefused
from edge_agent.git import GitCloner, git_environment, parse_remote
from edge_agent.git.policy import RepositoryPolicy
from edge_agent.policy import Policy
from outpost_wire.errors import ErrorCode
from outpost_wire.frames import Repository


def _resolver(*answer: str):  # type: ignore[no-untyped-def]
    async def resolver(host: str, port: int) -> Sequence[str]:
        return list(answer)

    return resolver


def test_nothing_is_allowed_by_default() -> None:
    assert Policy().repositories == RepositoryPolicy()
    with pytest.raises(RepositoryRefused) as caught:
        RepositoryPolicy().check(parse_remote("https://github.com/org/app.git"))
    assert caught.value.rule == "repositories.allowed_hosts"
    assert caught.value.code is ErrorCode.REPOSITORY_CLONE_FAILED  # a repository_clone_error
    assert "policy rule: repositories.allowed_hosts" in caught.value.message


@pytest.mark.parametrize(
    ("url", "rule"),
    [
        ("http://git.corp.example/a.git", "repositories.allow_http"),
        ("https://evil.example/a.git", "repositories.allowed_hosts"),
        ("https://corp.example/a.git", "repositories.allowed_hosts"),  # *.corp.example: subdomains only
        ("https://127.0.0.1/a.git", "repositories.address.loopback"),
        ("https://169.254.169.254/a.git", "repositories.address.metadata"),
        ("https://[::ffff:127.0.0.1]/a.git", "repositories.allowed_hosts"),  # no IPv6 entries exist
    ],
)
def test_refusals_name_the_rule(url: str, rule: str) -> None:
    # Even hosts the operator listed are refused when their address is not public.
    policy = RepositoryPolicy(allowed_hosts=("*.corp.example", "127.0.0.1", "169.254.169.254"))
    with pytest.raises(RepositoryRefused) as caught:
        policy.check(parse_remote(url))
    assert caught.value.rule == rule


async def test_resolution_checks_every_address_and_pins_them() -> None:
    policy = RepositoryPolicy(allowed_hosts=("git.corp.example",))
    remote = parse_remote("https://git.corp.example/a.git")
    with pytest.raises(RepositoryRefused) as caught:
        await policy.resolve(remote, resolver=_resolver("93.184.216.34", "10.0.0.5"))
    assert caught.value.rule == "repositories.address.private"
    allowing = RepositoryPolicy(allowed_hosts=("git.corp.example",), allow_networks=("10.0.0.0/8",))
    pinned = await allowing.resolve(remote, resolver=_resolver("10.0.0.5"))
    assert [str(a) for a in pinned.addresses] == ["10.0.0.5"]
    env = git_environment(remote, None, Path("/h"), pinned=pinned, host_env={})
    pairs = {
        env[f"GIT_CONFIG_KEY_{i}"]: env[f"GIT_CONFIG_VALUE_{i}"] for i in range(int(env["GIT_CONFIG_COUNT"]))
    }
    assert pairs["http.curloptResolve"] == "git.corp.example:443:10.0.0.5"
    assert pairs["http.followRedirects"] == "false"
    assert env["GIT_ALLOW_PROTOCOL"] == "https"


async def test_the_cloner_refuses_before_git_runs(tmp_path: Path) -> None:
    marker = tmp_path / "git-ran"
    fake_git = tmp_path / "git"
    fake_git.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    fake_git.chmod(0o755)
    policy = RepositoryPolicy(allowed_hosts=("git.rebind.test", "127.0.0.1"), allow_http=True)
    cloner = GitCloner(git=str(fake_git), policy=policy, resolver=_resolver("127.0.0.1"))
    (tmp_path / "scratch").mkdir()
    for url, rule in (
        ("http://127.0.0.1:9/a.git", "repositories.address.loopback"),
        ("http://git.rebind.test/a.git", "repositories.address.loopback"),  # a name resolving to it
        ("https://169.254.169.254/a.git", "repositories.allowed_hosts"),
    ):
        repo = Repository("r", url, "/workspace/a")
        with pytest.raises(RepositoryError) as caught:
            await cloner.clone(repo, parse_remote(url), tmp_path / "scratch" / "tree", None, origin_url="x")
        assert isinstance(caught.value, RepositoryRefused) and caught.value.rule == rule
    assert not marker.exists()


def test_policy_file_validation() -> None:
    policy = Policy.model_validate(
        {
            "repositories": {
                "allowed_hosts": ["GitHub.com", "*.corp.example"],
                "allow_networks": ["10.0.0.0/8"],
            }
        }
    )
    assert policy.repositories.allowed_hosts == ("*.corp.example", "github.com")
    for bad in ({"allowed_hosts": ["https://github.com"]}, {"allowed_hosts": ["*.10.0.0.1"]},
                {"allow_networks": ["nope"]}, {"allowed": []}):  # fmt: skip
        with pytest.raises(ValidationError):
            Policy.model_validate({"repositories": bad})
