"""Repository URLs, relay URLs and paths, workspace paths, redaction (pure)."""

from __future__ import annotations

import pytest

from edge_agent.git.remote import (
    parse_relay_path,
    parse_remote,
    redact,
    relay_url,
    workspace_relative,
)


@pytest.mark.parametrize(
    ("url", "authority", "normalized"),
    [
        (
            "https://git.internal:8443/org/app.git",
            "git.internal:8443",
            "https://git.internal:8443/org/app.git",
        ),
        ("HTTPS://GitHub.com:443/org/app", "github.com", "https://github.com/org/app"),
        ("http://127.0.0.1:80/app.git", "127.0.0.1", "http://127.0.0.1/app.git"),
        ("http://[::1]:8080/a", "[::1]:8080", "http://[::1]:8080/a"),
        ("https://example.com", "example.com", "https://example.com/"),
    ],
)
def test_remote_authority_and_url(url: str, authority: str, normalized: str) -> None:
    remote = parse_remote(url)
    assert remote.authority == authority
    assert remote.url == normalized
    assert remote.endpoint("/info/refs") == normalized.rstrip("/") + "/info/refs"


@pytest.mark.parametrize(
    ("url", "rule"),
    [
        ("ssh://git@example.com/a.git", "only http"),
        ("git@example.com:a.git", "only http"),
        ("file:///srv/a.git", "only http"),
        ("https://user:tok@example.com/a.git", "user info"),
        ("https://tok@example.com/a.git", "user info"),
        ("https://example.com/a.git?x=1", "query"),
        ("https://example.com/a.git#frag", "query or fragment"),
        ("https:///a.git", "no host"),
        ("https://example.com:99999/a", "not a valid URL"),
    ],
)
def test_refused_remotes(url: str, rule: str) -> None:
    with pytest.raises(ValueError, match=rule):
        parse_remote(url)


def test_relay_url_round_trips_through_the_path_parser() -> None:
    url = relay_url("http://172.18.0.1:41234/", "tok_EN-abc", "sesrsc_0123")
    assert url == "http://172.18.0.1:41234/git/tok_EN-abc/sesrsc_0123"
    path = url.removeprefix("http://172.18.0.1:41234")
    target = parse_relay_path(path + "/info/refs")
    assert target is not None
    assert (target.session_token, target.repository_id, target.service_path, target.method) == (
        "tok_EN-abc",
        "sesrsc_0123",
        "/info/refs",
        "GET",
    )
    upload = parse_relay_path(path + "/git-upload-pack")
    receive = parse_relay_path(path + "/git-receive-pack")
    assert upload is not None and upload.method == "POST"
    assert receive is not None and receive.method == "POST"


@pytest.mark.parametrize(
    "path",
    [
        "/git/tok/sesrsc_1/HEAD",  # dumb protocol
        "/git/tok/sesrsc_1/objects/info/packs",
        "/git/tok/sesrsc_1",
        "/git/tok",
        "/git/../sesrsc_1/info/refs",
        "/git/tok/sesrsc_1/info/refs/../../x",
        "/other/tok/sesrsc_1/info/refs",
        "/git/to%2Fk/sesrsc_1/info/refs",
    ],
)
def test_paths_the_relay_does_not_serve(path: str) -> None:
    assert parse_relay_path(path) is None


@pytest.mark.parametrize(
    ("mount_path", "relative"),
    [("/workspace/app", "app"), ("/workspace/a/b", "a/b"), ("/workspace/.hidden", ".hidden")],
)
def test_workspace_relative(mount_path: str, relative: str) -> None:
    assert workspace_relative(mount_path) == relative


@pytest.mark.parametrize(
    "mount_path",
    [
        "/workspace",
        "/workspace/",
        "/etc/app",
        "/workspace/../etc",
        "workspace/app",
        "/workspace/a//b",
        "/tmp",
    ],
)
def test_mount_paths_outside_the_workspace_are_refused(mount_path: str) -> None:
    with pytest.raises(ValueError, match="mount_path"):
        workspace_relative(mount_path)


def test_redact_replaces_every_secret_longest_first() -> None:
    text = "auth Basic eC1hY2Nlc3MtdG9rZW46czNjcjN0 and s3cr3t and s3cr3t-long"
    out = redact(text, ["s3cr3t", "s3cr3t-long", "", "eC1hY2Nlc3MtdG9rZW46czNjcjN0"])
    assert out == "auth Basic *** and *** and ***"
