"""Relay routes: the session token is an HMAC of the session id under the edge's key; a lookup needs
the session's token and one of its current repositories."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from edge_agent.git import RelayRoutes, load_or_create_key
from outpost_wire.frames import Repository

A = Repository("sesrsc_a", "https://git.internal/a.git", "/workspace/a", token="tok-a")
B = Repository("sesrsc_b", "https://git.internal/b.git", "/workspace/b")


def test_tokens_are_per_session_and_stable_per_key() -> None:
    key = b"k" * 32
    routes, again, other = RelayRoutes(key), RelayRoutes(key), RelayRoutes(b"o" * 32)
    assert routes.token_for("sesn_1") == again.token_for("sesn_1")
    assert routes.token_for("sesn_1") != routes.token_for("sesn_2")
    assert routes.token_for("sesn_1") != other.token_for("sesn_1")
    assert len(routes.token_for("sesn_1")) == 43 and "=" not in routes.token_for("sesn_1")


def test_lookup_needs_the_sessions_token_and_repository() -> None:
    routes = RelayRoutes()
    routes.update("sesn_1", [A, B])
    routes.update("sesn_2", [B])
    t1, t2 = routes.token_for("sesn_1"), routes.token_for("sesn_2")
    assert routes.lookup("sesn_1", t1, "sesrsc_a") == A
    assert routes.lookup("sesn_1", t2, "sesrsc_a") is None  # another session's token
    assert routes.lookup("sesn_2", t1, "sesrsc_a") is None  # sesn_1's URL from sesn_2's sandbox
    assert routes.lookup("sesn_2", t2, "sesrsc_a") is None  # not sesn_2's repository
    assert routes.lookup("sesn_1", t1, "sesrsc_zzz") is None
    assert routes.sessions() == ["sesn_1", "sesn_2"]


def test_updates_replace_the_set_and_forget_drops_it() -> None:
    routes = RelayRoutes()
    token = routes.token_for("sesn_1")
    routes.update("sesn_1", [A, B])
    rotated = Repository("sesrsc_a", A.url, A.mount_path, token="rotated")
    routes.update("sesn_1", [rotated])  # B removed from the session, A's token rotated
    assert routes.lookup("sesn_1", token, "sesrsc_b") is None
    found = routes.lookup("sesn_1", token, "sesrsc_a")
    assert found is not None and found.token == "rotated"
    routes.update("sesn_1", [])
    assert routes.sessions() == []
    routes.update("sesn_1", [A])
    routes.forget("sesn_1")
    assert routes.lookup("sesn_1", token, "sesrsc_a") is None


def test_the_key_file_is_made_once_0600(tmp_path: Path) -> None:
    path = tmp_path / "git-relay.key"
    key = load_or_create_key(path)
    assert len(key) == 32 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create_key(path) == key
    path.write_bytes(b"short")
    with pytest.raises(ValueError, match="not a git relay key"):
        load_or_create_key(path)
