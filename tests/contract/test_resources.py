"""Contract: versioned resources, listing with filters and cursors, history, archive and delete."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from control_plane.errors import Conflict, InvalidRequest, NotFound, VersionConflict
from control_plane.store import NewEvent, Order, Resource, Store
from tests.support.store_contract import T0, at


async def test_create_then_get(store: Store) -> None:
    created = await store.create_resource("agent", "ag_1", {"name": "a", "tools": [1, 2]}, at(1))
    assert created == Resource("agent", "ag_1", 1, {"name": "a", "tools": [1, 2]}, at(1), at(1), None)
    assert await store.get_resource("agent", "ag_1") == created
    assert await store.get_resource("agent", "ag_1", version=1) == created


async def test_create_existing_id_conflicts(store: Store) -> None:
    await store.create_resource("agent", "ag_1", {"v": 1}, at(1))
    with pytest.raises(Conflict):
        await store.create_resource("agent", "ag_1", {"v": 2}, at(2))
    assert (await store.get_resource("agent", "ag_1")).body == {"v": 1}
    # The same id under another kind is another resource.
    await store.create_resource("environment", "ag_1", {"v": 3}, at(3))


async def test_get_missing_raises_not_found(store: Store) -> None:
    with pytest.raises(NotFound) as info:
        await store.get_resource("agent", "nope")
    assert (info.value.kind, info.value.id) == ("agent", "nope")


async def test_times_round_trip_as_aware_utc(store: Store) -> None:
    plus_two = timezone(timedelta(hours=2))
    when = datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=plus_two)
    created = await store.create_resource("agent", "ag_1", {}, when)
    fetched = await store.get_resource("agent", "ag_1")
    for value in (created.created_at, fetched.created_at, fetched.updated_at):
        assert value == when
        assert value.utcoffset() == timedelta(0)
        assert value.microsecond == 891011


async def test_naive_datetime_is_refused(store: Store) -> None:
    with pytest.raises(InvalidRequest):
        await store.create_resource("agent", "ag_1", {}, datetime(2026, 1, 1))
    with pytest.raises(NotFound):
        await store.get_resource("agent", "ag_1")


@pytest.mark.parametrize("body", [{"x": float("nan")}, {"x": object()}, {"x": {1, 2}}])
async def test_body_that_is_not_json_is_refused(store: Store, body: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequest):
        await store.create_resource("agent", "ag_1", body, at(1))
    with pytest.raises(NotFound):
        await store.get_resource("agent", "ag_1")


async def test_bodies_are_copies(store: Store) -> None:
    body: dict[str, Any] = {"list": [1]}
    created = await store.create_resource("agent", "ag_1", body, at(1))
    body["list"].append(2)
    created.body["list"].append(3)
    assert (await store.get_resource("agent", "ag_1")).body == {"list": [1]}


async def test_update_bumps_version(store: Store) -> None:
    await store.create_resource("agent", "ag_1", {"v": 1}, at(1))
    updated = await store.update_resource("agent", "ag_1", {"v": 2}, at(2))
    assert (updated.version, updated.body) == (2, {"v": 2})
    assert (updated.created_at, updated.updated_at) == (at(1), at(2))
    assert await store.get_resource("agent", "ag_1") == updated


async def test_update_with_expected_version(store: Store) -> None:
    await store.create_resource("agent", "ag_1", {"v": 1}, at(1))
    await store.update_resource("agent", "ag_1", {"v": 2}, at(2), expected_version=1)
    with pytest.raises(VersionConflict) as info:
        await store.update_resource("agent", "ag_1", {"v": 3}, at(3), expected_version=1)
    assert (info.value.expected, info.value.actual) == (1, 2)
    assert isinstance(info.value, Conflict)
    assert (await store.get_resource("agent", "ag_1")).body == {"v": 2}


async def test_update_missing_raises_not_found(store: Store) -> None:
    with pytest.raises(NotFound):
        await store.update_resource("agent", "nope", {}, at(1))


async def test_update_refuses_bad_body_and_keeps_the_old_one(store: Store) -> None:
    await store.create_resource("agent", "ag_1", {"v": 1}, at(1))
    with pytest.raises(InvalidRequest):
        await store.update_resource("agent", "ag_1", {"v": float("inf")}, at(2))
    assert (await store.get_resource("agent", "ag_1")).version == 1


async def test_history_is_kept_only_when_asked(store: Store) -> None:
    await store.create_resource("agent", "ag_1", {"v": 1}, at(1))
    await store.update_resource("agent", "ag_1", {"v": 2}, at(2), keep_history=True)
    await store.update_resource("agent", "ag_1", {"v": 3}, at(3))  # version 2 is not kept
    await store.update_resource("agent", "ag_1", {"v": 4}, at(4), keep_history=True)

    v1 = await store.get_resource("agent", "ag_1", version=1)
    assert (v1.version, v1.body, v1.updated_at) == (1, {"v": 1}, at(1))
    v3 = await store.get_resource("agent", "ag_1", version=3)
    assert (v3.version, v3.body, v3.created_at, v3.updated_at) == (3, {"v": 3}, at(1), at(3))
    assert (await store.get_resource("agent", "ag_1", version=4)).body == {"v": 4}
    for missing in (2, 5, 0):
        with pytest.raises(NotFound):
            await store.get_resource("agent", "ag_1", version=missing)

    page = await store.list_resource_versions("agent", "ag_1")
    assert [r.version for r in page.items] == [4, 3, 1]
    assert page.next_cursor is None


async def test_list_versions_pages_newest_first(store: Store) -> None:
    await store.create_resource("agent", "ag_1", {"v": 1}, at(0))
    for v in range(2, 8):
        await store.update_resource("agent", "ag_1", {"v": v}, at(v), keep_history=True)
    seen: list[int] = []
    cursor = None
    while True:
        page = await store.list_resource_versions("agent", "ag_1", limit=3, cursor=cursor)
        seen += [r.version for r in page.items]
        assert all(r.body == {"v": r.version} for r in page.items)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == [7, 6, 5, 4, 3, 2, 1]
    with pytest.raises(NotFound):
        await store.list_resource_versions("agent", "nope")


async def test_archive(store: Store) -> None:
    await store.create_resource("agent", "ag_1", {"v": 1}, at(1))
    archived = await store.archive_resource("agent", "ag_1", at(2))
    assert (archived.archived_at, archived.version, archived.body) == (at(2), 1, {"v": 1})
    again = await store.archive_resource("agent", "ag_1", at(3))  # idempotent: the first time stays
    assert again.archived_at == at(2)
    assert (await store.get_resource("agent", "ag_1")).archived_at == at(2)
    with pytest.raises(NotFound):
        await store.archive_resource("agent", "nope", at(1))


async def test_delete(store: Store) -> None:
    await store.create_resource("agent", "ag_1", {"v": 1}, at(1))
    await store.update_resource("agent", "ag_1", {"v": 2}, at(2), keep_history=True)
    await store.delete_resource("agent", "ag_1")
    with pytest.raises(NotFound):
        await store.get_resource("agent", "ag_1")
    with pytest.raises(NotFound):
        await store.delete_resource("agent", "ag_1")
    # The id is free again, and the old history is gone with the resource.
    await store.create_resource("agent", "ag_1", {"v": "new"}, at(3))
    with pytest.raises(NotFound):
        await store.get_resource("agent", "ag_1", version=2)
    assert [r.version for r in (await store.list_resource_versions("agent", "ag_1")).items] == [1]


async def test_deleting_a_session_deletes_its_log_and_lease(store: Store) -> None:
    await store.create_resource("session", "s1", {}, at(0))
    await store.create_resource("session", "s2", {}, at(0))
    lease = await store.acquire_lease("s1", "h", 30, at(0))
    assert lease is not None
    await store.append("s1", [NewEvent("e1", "user.message")], at(1))
    await store.append("s2", [NewEvent("e1", "user.message")], at(1))
    await store.delete_resource("session", "s1")
    assert await store.get_events("s1") == []
    assert await store.last_seq("s1") == 0
    assert [e.id for e in await store.get_events("s2")] == ["e1"]
    # The lease went too: a new holder can take it at once.
    assert await store.acquire_lease("s1", "other", 30, at(2)) is not None
    # Deleting another kind with the same id leaves the log alone.
    await store.create_resource("agent", "s2", {}, at(0))
    await store.delete_resource("agent", "s2")
    assert await store.last_seq("s2") == 1


# -- listing ------------------------------------------------------------------------------------


async def _seed(store: Store, count: int, kind: str = "agent") -> list[str]:
    """``count`` resources; creation times repeat in pairs so ties are broken by id."""
    ids = [f"{kind[:2]}_{i:03d}" for i in range(count)]
    for i, id in enumerate(ids):
        await store.create_resource(kind, id, {"i": i, "even": i % 2 == 0}, at(i // 2))
    return ids


async def _walk(store: Store, order: Order, limit: int, **kwargs: Any) -> tuple[list[str], list[Any]]:
    ids: list[str] = []
    pages = []
    cursor = None
    while True:
        page = await store.list_resources("agent", limit=limit, cursor=cursor, order=order, **kwargs)
        pages.append(page)
        ids += [r.id for r in page.items]
        if page.next_cursor is None:
            return ids, pages
        cursor = page.next_cursor


@pytest.mark.parametrize("order", [Order.ASC, Order.DESC])
@pytest.mark.parametrize("limit", [1, 3, 7, 50])
async def test_pagination_walks_every_item_once(store: Store, order: Order, limit: int) -> None:
    ids = await _seed(store, 23)
    walked, pages = await _walk(store, order, limit)
    assert walked == (ids if order is Order.ASC else ids[::-1])
    assert pages[0].prev_cursor is None
    assert all(p.prev_cursor is not None for p in pages[1:])
    assert all(len(p.items) == limit for p in pages[:-1])
    assert 1 <= len(pages[-1].items) <= limit


@pytest.mark.parametrize("order", [Order.ASC, Order.DESC])
async def test_prev_cursor_walks_back(store: Store, order: Order) -> None:
    await _seed(store, 10)
    _, pages = await _walk(store, order, 3)
    assert len(pages) == 4
    page = pages[-1]
    for expected in reversed(pages[:-1]):
        assert page.prev_cursor is not None
        page = await store.list_resources("agent", limit=3, cursor=page.prev_cursor, order=order)
        assert [r.id for r in page.items] == [r.id for r in expected.items]
        assert page.next_cursor is not None
    assert page.prev_cursor is None
    # And forward again from a page reached backwards.
    again = await store.list_resources("agent", limit=3, cursor=page.next_cursor, order=order)
    assert [r.id for r in again.items] == [r.id for r in pages[1].items]


async def test_listing_is_stable_while_items_are_added(store: Store) -> None:
    ids = await _seed(store, 6)
    first = await store.list_resources("agent", limit=3, order=Order.ASC)
    await store.create_resource("agent", "ag_zzz", {}, at(100))  # after everything in ASC order
    rest, _ = await _walk_from(store, first.next_cursor)
    assert [r.id for r in first.items] + rest == [*ids, "ag_zzz"]


async def _walk_from(store: Store, cursor: str | None) -> tuple[list[str], None]:
    ids: list[str] = []
    while cursor is not None:
        page = await store.list_resources("agent", limit=3, cursor=cursor, order=Order.ASC)
        ids += [r.id for r in page.items]
        cursor = page.next_cursor
    return ids, None


async def test_empty_listing(store: Store) -> None:
    page = await store.list_resources("agent")
    assert (page.items, page.next_cursor, page.prev_cursor) == ([], None, None)


async def test_default_order_is_newest_first(store: Store) -> None:
    ids = await _seed(store, 4)
    assert [r.id for r in (await store.list_resources("agent")).items] == ids[::-1]


async def test_listing_keeps_kinds_apart(store: Store) -> None:
    await _seed(store, 3, "agent")
    await _seed(store, 2, "environment")
    assert len((await store.list_resources("agent")).items) == 3
    assert len((await store.list_resources("environment")).items) == 2


async def test_archived_are_hidden_unless_asked(store: Store) -> None:
    ids = await _seed(store, 4)
    await store.archive_resource("agent", ids[1], at(10))
    visible = await store.list_resources("agent", order=Order.ASC)
    assert [r.id for r in visible.items] == [ids[0], ids[2], ids[3]]
    everything = await store.list_resources("agent", order=Order.ASC, include_archived=True)
    assert [r.id for r in everything.items] == ids


async def test_created_range_is_inclusive(store: Store) -> None:
    ids = await _seed(store, 10)  # created at 0,0,1,1,2,2,...
    page = await store.list_resources("agent", created_after=at(1), created_before=at(3), order=Order.ASC)
    assert [r.id for r in page.items] == ids[2:8]
    walked, _ = await _walk(store, Order.DESC, 2, created_after=at(1), created_before=at(3))
    assert walked == ids[2:8][::-1]


async def test_filters_match_top_level_fields(store: Store) -> None:
    bodies: list[dict[str, Any]] = [
        {"status": "running", "n": 1, "flag": True, "env": "e1"},
        {"status": "idle", "n": 1.0, "flag": False, "env": "e1"},
        {"status": "running", "n": "1", "flag": 1, "env": "e2"},
        {"status": "running", "n": 2, "flag": None},
        {"status": {"nested": "running"}},
    ]
    for i, body in enumerate(bodies):
        await store.create_resource("agent", f"ag_{i}", body, at(i))

    async def ids(**filters: Any) -> list[str]:
        page = await store.list_resources("agent", filters=filters, order=Order.ASC)
        return [r.id for r in page.items]

    assert await ids(status="running") == ["ag_0", "ag_2", "ag_3"]
    assert await ids(status="running", env="e1") == ["ag_0"]
    assert await ids(n=1) == ["ag_0", "ag_1"]  # numbers compare as numbers, never as strings
    assert await ids(n="1") == ["ag_2"]
    assert await ids(flag=True) == ["ag_0"]  # a boolean is not the number 1
    assert await ids(flag=1) == ["ag_2"]
    assert await ids(flag=False) == ["ag_1"]
    assert await ids(env=None) == ["ag_3", "ag_4"]  # null or missing
    assert await ids(status="nope") == []
    walked, _ = await _walk(store, Order.DESC, 1, filters={"status": "running"})
    assert walked == ["ag_3", "ag_2", "ag_0"]


@pytest.mark.parametrize(
    "filters",
    [{"a.b": 1}, {"": 1}, {'x"': 1}, {"x": {"y": 1}}, {"x": [1]}],
)
async def test_bad_filters_are_refused(store: Store, filters: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequest):
        await store.list_resources("agent", filters=filters)


@pytest.mark.parametrize("cursor", ["", "not base64!", "e30", "eyJkIjoibmV4dCJ9", "WzFd"])
async def test_bad_cursor_is_refused(store: Store, cursor: str) -> None:
    with pytest.raises(InvalidRequest):
        await store.list_resources("agent", cursor=cursor or "%")
    with pytest.raises(InvalidRequest):
        await store.list_resource_versions("agent", "x", cursor=cursor or "%")


async def test_limit_must_be_positive(store: Store) -> None:
    with pytest.raises(InvalidRequest):
        await store.list_resources("agent", limit=0)


async def test_list_items_are_full_resources(store: Store) -> None:
    await store.create_resource("agent", "ag_1", {"v": 1}, T0)
    await store.update_resource("agent", "ag_1", {"v": 2}, at(5))
    [item] = (await store.list_resources("agent")).items
    assert item == await store.get_resource("agent", "ag_1")
