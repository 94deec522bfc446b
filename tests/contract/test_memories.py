"""The ``Memories`` role on every backend: atomic writes with preconditions, unique paths, one
version per write (numbered per store), redaction, listing by path, and the store's deletion
taking its memories along. Concurrent writers race through ``asyncio.gather`` on one store
object (several connections on PostgreSQL, the single writer on SQLite)."""

from __future__ import annotations

import asyncio
import hashlib
import secrets

import pytest

from control_plane.errors import InvalidRequest, MemoryPathConflict, MemoryPreconditionFailed, NotFound
from control_plane.store import Store
from control_plane.store.base import MEMORY_STORE_KIND, MemoryActor, MemoryVersionFilter, MemoryWrite, Order
from tests.support.store_contract import at

API = MemoryActor("api_actor", "apikey_1")
SESSION = MemoryActor("session_actor", "sesn_1")


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def write(t: float = 1, actor: MemoryActor | None = API) -> MemoryWrite:
    return MemoryWrite("memver_" + secrets.token_hex(6), actor, at(t))


async def new_store(store: Store, id: str = "memstore_1") -> str:
    await store.create_resource(MEMORY_STORE_KIND, id, {"name": id}, at(0))
    return id


async def test_create_get_update_delete_with_versions(store: Store) -> None:
    sid = await new_store(store)
    created = await store.create_memory(sid, "mem_1", "/notes/a.md", "hello", write(1), max_memories=10)
    assert created.content_sha256 == sha("hello") and created.content_size_bytes == 5
    assert (await store.get_memory(sid, "mem_1")).content == "hello"
    assert (await store.get_memory(sid, "mem_1", with_content=False)).content is None

    updated = await store.update_memory(
        sid,
        "mem_1",
        write(2, SESSION),
        content="hello, world",
        path="/notes/b.md",
        expected_sha256=sha("hello"),
    )
    assert updated.path == "/notes/b.md" and updated.content_sha256 == sha("hello, world")
    assert updated.created_at == at(1) and updated.updated_at == at(2)
    same = await store.update_memory(sid, "mem_1", write(3), content="hello, world")
    assert same.version_id == updated.version_id  # nothing changed: no version

    await store.delete_memory(sid, "mem_1", write(4), expected_sha256=sha("hello, world"))
    with pytest.raises(NotFound):
        await store.get_memory(sid, "mem_1")

    versions = await store.list_memory_versions(sid, MemoryVersionFilter(), with_content=True)
    assert [(v.seq, v.operation) for v in versions] == [(3, "deleted"), (2, "modified"), (1, "created")]
    deleted, modified, first = versions
    assert deleted.path == "/notes/b.md" and deleted.content is None and deleted.content_sha256 is None
    assert modified.created_by == SESSION and modified.content == "hello, world"
    assert first.created_by == API and first.path == "/notes/a.md" and first.content == "hello"
    assert first.id == created.version_id
    oldest_first = await store.list_memory_versions(sid, MemoryVersionFilter(after_seq=1), order=Order.ASC)
    assert [v.seq for v in oldest_first] == [2, 3]
    assert oldest_first[0].content is None  # not asked for
    by_session = await store.list_memory_versions(sid, MemoryVersionFilter(actor=SESSION))
    assert [v.operation for v in by_session] == ["modified"]
    in_time = await store.list_memory_versions(
        sid, MemoryVersionFilter(created_after=at(2), created_before=at(3))
    )
    assert [v.seq for v in in_time] == [2]


async def test_preconditions_and_paths(store: Store) -> None:
    sid = await new_store(store)
    await store.create_memory(sid, "mem_a", "/a", "A", write(), max_memories=10)
    await store.create_memory(sid, "mem_b", "/b", "B", write(), max_memories=10)
    with pytest.raises(MemoryPathConflict) as caught:
        await store.create_memory(sid, "mem_c", "/a", "C", write(), max_memories=10)
    assert caught.value.conflicting_memory_id == "mem_a"
    with pytest.raises(MemoryPathConflict):
        await store.update_memory(sid, "mem_b", write(), path="/a")
    with pytest.raises(MemoryPreconditionFailed):
        await store.update_memory(sid, "mem_b", write(), content="x", expected_sha256=sha("not B"))
    with pytest.raises(MemoryPreconditionFailed):
        await store.delete_memory(sid, "mem_b", write(), expected_sha256=sha("not B"))
    assert (await store.get_memory(sid, "mem_b")).content == "B"
    assert len(await store.list_memory_versions(sid, MemoryVersionFilter())) == 2  # refusals wrote nothing
    await store.create_memory(sid, "mem_A", "/A", "case-sensitive", write(), max_memories=10)
    with pytest.raises(InvalidRequest):
        await store.create_memory(sid, "mem_d", "/d", "", write(), max_memories=3)  # the cap


async def test_unknown_and_archived_stores(store: Store) -> None:
    with pytest.raises(NotFound) as caught:
        await store.create_memory("memstore_x", "mem_1", "/a", "", write(), max_memories=10)
    assert caught.value.kind == MEMORY_STORE_KIND
    with pytest.raises(NotFound):
        await store.list_memories("memstore_x")
    sid = await new_store(store)
    await store.create_memory(sid, "mem_1", "/a", "1", write(), max_memories=10)
    await store.create_memory(sid, "mem_2", "/b", "2", write(), max_memories=10)
    with pytest.raises(NotFound):
        await store.get_memory(await new_store(store, "memstore_2"), "mem_1")  # another store's
    await store.archive_resource(MEMORY_STORE_KIND, sid, at(5))
    with pytest.raises(InvalidRequest):
        await store.create_memory(sid, "mem_3", "/c", "", write(), max_memories=10)
    with pytest.raises(InvalidRequest):
        await store.update_memory(sid, "mem_1", write(), content="changed")
    await store.delete_memory(sid, "mem_2", write())  # deletes still work
    assert [m.id for m in await store.list_memories(sid)] == ["mem_1"]


