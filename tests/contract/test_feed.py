"""Contract: the feed of appends (``follow_appends``) and ``last_seqs``.

A follower hears every append that wrote something, by whichever store object (process) made it,
soon after it was made; never a seq the log does not hold yet; nothing for an append that wrote
nothing. Durable backends are also checked with two store objects on the same data, as two
control-plane processes would be.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from control_plane.store import Store
from tests.support.store_contract import at, new_events

from .conftest import Backend

_WAIT_S = 10.0  # generous: the machine is small and other tests run beside this one


class Heard:
    def __init__(self) -> None:
        self.notices: list[tuple[str | None, int]] = []
        self.changed = asyncio.Event()

    def __call__(self, session_id: str | None, last_seq: int) -> None:
        self.notices.append((session_id, last_seq))
        self.changed.set()

    def latest(self, session_id: str) -> int:
        return max((seq for sid, seq in self.notices if sid == session_id), default=0)

    async def until(self, done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + _WAIT_S
        while not done():
            self.changed.clear()
            left = deadline - time.monotonic()
            assert left > 0, f"not heard in {_WAIT_S} s; heard {self.notices}"
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), left)


async def test_last_seqs_reads_many_logs_at_once(store: Store) -> None:
    await store.append("s1", new_events("a", 3), at(1))
    await store.append("s2", new_events("a", 1), at(1))
    assert await store.last_seqs(["s1", "s2", "nobody"]) == {"s1": 3, "s2": 1, "nobody": 0}
    assert await store.last_seqs([]) == {}
    many = [f"x{i}" for i in range(1200)]  # more than one statement's worth of parameters
    assert await store.last_seqs([*many, "s1"]) == {**dict.fromkeys(many, 0), "s1": 3}


async def test_a_follower_hears_every_append_with_the_seq_it_reached(store: Store) -> None:
    heard = Heard()
    feed = await store.follow_appends(heard)
    try:
        await store.append("s1", new_events("a", 2), at(1))
        await store.append("s2", new_events("a", 1), at(1))
        await store.append("s1", new_events("b", 3), at(2))
        await heard.until(lambda: heard.latest("s1") == 5 and heard.latest("s2") == 1)
        for session_id, seq in heard.notices:
            assert session_id is not None
            assert seq <= await store.last_seq(session_id)
        assert ("s1", 2) in heard.notices  # each append is heard, not just the last
    finally:
        await feed.close()


async def test_appends_that_write_nothing_are_not_heard_and_close_stops_the_feed(store: Store) -> None:
    heard = Heard()
    feed = await store.follow_appends(heard)
    try:
        events = new_events("a", 2)
        await store.append("s1", events, at(1))
        await heard.until(lambda: heard.latest("s1") == 2)
        count = len(heard.notices)
        await store.append("s1", events, at(2))  # a retry of an append that landed
        await store.append("s1", [], at(2))
        await store.append("s2", new_events("m", 1), at(3))  # a marker after them
        await heard.until(lambda: heard.latest("s2") == 1)
        assert [n for n in heard.notices[count:] if n[0] == "s1"] == []
    finally:
        await feed.close()
    count = len(heard.notices)
    await store.append("s1", new_events("late", 1), at(4))
    await asyncio.sleep(0.3)  # several poll periods: a closed feed stays silent
    assert len(heard.notices) == count


async def test_a_follower_only_hears_appends_made_after_it_started(store: Store) -> None:
    await store.append("s1", new_events("old", 4), at(1))
    heard = Heard()
    feed = await store.follow_appends(heard)
    try:
        await store.append("s2", new_events("new", 1), at(2))
        await heard.until(lambda: heard.latest("s2") == 1)
        assert heard.latest("s1") == 0
    finally:
        await feed.close()


async def test_appends_by_another_process_are_heard(durable_backend: Backend) -> None:
    writer, reader = durable_backend.open(), durable_backend.open()
    heard = Heard()
    feed = await reader.follow_appends(heard)
    try:
        for i in range(5):
            await writer.append("s1", new_events(f"w{i}", 2), at(i))
        await heard.until(lambda: heard.latest("s1") == 10)
        assert await reader.last_seqs(["s1"]) == {"s1": 10}
    finally:
        await feed.close()
        await writer.close()
        await reader.close()


async def test_several_followers_each_hear_everything(store: Store) -> None:
    first, second = Heard(), Heard()
    feeds = [await store.follow_appends(first), await store.follow_appends(second)]
    try:
        await asyncio.gather(*(store.append(f"s{i}", new_events("a", 1), at(1)) for i in range(20)))
        for heard in (first, second):
            await heard.until(lambda h=heard: all(h.latest(f"s{i}") == 1 for i in range(20)))  # type: ignore[misc]
    finally:
        for feed in feeds:
            await feed.close()
