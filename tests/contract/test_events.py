"""Contract: the session event log (append, get_events, last_seq)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from control_plane.errors import Fenced, InvalidRequest, SequenceConflict
from control_plane.store import Event, NewEvent, Order, Store
from tests.support.store_contract import at, new_events


async def test_append_assigns_contiguous_seqs_from_one(store: Store) -> None:
    first = await store.append("s1", new_events("a", 3), at(1))
    second = await store.append("s1", new_events("b", 2), at(2))
    assert [e.seq for e in first + second] == [1, 2, 3, 4, 5]
    assert first[0] == Event("a-0", "s1", 1, "agent.message", {"n": 0}, at(1))
    assert all(e.processed_at == at(2) for e in second)
    assert await store.get_events("s1") == first + second
    assert await store.last_seq("s1") == 5


async def test_sessions_have_their_own_logs(store: Store) -> None:
    await store.append("s1", new_events("a", 2), at(1))
    other = await store.append("s2", new_events("a", 1), at(1))  # same event id, other session
    assert other[0].seq == 1
    assert await store.last_seq("s1") == 2
    assert await store.last_seq("s2") == 1
    assert await store.last_seq("nobody") == 0
    assert await store.get_events("nobody") == []


async def test_payload_round_trips_as_json(store: Store) -> None:
    payload: dict[str, Any] = {
        "content": [{"type": "text", "text": "héllo ✓"}],
        "n": 1.5,
        "t": (1, 2),
        "z": None,
    }
    [stored] = await store.append("s1", [NewEvent("e1", "user.message", payload)], at(1))
    expected = {"content": [{"type": "text", "text": "héllo ✓"}], "n": 1.5, "t": [1, 2], "z": None}
    assert stored.payload == expected
    assert (await store.get_events("s1"))[0].payload == expected
    stored.payload["content"].clear()
    payload["n"] = 2
    assert (await store.get_events("s1"))[0].payload == expected


async def test_empty_append_is_a_no_op(store: Store) -> None:
    assert await store.append("s1", [], at(1)) == []
    assert await store.append("s1", [], at(1), expected_seq=7) == []
    assert await store.last_seq("s1") == 0


async def test_append_is_idempotent_by_event_id(store: Store) -> None:
    events = new_events("a", 3)
    first = await store.append("s1", events, at(1))
    retried = await store.append("s1", events, at(2))
    assert retried == first  # returned as stored: same seqs, same processed_at
    assert await store.last_seq("s1") == 3


async def test_retry_succeeds_whatever_expected_seq_says(store: Store) -> None:
    events = new_events("a", 2)
    first = await store.append("s1", events, at(1), expected_seq=0)
    await store.append("s1", new_events("b", 1), at(2), expected_seq=2)
    assert await store.append("s1", events, at(3), expected_seq=0) == first


async def test_partly_known_batch_writes_only_the_new_events(store: Store) -> None:
    await store.append("s1", new_events("a", 2), at(1))
    mixed = [NewEvent("x", "agent.message", {"new": True}), NewEvent("a-1", "ignored", {"changed": 1})]
    stored = await store.append("s1", mixed, at(2))
    assert [(e.id, e.seq, e.type, e.payload) for e in stored] == [
        ("x", 3, "agent.message", {"new": True}),
        ("a-1", 2, "agent.message", {"n": 1}),  # as stored the first time
    ]
    assert await store.last_seq("s1") == 3


async def test_expected_seq(store: Store) -> None:
    await store.append("s1", new_events("a", 2), at(1), expected_seq=0)
    await store.append("s1", new_events("b", 1), at(2), expected_seq=2)
    with pytest.raises(SequenceConflict) as info:
        await store.append("s1", new_events("c", 3), at(3), expected_seq=2)
    assert (info.value.expected, info.value.actual) == (2, 3)
    assert await store.last_seq("s1") == 3
    assert [e.id for e in await store.get_events("s1")] == ["a-0", "a-1", "b-0"]


async def test_duplicate_id_within_one_append_is_refused(store: Store) -> None:
    events = [NewEvent("e1", "a"), NewEvent("e2", "b"), NewEvent("e1", "c")]
    with pytest.raises(InvalidRequest):
        await store.append("s1", events, at(1))
    assert await store.last_seq("s1") == 0


@pytest.mark.parametrize("bad", [NewEvent("", "t"), NewEvent("e", "")])
async def test_event_without_id_or_type_is_refused(store: Store, bad: NewEvent) -> None:
    with pytest.raises(InvalidRequest):
        await store.append("s1", [NewEvent("ok", "t"), bad], at(1))
    assert await store.last_seq("s1") == 0


@pytest.mark.parametrize("bad_payload", [{"x": float("nan")}, {"x": object()}, {"x": b"bytes"}])
async def test_a_bad_third_event_writes_nothing(store: Store, bad_payload: dict[str, Any]) -> None:
    await store.append("s1", new_events("before", 1), at(1))
    batch = [*new_events("a", 2), NewEvent("bad", "agent.message", bad_payload), *new_events("b", 2)]
    with pytest.raises(InvalidRequest):
        await store.append("s1", batch, at(2))
    assert await store.last_seq("s1") == 1
    assert [e.id for e in await store.get_events("s1")] == ["before-0"]
    # The log is intact: the next append continues at seq 2, and the good ids are still free.
    stored = await store.append("s1", new_events("a", 2), at(3), expected_seq=1)
    assert [e.seq for e in stored] == [2, 3]


async def test_one_failing_appender_does_not_affect_the_others(store: Store) -> None:
    """Concurrent appends may share a transaction (group commit); a failing one fails alone."""

    async def good(i: int) -> list[Event]:
        return await store.append("s1", [NewEvent(f"g{i}-a", "t"), NewEvent(f"g{i}-b", "t")], at(1))

    async def bad(i: int) -> list[Event]:
        events = [NewEvent(f"x{i}-a", "t"), NewEvent(f"x{i}-b", "t"), NewEvent(f"x{i}-c", "t", {"v": {1}})]
        return await store.append("s1", events, at(1))

    results = await asyncio.gather(
        *(bad(i) if i % 3 == 0 else good(i) for i in range(30)), return_exceptions=True
    )
    assert all(isinstance(r, InvalidRequest) for i, r in enumerate(results) if i % 3 == 0)
    assert all(isinstance(r, list) for i, r in enumerate(results) if i % 3 != 0)
    log = await store.get_events("s1")
    assert [e.seq for e in log] == list(range(1, 41))
    assert not [e for e in log if e.id.startswith("x")]
    for r in results:  # each good batch is contiguous
        if isinstance(r, list):
            assert r[1].seq == r[0].seq + 1


async def test_concurrent_appenders_never_leave_gaps_or_duplicates(store: Store) -> None:
    async def writer(w: int) -> list[int]:
        seqs = []
        for i in range(4):
            batch = [NewEvent(f"w{w}-{i}-{j}", "t", {"w": w}) for j in range(1 + (w + i) % 3)]
            seqs += [e.seq for e in await store.append("s1", batch, at(i))]
        return seqs

    per_writer = await asyncio.gather(*(writer(w) for w in range(50)))
    all_seqs = sorted(s for seqs in per_writer for s in seqs)
    assert all_seqs == list(range(1, len(all_seqs) + 1))
    log = await store.get_events("s1")
    assert [e.seq for e in log] == all_seqs
    assert len({e.id for e in log}) == len(log)
    for seqs in per_writer:  # each writer's own appends land in its order
        assert seqs == sorted(seqs)


async def test_concurrent_conditional_appends_exactly_one_wins(store: Store) -> None:
    await store.append("s1", new_events("base", 2), at(0))
    results = await asyncio.gather(
        *(store.append("s1", new_events(f"c{i}", 2), at(1), expected_seq=2) for i in range(20)),
        return_exceptions=True,
    )
    winners = [r for r in results if isinstance(r, list)]
    assert len(winners) == 1
    assert all(isinstance(r, SequenceConflict) for r in results if not isinstance(r, list))
    assert await store.last_seq("s1") == 4


# -- fencing ------------------------------------------------------------------------------------


async def test_append_with_current_epoch(store: Store) -> None:
    lease = await store.acquire_lease("s1", "h1", 30, at(0))
    assert lease is not None
    stored = await store.append("s1", new_events("a", 2), at(1), epoch=lease.epoch)
    assert [e.seq for e in stored] == [1, 2]


async def test_append_without_lease_is_fenced(store: Store) -> None:
    with pytest.raises(Fenced) as info:
        await store.append("s1", new_events("a", 1), at(1), epoch=1)
    assert (info.value.epoch, info.value.current) == (1, None)
    assert await store.last_seq("s1") == 0
    # An unfenced writer (the API appending user input) needs no lease.
    await store.append("s1", new_events("u", 1), at(1))


async def test_zombie_holder_is_fenced_and_writes_nothing(store: Store) -> None:
    old = await store.acquire_lease("s1", "h1", 10, at(0))
    assert old is not None
    await store.append("s1", new_events("old", 1), at(1), epoch=old.epoch)
    new = await store.acquire_lease("s1", "h2", 10, at(11))  # h1's lease expired; h2 takes over
    assert new is not None
    assert new.epoch == old.epoch + 1
    with pytest.raises(Fenced) as info:
        await store.append("s1", new_events("zombie", 3), at(12), epoch=old.epoch)
    assert (info.value.epoch, info.value.current) == (old.epoch, new.epoch)
    # Even a retry of events that already landed is refused to a fenced writer.
    with pytest.raises(Fenced):
        await store.append("s1", new_events("old", 1), at(12), epoch=old.epoch)
    assert [e.id for e in await store.get_events("s1")] == ["old-0"]
    await store.append("s1", new_events("new", 1), at(12), epoch=new.epoch)
    assert await store.last_seq("s1") == 2


async def test_expired_lease_not_taken_still_admits_its_holder(store: Store) -> None:
    lease = await store.acquire_lease("s1", "h1", 10, at(0))
    assert lease is not None
    stored = await store.append("s1", new_events("late", 1), at(60), epoch=lease.epoch)
    assert stored[0].seq == 1


async def test_released_lease_fences_its_old_epoch(store: Store) -> None:
    lease = await store.acquire_lease("s1", "h1", 30, at(0))
    assert lease is not None
    await store.release_lease("s1", "h1", lease.epoch)
    with pytest.raises(Fenced):
        await store.append("s1", new_events("a", 1), at(1), epoch=lease.epoch)
    assert await store.last_seq("s1") == 0


async def test_fencing_is_checked_before_expected_seq(store: Store) -> None:
    await store.append("s1", new_events("a", 1), at(0))
    with pytest.raises(Fenced):
        await store.append("s1", new_events("b", 1), at(1), expected_seq=0, epoch=5)


# -- reading ------------------------------------------------------------------------------------


@pytest.fixture
async def log(store: Store) -> list[Event]:
    types = ["user.message", "agent.message", "agent.tool_use", "agent.tool_result"]
    events = [NewEvent(f"e{i}", types[i % 4], {"i": i}) for i in range(1, 41)]
    return await store.append("s1", events, at(1))


async def test_get_events_slices(store: Store, log: list[Event]) -> None:
    assert await store.get_events("s1") == log
    assert await store.get_events("s1", after_seq=35) == log[35:]
    assert await store.get_events("s1", before_seq=4) == log[:3]
    assert await store.get_events("s1", after_seq=10, before_seq=15) == log[10:14]
    assert await store.get_events("s1", after_seq=10, limit=3) == log[10:13]
    assert await store.get_events("s1", after_seq=40) == []
    assert await store.get_events("s1", after_seq=10, before_seq=11) == []
    assert await store.get_events("s1", before_seq=1) == []
    assert await store.get_events("s1", limit=0) == []


async def test_get_events_descending(store: Store, log: list[Event]) -> None:
    assert await store.get_events("s1", order=Order.DESC) == log[::-1]
    assert await store.get_events("s1", order=Order.DESC, limit=5) == log[::-1][:5]
    assert await store.get_events("s1", order=Order.DESC, before_seq=20, limit=2) == [log[18], log[17]]
    assert await store.get_events("s1", order=Order.DESC, after_seq=38) == [log[39], log[38]]


async def test_get_events_by_type(store: Store, log: list[Event]) -> None:
    tool_uses = [e for e in log if e.type == "agent.tool_use"]
    assert await store.get_events("s1", types=["agent.tool_use"]) == tool_uses
    assert await store.get_events("s1", types=["agent.tool_use"], limit=2) == tool_uses[:2]
    both = [e for e in log if e.type in ("user.message", "agent.tool_result")]
    assert await store.get_events("s1", types=["user.message", "agent.tool_result"]) == both
    last_tool_use = await store.get_events("s1", types=["agent.tool_use"], order=Order.DESC, limit=1)
    assert last_tool_use == [tool_uses[-1]]
    assert await store.get_events("s1", types=["nothing"]) == []
    assert await store.get_events("s1", types=[]) == []


async def test_long_log_reads_back_in_order(store: Store) -> None:
    for start in range(0, 3000, 500):
        await store.append("s1", [NewEvent(f"e{i}", "t", {"i": i}) for i in range(start, start + 500)], at(1))
    log = await store.get_events("s1")
    assert [e.seq for e in log] == list(range(1, 3001))
    assert [e.payload["i"] for e in log] == list(range(3000))
    tail = await store.get_events("s1", after_seq=2900, limit=100)
    assert [e.seq for e in tail] == list(range(2901, 3001))
