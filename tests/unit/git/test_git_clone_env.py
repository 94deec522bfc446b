"""The git subprocess environment (the credential scoped to the repository's URL, nothing from the
host's git config), error classification, and ref checks (pure)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from edge_agent.errors import (
    RepositoryAuthenticationFailed,
    RepositoryCheckoutFailed,
    RepositoryError,
    RepositoryForbidden,
    RepositoryNotFound,
)
from edge_agent.git import GitCredential, classify, git_environment, parse_remote
from edge_agent.git.clone import check_checkout
from outpost_wire.errors import ErrorCode
from outpost_wire.frames import Repository


def test_the_credential_is_a_header_scoped_to_the_repository() -> None:
    remote = parse_remote("https://git.internal:8443/org/app.git")
    cred = GitCredential("edge", "bearer", "x", "s3cret")
    env = git_environment(remote, cred, Path("/scratch/home"), host_env={})
    pairs = {
        env[f"GIT_CONFIG_KEY_{i}"]: env[f"GIT_CONFIG_VALUE_{i}"] for i in range(int(env["GIT_CONFIG_COUNT"]))
    }
    assert pairs == {
        "credential.helper": "",
        "http.followRedirects": "false",
        "http.https://git.internal:8443/org/app.git.extraHeader": "Authorization: Bearer s3cret",
    }
    assert env["GIT_TERMINAL_PROMPT"] == "0"
    assert env["GIT_CONFIG_NOSYSTEM"] == "1" and env["GIT_CONFIG_GLOBAL"] == os.devnull
    assert env["GIT_ALLOW_PROTOCOL"] == "https"  # the remote's own transport only
    assert env["HOME"] == "/scratch/home"
    assert not any(k.startswith(("SSH_", "GIT_ASKPASS")) for k in env)


def test_no_credential_no_header() -> None:
    env = git_environment(parse_remote("https://example.com/a.git"), None, Path("/h"))
    assert env["GIT_CONFIG_COUNT"] == "2"
    assert "s3cret" not in repr(env)


def test_only_proxy_and_ca_settings_come_from_the_host() -> None:
    host = {
        "HTTPS_PROXY": "http://proxy.corp:3128",
        "NO_PROXY": ".corp",
        "GIT_SSL_CAINFO": "/etc/ssl/corp.pem",
        "GIT_CONFIG_GLOBAL": "/root/.gitconfig",
        "GIT_ASKPASS": "/usr/bin/helper",
        "PATH": "/opt/evil:/usr/bin",
        "AWS_SECRET_ACCESS_KEY": "nope",
    }
    env = git_environment(parse_remote("https://example.com/a.git"), None, Path("/h"), host_env=host)
    assert env["HTTPS_PROXY"] == "http://proxy.corp:3128" and env["NO_PROXY"] == ".corp"
    assert env["GIT_SSL_CAINFO"] == "/etc/ssl/corp.pem"
    assert env["GIT_CONFIG_GLOBAL"] == os.devnull and env["PATH"] == "/usr/local/bin:/usr/bin:/bin"
    assert "GIT_ASKPASS" not in env and "AWS_SECRET_ACCESS_KEY" not in env


@pytest.mark.parametrize(
    ("stderr", "cls", "code"),
    [
        ("fatal: Authentication failed for 'http://h/a.git/'", RepositoryAuthenticationFailed,
         ErrorCode.REPOSITORY_AUTHENTICATION_FAILED),
        ("fatal: could not read Username for 'http://h': terminal prompts disabled",
         RepositoryAuthenticationFailed, ErrorCode.REPOSITORY_AUTHENTICATION_FAILED),
        ("fatal: unable to access 'http://h/a/': The requested URL returned error: 403", RepositoryForbidden,
         ErrorCode.REPOSITORY_FORBIDDEN),
        ("fatal: repository 'http://h/nope.git/' not found", RepositoryNotFound,
         ErrorCode.REPOSITORY_NOT_FOUND),
        ("fatal: Remote branch nope not found in upstream origin", RepositoryCheckoutFailed,
         ErrorCode.REPOSITORY_CHECKOUT_FAILED),
        ("fatal: unable to access 'http://h/': Failed to connect to h port 80", RepositoryError,
         ErrorCode.REPOSITORY_CLONE_FAILED),
    ],
)  # fmt: skip
def test_classify(stderr: str, cls: type[RepositoryError], code: ErrorCode) -> None:
    assert classify(stderr) is cls
    exc = cls("https://h/a.git", "why")
    assert exc.code is code and str(exc) == "repository https://h/a.git: why" and exc.url == "https://h/a.git"


@pytest.mark.parametrize(
    ("kind", "ref", "ok"),
    [
        ("branch", "main", True),
        ("branch", "feature/x-1", True),
        ("branch", "--upload-pack=evil", False),
        ("branch", "a..b", False),
        ("branch", "a b", False),
        ("branch", "x.lock", False),
        ("commit", "0123abc", True),
        ("commit", "a" * 40, True),
        ("commit", "HEAD~1", False),
        ("commit", "--detach", False),
    ],
)
def test_check_checkout(kind: str, ref: str, ok: bool) -> None:
    repo = Repository("sesrsc_1", "https://h/a.git", "/workspace/a", kind, ref)
    if ok:
        check_checkout(repo)
    else:
        with pytest.raises(RepositoryCheckoutFailed):
            check_checkout(repo)