async def test_list_by_path_prefix_in_code_point_order(store: Store) -> None:
    sid = await new_store(store)
    paths = ["/notes/b", "/notes/a/deep", "/notes-archive/x", "/Zeta", "/é", "/notes/a0", "/z"]
    for i, path in enumerate(paths):
        await store.create_memory(sid, f"mem_{i}", path, path, write(), max_memories=100)
    listed = [m.path for m in await store.list_memories(sid)]
    assert listed == sorted(paths)  # code-point order: "/Zeta" < "/notes..." < "/z" < "/é"
    under = [m.path for m in await store.list_memories(sid, path_prefix="/notes/", with_content=True)]
    assert under == ["/notes/a/deep", "/notes/a0", "/notes/b"]
    page = await store.list_memories(sid, path_prefix="/notes/", path_from="/notes/a0", limit=1)
    assert [m.path for m in page] == ["/notes/a0"]
    assert page[0].content is None


async def test_redaction(store: Store) -> None:
    sid = await new_store(store)
    created = await store.create_memory(
        sid, "mem_1", "/secret", "password=hunter2", write(1), max_memories=10
    )
    with pytest.raises(InvalidRequest):  # it holds the memory's current content
        await store.redact_memory_version(sid, created.version_id, API, at(2))
    await store.update_memory(sid, "mem_1", write(2), content="nothing to see")
    redacted = await store.redact_memory_version(sid, created.version_id, API, at(3))
    assert redacted.redacted_at == at(3) and redacted.redacted_by == API
    assert (redacted.path, redacted.content, redacted.content_sha256, redacted.content_size_bytes) == (
        None,
        None,
        None,
        None,
    )
    assert redacted.operation == "created" and redacted.created_by == API
    again = await store.redact_memory_version(sid, created.version_id, SESSION, at(4))
    assert again.redacted_at == at(3) and again.redacted_by == API  # the first redaction stands
    assert (await store.get_memory_version(sid, created.version_id)).content is None
    with pytest.raises(NotFound):
        await store.get_memory_version(sid, "memver_unknown")


async def test_deleting_the_store_deletes_its_memories(store: Store) -> None:
    sid = await new_store(store)
    await store.create_memory(sid, "mem_1", "/a", "1", write(), max_memories=10)
    await store.delete_resource(MEMORY_STORE_KIND, sid)
    await new_store(store)  # the same id again starts empty
    assert await store.list_memories(sid) == []
    assert await store.list_memory_versions(sid, MemoryVersionFilter()) == []
    await store.archive_resource(MEMORY_STORE_KIND, sid, at(1))
    await store.create_resource(MEMORY_STORE_KIND, "memstore_2", {"name": "b"}, at(0))
    await store.create_memory("memstore_2", "mem_2", "/b", "2", write(), max_memories=10)
    assert await store.prune_archived(MEMORY_STORE_KIND, at(10)) == [sid]
    assert len(await store.list_memories("memstore_2")) == 1


async def test_concurrent_updates_with_one_precondition_one_wins(store: Store) -> None:
    sid = await new_store(store)
    await store.create_memory(sid, "mem_1", "/shared", "v0", write(), max_memories=10)

    async def attempt(n: int) -> str:
        try:
            await store.update_memory(sid, "mem_1", write(2), content=f"v{n}", expected_sha256=sha("v0"))
        except MemoryPreconditionFailed:
            return "lost"
        return "won"

    outcomes = await asyncio.gather(*(attempt(n) for n in range(1, 9)))
    assert sorted(outcomes) == ["lost"] * 7 + ["won"]
    versions = await store.list_memory_versions(sid, MemoryVersionFilter(), with_content=True)
    assert [v.seq for v in versions] == [2, 1]
    assert versions[0].content == (await store.get_memory(sid, "mem_1")).content


async def test_concurrent_creates_of_one_path_one_wins(store: Store) -> None:
    sid = await new_store(store)

    async def attempt(n: int) -> str:
        try:
            await store.create_memory(sid, f"mem_{n}", "/same", f"{n}", write(), max_memories=10)
        except MemoryPathConflict:
            return "conflict"
        return "created"

    outcomes = await asyncio.gather(*(attempt(n) for n in range(8)))
    assert sorted(outcomes) == ["conflict"] * 7 + ["created"]
    assert len(await store.list_memories(sid)) == 1
    assert len(await store.list_memory_versions(sid, MemoryVersionFilter())) == 1


async def test_concurrent_creates_respect_the_cap(store: Store) -> None:
    sid = await new_store(store)

    async def attempt(n: int) -> bool:
        try:
            await store.create_memory(sid, f"mem_{n}", f"/m{n}", "", write(), max_memories=3)
        except InvalidRequest:
            return False
        return True

    assert sum(await asyncio.gather(*(attempt(n) for n in range(8)))) == 3
