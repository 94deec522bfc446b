"""``github_repository`` create params: validation, defaults, the stored body and the API view."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from control_plane.errors import InvalidRequest
from control_plane.sessions.repositories import (
    RESOURCE_KIND,
    parse_resources,
    repository_body,
    repository_json,
)
from control_plane.store.base import Resource

TOKEN = "canary-api-token-3e8f"
T0 = datetime(2026, 5, 1, tzinfo=UTC)


def repo(**fields: Any) -> dict[str, Any]:
    return {"type": "github_repository", "url": "https://git.internal:8443/org/app.git", **fields}


def test_defaults_and_normalization() -> None:
    (parsed,) = parse_resources([repo(url="HTTPS://Git.Internal:443/org/app.git", authorization_token=TOKEN)])
    assert parsed.url == "https://git.internal/org/app.git"
    assert parsed.mount_path == "/workspace/app"
    assert parsed.checkout is None
    assert parsed.token == TOKEN and TOKEN not in repr(parsed)


def test_checkout_and_mount_path() -> None:
    branch, commit, plain = parse_resources(
        [
            repo(checkout={"type": "branch", "name": "feature/x"}, mount_path="/workspace/src/app"),
            repo(url="http://127.0.0.1:8080/lib", checkout={"type": "commit", "sha": "ABCDEF0"}),
            repo(url="https://example.com/org/site/"),
        ]
    )
    assert branch.checkout == {"type": "branch", "name": "feature/x"}
    assert branch.mount_path == "/workspace/src/app"
    assert commit.checkout == {"type": "commit", "sha": "abcdef0"}
    assert commit.mount_path == "/workspace/lib" and commit.url == "http://127.0.0.1:8080/lib"
    assert plain.mount_path == "/workspace/site"


@pytest.mark.parametrize(
    ("item", "param"),
    [
        ({"type": "dataset", "file_id": "file_1"}, "resources[0].type"),
        ({"type": "git"}, "resources[0].type"),
        ("https://x/y.git", "resources[0]"),
        (repo(extra=1), "resources[0]"),
        (repo(url=None), "resources[0].url"),
        (repo(url="git@github.com:org/app.git"), "resources[0].url"),
        (repo(url="ssh://github.com/org/app.git"), "resources[0].url"),
        (repo(url=f"https://x:{TOKEN}@github.com/org/app.git"), "resources[0].url"),
        (repo(url="https://github.com/org/app.git?ref=main"), "resources[0].url"),
        (repo(url="https://github.com/"), "resources[0].url"),
        (repo(url="https://github.com/org/app .git"), "resources[0].url"),
        (repo(authorization_token=""), "resources[0].authorization_token"),
        (repo(authorization_token="has space"), "resources[0].authorization_token"),
        (repo(authorization_token=123), "resources[0].authorization_token"),
        (repo(checkout={"type": "tag", "name": "v1"}), "resources[0].checkout"),
        (repo(checkout={"type": "branch", "name": "--upload-pack=x"}), "resources[0].checkout.name"),
        (repo(checkout={"type": "commit", "sha": "HEAD~1"}), "resources[0].checkout.sha"),
        (repo(mount_path="/etc/app"), "resources[0].mount_path"),
        (repo(mount_path="/workspace"), "resources[0].mount_path"),
        (repo(mount_path="/workspace/../etc"), "resources[0].mount_path"),
        (repo(mount_path="relative"), "resources[0].mount_path"),
        (repo(url="https://example.com/org/%2e%2e"), "resources[0].mount_path"),
    ],
)
def test_refusals_name_the_field_and_never_echo_the_token(item: Any, param: str) -> None:
    if isinstance(item, dict) and "authorization_token" not in item:
        item = {**item, "authorization_token": TOKEN} if item.get("type") == "github_repository" else item
    with pytest.raises(InvalidRequest) as info:
        parse_resources([item])
    assert info.value.param == param
    assert TOKEN not in str(info.value)


def test_mount_paths_may_not_overlap_and_the_count_is_capped() -> None:
    with pytest.raises(InvalidRequest, match="overlaps") as info:
        parse_resources([repo(), repo(url="https://other.example/x/app")])
    assert info.value.param == "resources[1].mount_path"
    with pytest.raises(InvalidRequest, match="overlaps"):
        parse_resources([repo(mount_path="/workspace/a"), repo(mount_path="/workspace/a/b")])
    parse_resources([repo(mount_path="/workspace/a"), repo(mount_path="/workspace/ab")])
    with pytest.raises(InvalidRequest, match="at most 16"):
        parse_resources([repo(mount_path=f"/workspace/{i}") for i in range(17)])


def test_stored_body_and_view() -> None:
    (parsed,) = parse_resources(
        [repo(authorization_token=TOKEN, checkout={"type": "branch", "name": "main"})]
    )
    sealed = {"key_id": "kek_1", "wrapped_dek": "w", "nonce": "n", "ciphertext": "c"}
    body = repository_body("sesn_1", parsed, sealed)
    assert body == {
        "session_id": "sesn_1",
        "type": "github_repository",
        "url": "https://git.internal:8443/org/app.git",
        "mount_path": "/workspace/app",
        "checkout": {"type": "branch", "name": "main"},
        "sealed": sealed,
    }
    view = repository_json(Resource(RESOURCE_KIND, "sesrsc_1", 1, body, T0, T0))
    assert view == {
        "type": "github_repository",
        "id": "sesrsc_1",
        "url": "https://git.internal:8443/org/app.git",
        "mount_path": "/workspace/app",
        "checkout": {"type": "branch", "name": "main"},
        "created_at": "2026-05-01T00:00:00Z",
        "updated_at": "2026-05-01T00:00:00Z",
    }
