"""Repository tokens sealed with the vault's crypto, bound to session, resource and URL; the spec
the edge gets; purge at archive."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest

from control_plane.sessions.repositories import RESOURCE_KIND, parse_resources, repository_body
from control_plane.sessions.repository_tokens import (
    RepositoryTokens,
    list_repositories,
    repository_aad,
    to_wire,
)
from control_plane.store.base import Resource
from control_plane.store.sqlite import SqliteStore
from control_plane.vault import DecryptionFailed, FileKek, Keyring
from outpost_wire.frames import Repository

TOKEN = "canary-sealed-token-1b7c"
T0 = datetime(2026, 5, 1, tzinfo=UTC)
URL = "https://git.internal/org/app.git"


def resource(session_id: str, resource_id: str, sealed: dict[str, str] | None, url: str = URL) -> Resource:
    (parsed,) = parse_resources(
        [{"type": "github_repository", "url": url, "checkout": {"type": "commit", "sha": "a" * 40}}]
    )
    return Resource(RESOURCE_KIND, resource_id, 1, repository_body(session_id, parsed, sealed), T0, T0)


async def test_seal_open_and_binding() -> None:
    tokens = RepositoryTokens(Keyring(FileKek.generate()))
    sealed = await tokens.seal("sesn_1", "sesrsc_1", URL, TOKEN)
    assert TOKEN not in str(sealed)
    assert await tokens.open(resource("sesn_1", "sesrsc_1", sealed)) == TOKEN
    assert await tokens.open(resource("sesn_1", "sesrsc_1", None)) == ""
    for moved in (
        resource("sesn_2", "sesrsc_1", sealed),  # another session
        resource("sesn_1", "sesrsc_2", sealed),  # another resource
        resource("sesn_1", "sesrsc_1", sealed, url="https://evil.example/org/app.git"),  # re-pointed
    ):
        with pytest.raises(DecryptionFailed):
            await tokens.open(moved)
    assert repository_aad("a", "b", "c") != repository_aad("a", "bc", "")


async def test_spec_repositories_opens_tokens_and_survives_a_bad_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tokens = RepositoryTokens(Keyring(FileKek.generate()))
    good = resource("sesn_1", "sesrsc_1", await tokens.seal("sesn_1", "sesrsc_1", URL, TOKEN))
    other = RepositoryTokens(Keyring(FileKek.generate()))
    bad = resource("sesn_1", "sesrsc_2", await other.seal("sesn_1", "sesrsc_2", URL, "x" * 8))
    caplog.set_level(logging.DEBUG)
    spec = await tokens.spec_repositories([good, bad])
    assert spec == (
        Repository("sesrsc_1", URL, "/workspace/app", "commit", "a" * 40, TOKEN),
        Repository("sesrsc_2", URL, "/workspace/app", "commit", "a" * 40, ""),
    )
    assert "sesrsc_2" in caplog.text and TOKEN not in caplog.text
    assert to_wire(good).token == ""


async def test_list_and_purge(tmp_path: Path) -> None:
    tokens = RepositoryTokens(Keyring(FileKek.generate()))
    async with SqliteStore(tmp_path / "db") as store:
        for sid, rid in (("sesn_1", "sesrsc_1"), ("sesn_1", "sesrsc_2"), ("sesn_2", "sesrsc_3")):
            res = resource(sid, rid, await tokens.seal(sid, rid, URL, TOKEN))
            await store.create_resource(RESOURCE_KIND, rid, res.body, T0)
        mine = await list_repositories(store, "sesn_1")
        assert [r.id for r in mine] == ["sesrsc_1", "sesrsc_2"]
        await RepositoryTokens.purge(store, mine)
        assert [r.body["sealed"] for r in await list_repositories(store, "sesn_1")] == [None, None]
        (kept,) = await list_repositories(store, "sesn_2")
        assert await tokens.open(kept) == TOKEN
