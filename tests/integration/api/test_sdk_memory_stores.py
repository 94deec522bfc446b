"""``client.beta.memory_stores`` (+ ``.memories``, ``.memory_versions``) end to end: all 14 methods
through the official SDK against the real API on SQLite, every reply parsed strictly into the SDK's
models; preconditions, path conflicts, limits, archived stores, unknown ids and scoped keys."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

import anthropic
import pytest
from anthropic.types.beta import BetaManagedAgentsDeletedMemoryStore, BetaManagedAgentsMemoryStore
from anthropic.types.beta.memory_stores import (
    BetaManagedAgentsDeletedMemory,
    BetaManagedAgentsMemory,
    BetaManagedAgentsMemoryPrefix,
    BetaManagedAgentsMemoryVersion,
)
from pydantic import BaseModel

from tests.support.api_app import Api, assert_complete, assert_valid


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def memories(api: Api) -> Any:
    return api.client.beta.memory_stores.memories


async def collect(pager: Any) -> list[Any]:
    return [item async for item in pager]


async def key_id(api: Api) -> str:
    response = await api.http.get("/v1/api_keys")
    assert response.status_code == 200, response.text
    ids: list[str] = [k["id"] for k in response.json()["data"]]
    assert len(ids) == 1
    return ids[0]


def strict(obj: BaseModel) -> None:
    assert_complete(obj)


async def test_memory_store_lifecycle(api: Api) -> None:
    stores = api.client.beta.memory_stores
    created = await stores.create(name="User Preferences", description="prefs", metadata={"team": "a"})
    assert isinstance(created, BetaManagedAgentsMemoryStore)
    strict(created)
    assert created.id.startswith("memstore_") and created.archived_at is None
    assert (created.name, created.description, created.metadata) == (
        "User Preferences",
        "prefs",
        {"team": "a"},
    )
    plain = await stores.create(name="plain")
    assert plain.description == "" and plain.metadata == {}

    got = await stores.retrieve(created.id)
    strict(got)
    assert got == created
    updated = await stores.update(created.id, name="Prefs", description="", metadata={"team": None, "x": "1"})
    strict(updated)
    assert (updated.name, updated.description, updated.metadata) == ("Prefs", "", {"x": "1"})
    assert updated.updated_at >= created.updated_at

    listed = await collect(stores.list(limit=1))
    assert [s.id for s in listed] == [plain.id, created.id]  # newest first, a page at a time
    for item in listed:
        strict(item)

    archived = await stores.archive(created.id)
    strict(archived)
    assert archived.archived_at is not None
    assert [s.id for s in await collect(stores.list())] == [plain.id]
    assert {s.id for s in await collect(stores.list(include_archived=True))} == {plain.id, created.id}
    with pytest.raises(anthropic.BadRequestError):
        await stores.update(created.id, name="again")

    deleted = await stores.delete(created.id)
    assert isinstance(deleted, BetaManagedAgentsDeletedMemoryStore)
    strict(deleted)
    assert deleted.type == "memory_store_deleted" and deleted.id == created.id
    with pytest.raises(anthropic.NotFoundError):
        await stores.retrieve(created.id)


async def test_memories_crud_views_and_preconditions(api: Api) -> None:
    store = await api.client.beta.memory_stores.create(name="notes")
    created = await memories(api).create(store.id, path="/projects/foo/notes.md", content="hello")
    assert isinstance(created, BetaManagedAgentsMemory)
    strict(created)
    assert created.id.startswith("mem_") and created.memory_version_id.startswith("memver_")
    assert created.content is None  # create defaults to view=basic
    assert (created.content_sha256, created.content_size_bytes) == (sha("hello"), 5)
    full = await memories(api).create(store.id, path="/empty", content="", view="full")
    assert full.content == "" and full.content_sha256 == sha("")

    got = await memories(api).retrieve(created.id, memory_store_id=store.id)  # retrieve: full
    strict(got)
    assert got.content == "hello" and got.memory_store_id == store.id
    basic = await memories(api).retrieve(created.id, memory_store_id=store.id, view="basic")
    assert basic.content is None and basic.content_sha256 == sha("hello")

    updated = await memories(api).update(
        created.id,
        memory_store_id=store.id,
        content="hello, world",
        path="/projects/foo/renamed.md",
        precondition={"type": "content_sha256", "content_sha256": sha("hello")},
        view="full",
    )
    strict(updated)
    assert (updated.id, updated.path, updated.content) == (
        created.id,
        "/projects/foo/renamed.md",
        "hello, world",
    )
    with pytest.raises(anthropic.ConflictError) as caught:
        await memories(api).update(
            created.id,
            memory_store_id=store.id,
            content="lost update",
            precondition={"type": "content_sha256", "content_sha256": sha("hello")},
        )
    assert caught.value.status_code == 409
    assert caught.value.type == "memory_precondition_failed_error"  # type: ignore[attr-defined]
    with pytest.raises(anthropic.ConflictError) as caught:
        await memories(api).update(created.id, memory_store_id=store.id, path="/empty")
    assert caught.value.type == "memory_path_conflict_error"  # type: ignore[attr-defined]
    assert caught.value.body["error"]["conflicting_memory_id"] == full.id  # type: ignore[index]
    with pytest.raises(anthropic.ConflictError) as caught:
        await memories(api).create(store.id, path="/empty", content="again")
    assert caught.value.type == "memory_path_conflict_error"  # type: ignore[attr-defined]

    with pytest.raises(anthropic.ConflictError):
        await memories(api).delete(created.id, memory_store_id=store.id, expected_content_sha256=sha("hello"))
    deleted = await memories(api).delete(
        created.id, memory_store_id=store.id, expected_content_sha256=sha("hello, world")
    )
    assert isinstance(deleted, BetaManagedAgentsDeletedMemory)
    strict(deleted)
    assert (deleted.type, deleted.id) == ("memory_deleted", created.id)
    with pytest.raises(anthropic.NotFoundError):
        await memories(api).retrieve(created.id, memory_store_id=store.id)


async def test_list_memories_depth_prefix_and_pages(api: Api) -> None:
    store = await api.client.beta.memory_stores.create(name="tree")
    paths = [
        "/a.md",
        "/notes/todo.md",
        "/notes/2026/jan.md",
        "/notes/2026/feb.md",
        "/notes-archive/x.md",
        "/z.md",
    ]
    for path in paths:
        await memories(api).create(store.id, path=path, content=path)

    everything = await collect(memories(api).list(store.id, limit=2))
    assert [m.path for m in everything] == sorted(paths)
    for item in everything:
        assert isinstance(item, BetaManagedAgentsMemory)
        strict(item)
        assert item.content is None  # list defaults to basic

    top = await collect(memories(api).list(store.id, depth=1, limit=1))
    assert [(m.type, m.path) for m in top] == [
        ("memory", "/a.md"),
        ("memory_prefix", "/notes-archive/"),
        ("memory_prefix", "/notes/"),
        ("memory", "/z.md"),
    ]
    prefix = top[1]
    assert isinstance(prefix, BetaManagedAgentsMemoryPrefix)
    strict(prefix)

    notes = await collect(memories(api).list(store.id, path_prefix="/notes/", depth=1, view="full"))
    assert [(m.type, m.path) for m in notes] == [
        ("memory_prefix", "/notes/2026/"),
        ("memory", "/notes/todo.md"),
    ]
    assert notes[1].content == "/notes/todo.md"
    deep = await collect(memories(api).list(store.id, path_prefix="/notes/"))
    assert [m.path for m in deep] == ["/notes/2026/feb.md", "/notes/2026/jan.md", "/notes/todo.md"]

    page = await memories(api).list(store.id, limit=100, view="full")
    assert len(page.data) == len(paths)  # view=full caps a page at 20, 6 fit
    with pytest.raises(anthropic.BadRequestError):
        await memories(api).list(store.id, path_prefix="/notes")  # must end with "/"
    with pytest.raises(anthropic.BadRequestError):
        await memories(api).list(store.id, page="not-a-cursor")
    with pytest.raises(anthropic.BadRequestError):
        await memories(api).list(store.id, limit=101)


async def test_memory_versions_list_retrieve_redact(api: Api) -> None:
    store = await api.client.beta.memory_stores.create(name="audit")
    created = await memories(api).create(store.id, path="/secret.md", content="token=abc")
    await memories(api).update(created.id, memory_store_id=store.id, content="nothing here")
    other = await memories(api).create(store.id, path="/other.md", content="o")
    await memories(api).delete(other.id, memory_store_id=store.id)
    me = await key_id(api)

    versions = await collect(api.client.beta.memory_stores.memory_versions.list(store.id, limit=2))
    assert [v.operation for v in versions] == ["deleted", "created", "modified", "created"]  # newest first
    for version in versions:
        assert isinstance(version, BetaManagedAgentsMemoryVersion)
        assert_valid(version)
        assert version.content is None  # basic
        assert version.created_by is not None and version.created_by.type == "api_actor"
        assert version.created_by.api_key_id == me  # type: ignore[union-attr]
    deleted_version = versions[0]
    assert deleted_version.path == "/other.md" and deleted_version.content_sha256 is None
    assert versions[3].content_sha256 == sha("token=abc")

    mine = await collect(
        api.client.beta.memory_stores.memory_versions.list(store.id, memory_id=created.id, view="full")
    )
    assert [v.content for v in mine] == ["nothing here", "token=abc"]
    only = api.client.beta.memory_stores.memory_versions.list
    assert len(await collect(only(store.id, operation="deleted"))) == 1
    assert len(await collect(only(store.id, api_key_id=me))) == 4
    assert await collect(only(store.id, api_key_id="apikey_other")) == []
    assert await collect(only(store.id, session_id="sesn_x")) == []
    assert await collect(only(store.id, service_account_id="svac_x")) == []
    assert len(await collect(only(store.id, created_at_gte=versions[1].created_at))) >= 2

    first = versions[3]
    got = await api.client.beta.memory_stores.memory_versions.retrieve(first.id, memory_store_id=store.id)
    strict(got)
    assert got.content == "token=abc" and got.redacted_at is None and got.redacted_by is None
    redacted = await api.client.beta.memory_stores.memory_versions.redact(first.id, memory_store_id=store.id)
    strict(redacted)
    assert redacted.redacted_at is not None and redacted.redacted_by is not None
    assert (redacted.content, redacted.path, redacted.content_sha256, redacted.content_size_bytes) == (
        None,
    ) * 4
    assert redacted.created_by == got.created_by and redacted.operation == "created"
    current = (await memories(api).retrieve(created.id, memory_store_id=store.id)).memory_version_id
    with pytest.raises(anthropic.BadRequestError):  # the version holding the live content
        await api.client.beta.memory_stores.memory_versions.redact(current, memory_store_id=store.id)


async def test_hostile_input(api: Api) -> None:
    store = await api.client.beta.memory_stores.create(name="limits")
    create = memories(api).create
    await create(store.id, path="/max", content="x" * 102_400)  # exactly the limit
    await create(store.id, path="/" + "/".join(["s"] * 20), content="")  # 20 segments
    bad: list[dict[str, Any]] = [
        {"path": "/big", "content": "x" * 102_401},
        {"path": "/big-utf8", "content": "é" * 51_201},  # 102,402 bytes
        {"path": "no-slash", "content": ""},
        {"path": "/", "content": ""},
        {"path": "/a//b", "content": ""},
        {"path": "/a/./b", "content": ""},
        {"path": "/a/../b", "content": ""},
        {"path": "/trailing/", "content": ""},
        {"path": "/" + "/".join(["s"] * 21), "content": ""},
        {"path": "/" + "p" * 1024, "content": ""},
        {"path": "/tab\there", "content": ""},
        {"path": "/zero\u200bwidth", "content": ""},
        {"path": "/line\u2028sep", "content": ""},
        {"path": "/cafe\u0301", "content": ""},  # not NFC
        {"path": "/nul", "content": "a\x00b"},
    ]
    for params in bad:
        with pytest.raises(anthropic.BadRequestError):
            await create(store.id, **params)
    made = await create(store.id, path="/ok", content="ok")
    with pytest.raises(anthropic.BadRequestError):
        await memories(api).update(
            made.id,
            memory_store_id=store.id,
            content="y",
            precondition={"type": "content_sha256", "content_sha256": "XYZ"},
        )
    with pytest.raises(anthropic.BadRequestError):
        await memories(api).delete(made.id, memory_store_id=store.id, expected_content_sha256="abc")
    with pytest.raises(anthropic.BadRequestError):
        await memories(api).update(made.id, memory_store_id=store.id, content="z" * 102_401)
    with pytest.raises(anthropic.BadRequestError):
        await api.client.beta.memory_stores.create(name="")
    with pytest.raises(anthropic.BadRequestError):
        await api.client.beta.memory_stores.create(name="n" * 256)
    with pytest.raises(anthropic.BadRequestError):
        await api.client.beta.memory_stores.create(name="x", description="d" * 1025)
    with pytest.raises(anthropic.BadRequestError):
        await api.client.beta.memory_stores.create(name="x", extra_body={"unknown": 1})

    versions = api.client.beta.memory_stores.memory_versions
    unknown: list[Callable[[], Awaitable[Any]]] = [
        lambda: api.client.beta.memory_stores.retrieve("memstore_unknown"),
        lambda: create("memstore_unknown", path="/a", content=""),
        lambda: memories(api).retrieve("mem_unknown", memory_store_id=store.id),
        lambda: memories(api).update("mem_unknown", memory_store_id=store.id, content=""),
        lambda: memories(api).delete("mem_unknown", memory_store_id=store.id),
        lambda: memories(api).list("memstore_unknown"),
        lambda: versions.retrieve("memver_unknown", memory_store_id=store.id),
        lambda: versions.redact("memver_unknown", memory_store_id=store.id),
        lambda: versions.list("memstore_unknown"),
    ]
    for call in unknown:
        with pytest.raises(anthropic.NotFoundError):
            await call()


async def test_archived_store_serves_reads_deletes_and_redactions(api: Api) -> None:
    stores = api.client.beta.memory_stores
    store = await stores.create(name="old")
    kept = await memories(api).create(store.id, path="/kept", content="1")
    gone = await memories(api).create(store.id, path="/gone", content="2")
    await memories(api).update(kept.id, memory_store_id=store.id, content="1b")
    await stores.archive(store.id)
    with pytest.raises(anthropic.BadRequestError):
        await memories(api).create(store.id, path="/new", content="")
    with pytest.raises(anthropic.BadRequestError):
        await memories(api).update(kept.id, memory_store_id=store.id, content="1c")
    assert (await memories(api).retrieve(kept.id, memory_store_id=store.id)).content == "1b"
    await memories(api).delete(gone.id, memory_store_id=store.id)
    await stores.memory_versions.redact(kept.memory_version_id, memory_store_id=store.id)
    await stores.delete(store.id)
    with pytest.raises(anthropic.NotFoundError):
        await memories(api).retrieve(kept.id, memory_store_id=store.id)


async def test_concurrent_writers_through_the_api(api: Api) -> None:
    store = await api.client.beta.memory_stores.create(name="race")
    made = await memories(api).create(store.id, path="/shared", content="v0")

    async def update(n: int) -> str:
        try:
            await memories(api).update(
                made.id,
                memory_store_id=store.id,
                content=f"v{n}",
                precondition={"type": "content_sha256", "content_sha256": sha("v0")},
            )
        except anthropic.ConflictError:
            return "lost"
        return "won"

    assert sorted(await asyncio.gather(*(update(n) for n in range(1, 6)))) == ["lost"] * 4 + ["won"]

    async def create(n: int) -> str:
        try:
            await memories(api).create(store.id, path="/new", content=str(n))
        except anthropic.ConflictError as exc:
            return str(exc.type)  # type: ignore[attr-defined]
        return "created"

    outcomes = sorted(await asyncio.gather(*(create(n) for n in range(5))))
    assert outcomes == ["created"] + ["memory_path_conflict_error"] * 4


async def test_scoped_and_read_only_keys(api: Api) -> None:
    store = await api.client.beta.memory_stores.create(name="shared")
    made = await memories(api).create(store.id, path="/a", content="a")
    env = await api.environment()
    for body in ({"scope": "read_write", "environment_ids": [env]}, {"scope": "read_only"}):
        response = await api.http.post("/v1/api_keys", json={"name": "limited", **body})
        assert response.status_code == 200, response.text
        key = response.json()["key"]
        async with anthropic.AsyncAnthropic(
            base_url=api.url, api_key=key, max_retries=0, timeout=20
        ) as client:
            assert (await client.beta.memory_stores.retrieve(store.id)).id == store.id  # reads: any key
            got = await client.beta.memory_stores.memories.retrieve(made.id, memory_store_id=store.id)
            assert got.content == "a"
            assert len(await collect(client.beta.memory_stores.memory_versions.list(store.id))) == 1
            refused: list[Callable[[], Awaitable[Any]]] = [
                lambda: client.beta.memory_stores.create(name="mine"),
                lambda: client.beta.memory_stores.update(store.id, name="mine"),
                lambda: client.beta.memory_stores.archive(store.id),
                lambda: client.beta.memory_stores.delete(store.id),
                lambda: client.beta.memory_stores.memories.create(store.id, path="/b", content=""),
                lambda: client.beta.memory_stores.memories.update(
                    made.id, memory_store_id=store.id, content="x"
                ),
                lambda: client.beta.memory_stores.memories.delete(made.id, memory_store_id=store.id),
                lambda: client.beta.memory_stores.memory_versions.redact(
                    made.memory_version_id, memory_store_id=store.id
                ),
            ]
            for call in refused:
                with pytest.raises(anthropic.PermissionDeniedError):
                    await call()


async def test_sessions_listed_by_the_memory_store_they_mount(api: Api) -> None:
    stores = [await api.client.beta.memory_stores.create(name=f"notes {i}") for i in range(2)]
    env = await api.environment()
    mounting = [
        await api.session(
            environment_id=env,
            resources=[{"type": "memory_store", "memory_store_id": stores[0].id, "access": "read_only"}],
        )
        for _ in range(3)
    ]
    await api.session(environment_id=env)  # mounts nothing
    other = await api.session(
        environment_id=env,
        resources=[{"type": "memory_store", "memory_store_id": stores[1].id, "access": "read_write"}],
    )
    listed = [s.id async for s in api.client.beta.sessions.list(memory_store_id=stores[0].id, limit=2)]
    assert sorted(listed) == sorted(s.id for s in mounting)  # across pages of 2
    assert [s.id async for s in api.client.beta.sessions.list(memory_store_id=stores[1].id)] == [other.id]
    assert [s async for s in api.client.beta.sessions.list(memory_store_id="memstore_none")] == []
