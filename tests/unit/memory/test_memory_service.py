"""``MemoryService`` without HTTP, on the in-memory store: validation of paths, content and hashes,
the depth listing with its cursor, version filters and pages, store updates."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from control_plane.errors import InvalidRequest, NotFound
from control_plane.memory import MemoryService
from control_plane.memory.commands import (
    CreateMemory,
    CreateMemoryStore,
    MemoryPrefix,
    MemoryQuery,
    MemoryVersionQuery,
    UpdateMemory,
    UpdateMemoryStore,
)
from control_plane.memory.limits import check_path, check_path_prefix
from control_plane.store import MemoryStore
from control_plane.store.base import MemoryActor, MemoryRecord

ME = MemoryActor("api_actor", "apikey_me")


def clock() -> datetime:
    return datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def service() -> MemoryService:
    return MemoryService(MemoryStore(), clock, max_memories=50)


async def new_store(service: MemoryService) -> str:
    return (await service.create_store(CreateMemoryStore("notes"))).id


@pytest.mark.parametrize(
    "path",
    ["/a", "/a/b.md", "/" + "/".join(["s"] * 20), "/é", "/with space/and-dash_1.md", "/" + "x" * 1023],
)
def test_valid_paths(path: str) -> None:
    assert check_path(path) == path


@pytest.mark.parametrize(
    "path",
    ["", "a", "/", "/a/", "//a", "/a/./b", "/..", "/" + "/".join(["s"] * 21), "/" + "x" * 1024,
     "/\x7f", "/a\u200eb", "/a\u2029", "/e\u0301", "/\ud800"],
)  # fmt: skip
def test_invalid_paths(path: str) -> None:
    with pytest.raises(InvalidRequest):
        check_path(path)


def test_path_prefixes() -> None:
    assert check_path_prefix("/") == "/"
    assert check_path_prefix("/a/b/") == "/a/b/"
    for bad in ("", "/a", "a/", "//", "/a//", "/../"):
        with pytest.raises(InvalidRequest):
            check_path_prefix(bad)


async def test_depth_listing_pages_through_prefixes(service: MemoryService) -> None:
    sid = await new_store(service)
    for path in ["/a", "/b/1", "/b/2", "/b/c/3", "/c", "/d/e/f/g", "/e"]:
        await service.create_memory(sid, CreateMemory(path, path), ME)

    def shown(items: list[MemoryRecord | MemoryPrefix]) -> list[str]:
        return [i.path if isinstance(i, MemoryPrefix) else "=" + i.path for i in items]

    seen: list[str] = []
    cursor = None
    while True:
        page = await service.list_memories(sid, MemoryQuery(depth=1, limit=2, cursor=cursor))
        seen += shown(list(page.items))
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == ["=/a", "/b/", "=/c", "/d/", "=/e"]
    two = await service.list_memories(sid, MemoryQuery(depth=2, limit=100))
    assert shown(list(two.items)) == ["=/a", "=/b/1", "=/b/2", "/b/c/", "=/c", "/d/e/", "=/e"]
    under = await service.list_memories(sid, MemoryQuery(path_prefix="/b/", depth=1))
    assert shown(list(under.items)) == ["=/b/1", "=/b/2", "/b/c/"]
    full = await service.list_memories(sid, MemoryQuery(limit=100, full=True))
    assert len(full.items) == 7 and all(isinstance(i, MemoryRecord) and i.content for i in full.items)
    with pytest.raises(InvalidRequest):
        await service.list_memories(sid, MemoryQuery(depth=-1))
    with pytest.raises(InvalidRequest):
        await service.list_memories(sid, MemoryQuery(cursor="eyJzIjoxfQ"))  # a versions cursor


async def test_full_view_caps_pages_at_20(service: MemoryService) -> None:
    sid = await new_store(service)
    for n in range(25):
        await service.create_memory(sid, CreateMemory(f"/m{n:02}", "x"), ME)
    page = await service.list_memories(sid, MemoryQuery(limit=100, full=True))
    assert len(page.items) == 20 and page.next_cursor is not None
    assert len((await service.list_memories(sid, MemoryQuery(limit=100))).items) == 25


async def test_version_pages_and_filters(service: MemoryService) -> None:
    sid = await new_store(service)
    made = await service.create_memory(sid, CreateMemory("/a", "0"), ME)
    for n in range(1, 5):
        await service.update_memory(
            sid, made.id, UpdateMemory(content=str(n)), MemoryActor("session_actor", "s1")
        )
    ops: list[str] = []
    cursor = None
    while True:
        page = await service.list_versions(sid, MemoryVersionQuery(limit=2, cursor=cursor, full=True))
        ops += [v.content or "" for v in page.items]
        if (cursor := page.next_cursor) is None:
            break
    assert ops == ["4", "3", "2", "1", "0"]
    by_session = await service.list_versions(sid, MemoryVersionQuery(session_id="s1"))
    assert len(by_session.items) == 4
    both = await service.list_versions(sid, MemoryVersionQuery(session_id="s1", api_key_id="apikey_me"))
    assert both.items == []
    with pytest.raises(InvalidRequest):
        await service.list_versions(sid, MemoryVersionQuery(operation="renamed"))
    with pytest.raises(NotFound):
        await service.list_versions("memstore_unknown", MemoryVersionQuery(service_account_id="svac_1"))


async def test_hash_and_content_checks(service: MemoryService) -> None:
    sid = await new_store(service)
    made = await service.create_memory(sid, CreateMemory("/a", ""), ME)
    with pytest.raises(InvalidRequest):
        await service.update_memory(sid, made.id, UpdateMemory(content="x", expected_sha256="ABC"), ME)
    with pytest.raises(InvalidRequest):
        await service.delete_memory(sid, made.id, "0" * 63, ME)
    with pytest.raises(InvalidRequest):
        await service.create_memory(sid, CreateMemory("/b", "x" * 102_401), ME)
    with pytest.raises(InvalidRequest):
        await service.create_memory(sid, CreateMemory("/b", "\ud800"), ME)


async def test_store_update_rules(service: MemoryService) -> None:
    created = await service.create_store(CreateMemoryStore("notes", "about things", {"a": "1", "b": "2"}))
    same = await service.update_store(created.id, UpdateMemoryStore())
    assert same.version == created.version  # nothing changed
    updated = await service.update_store(
        created.id, UpdateMemoryStore(description=None, metadata={"a": None, "c": "3"})
    )
    assert updated.body == {"name": "notes", "description": "", "metadata": {"b": "2", "c": "3"}}
    for bad in (UpdateMemoryStore(name=None), UpdateMemoryStore(name="x\x1b"), UpdateMemoryStore(name="")):
        with pytest.raises(InvalidRequest):
            await service.update_store(created.id, bad)
