"""The lease keeper on the in-memory store: acquire, renew, lose, release, abandon."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from control_plane.harness.lease import LeaseKeeper
from control_plane.store import MemoryStore
from tests.support import eventually


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 4, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


async def test_acquire_renew_release() -> None:
    store, clock = MemoryStore(), Clock()
    keeper = LeaseKeeper(store, "s1", "harness_a", 0.09, clock)
    assert await keeper.acquire()
    assert keeper.held and keeper.epoch == 1
    assert keeper.lease is not None
    first_expiry = keeper.lease.expires_at
    clock.now += timedelta(seconds=0.05)
    await eventually(  # renewed every ttl/3 in the background
        lambda: keeper.lease is not None and keeper.lease.expires_at > first_expiry, what="a renewal"
    )
    await keeper.release()
    assert not keeper.held
    other = LeaseKeeper(store, "s1", "harness_b", 10, clock)
    assert await other.acquire()
    assert other.epoch == 2
    await other.release()


async def test_a_live_lease_is_not_acquired_by_another_holder() -> None:
    store, clock = MemoryStore(), Clock()
    a = LeaseKeeper(store, "s1", "harness_a", 10, clock)
    b = LeaseKeeper(store, "s1", "harness_b", 10, clock)
    assert await a.acquire()
    assert not await b.acquire()
    await a.release()
    assert await b.acquire()
    await b.release()


async def test_takeover_marks_the_old_holder_lost() -> None:
    store, clock = MemoryStore(), Clock()
    a = LeaseKeeper(store, "s1", "harness_a", 0.06, clock)
    assert await a.acquire()
    a_epoch = a.epoch
    # A stalls; its lease expires and B takes over with the next epoch.
    await store.acquire_lease("s1", "harness_b", 10, clock.now + timedelta(seconds=1))
    await asyncio.wait_for(a.lost.wait(), 2)
    assert not a.held
    await a.release()  # releasing a lost lease must not free B's
    lease = await store.renew_lease("s1", "harness_b", a_epoch + 1, 10, clock.now)
    assert lease is not None


async def test_abandon_keeps_the_lease_until_it_expires() -> None:
    store, clock = MemoryStore(), Clock()
    a = LeaseKeeper(store, "s1", "harness_a", 5, clock)
    assert await a.acquire()
    a.abandon()
    assert await store.acquire_lease("s1", "harness_b", 5, clock.now) is None
    assert [lease.session_id for lease in await store.expired_leases(clock.now + timedelta(seconds=6))] == [
        "s1"
    ]
    assert await store.acquire_lease("s1", "harness_b", 5, clock.now + timedelta(seconds=6)) is not None
