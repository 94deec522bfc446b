"""Contract: session leases (one harness runs a session at a time; the epoch fences zombies)."""

from __future__ import annotations

import asyncio

from control_plane.store import Lease, Store
from tests.support.store_contract import at


async def test_acquire_a_free_lease(store: Store) -> None:
    assert await store.acquire_lease("s1", "h1", 30, at(0)) == Lease("s1", "h1", 1, at(30))


async def test_holder_renews_by_acquiring_again(store: Store) -> None:
    await store.acquire_lease("s1", "h1", 30, at(0))
    assert await store.acquire_lease("s1", "h1", 30, at(10)) == Lease("s1", "h1", 1, at(40))


async def test_live_lease_of_another_holder(store: Store) -> None:
    await store.acquire_lease("s1", "h1", 30, at(0))
    assert await store.acquire_lease("s1", "h2", 30, at(29.999)) is None
    # The failed attempt changed nothing.
    assert await store.renew_lease("s1", "h1", 1, 30, at(29.999)) is not None


async def test_expired_lease_changes_hands_with_a_new_epoch(store: Store) -> None:
    await store.acquire_lease("s1", "h1", 30, at(0))
    assert await store.acquire_lease("s1", "h2", 30, at(30)) == Lease("s1", "h2", 2, at(60))
    assert await store.acquire_lease("s1", "h1", 30, at(31)) is None
    assert await store.acquire_lease("s1", "h1", 30, at(100)) == Lease("s1", "h1", 3, at(130))


async def test_same_holder_after_expiry_gets_a_new_epoch(store: Store) -> None:
    await store.acquire_lease("s1", "h1", 30, at(0))
    lease = await store.acquire_lease("s1", "h1", 30, at(45))
    assert lease == Lease("s1", "h1", 2, at(75))


async def test_renew(store: Store) -> None:
    await store.acquire_lease("s1", "h1", 30, at(0))
    assert await store.renew_lease("s1", "h1", 1, 60, at(20)) == Lease("s1", "h1", 1, at(80))
    # Expired but nobody took it: still ours.
    assert await store.renew_lease("s1", "h1", 1, 60, at(90)) == Lease("s1", "h1", 1, at(150))


async def test_renew_a_lost_lease(store: Store) -> None:
    assert await store.renew_lease("s1", "h1", 1, 30, at(0)) is None  # never held
    await store.acquire_lease("s1", "h1", 30, at(0))
    await store.acquire_lease("s1", "h2", 30, at(31))
    assert await store.renew_lease("s1", "h1", 1, 30, at(32)) is None  # taken over
    assert await store.renew_lease("s1", "h2", 1, 30, at(32)) is None  # wrong epoch
    assert await store.renew_lease("s1", "h2", 2, 30, at(32)) == Lease("s1", "h2", 2, at(62))


async def test_release(store: Store) -> None:
    await store.acquire_lease("s1", "h1", 30, at(0))
    await store.release_lease("s1", "h2", 1)  # not the holder: no effect
    await store.release_lease("s1", "h1", 7)  # not the epoch: no effect
    assert await store.acquire_lease("s1", "h2", 30, at(1)) is None
    await store.release_lease("s1", "h1", 1)
    assert await store.renew_lease("s1", "h1", 1, 30, at(2)) is None
    assert await store.acquire_lease("s1", "h2", 30, at(2)) == Lease("s1", "h2", 2, at(32))
    await store.release_lease("s1", "h1", 1)  # late, stale release: no effect
    assert await store.acquire_lease("s1", "h3", 30, at(3)) is None
    await store.release_lease("nobody", "h1", 1)


async def test_expired_leases(store: Store) -> None:
    for i, session in enumerate(["s1", "s2", "s3", "s4"]):
        await store.acquire_lease(session, f"h{i}", 10 + i, at(0))
    await store.release_lease("s1", "h0", 1)
    assert await store.expired_leases(at(5)) == []
    assert await store.expired_leases(at(12)) == [Lease("s2", "h1", 1, at(11)), Lease("s3", "h2", 1, at(12))]
    assert await store.expired_leases(at(100), limit=1) == [Lease("s2", "h1", 1, at(11))]
    await store.acquire_lease("s2", "h9", 10, at(50))  # taken over: live again
    assert [lease.session_id for lease in await store.expired_leases(at(55))] == ["s3", "s4"]


async def test_concurrent_acquire_has_one_winner(store: Store) -> None:
    results = await asyncio.gather(*(store.acquire_lease("s1", f"h{i}", 30, at(0)) for i in range(20)))
    winners = [r for r in results if r is not None]
    assert len(winners) == 1
    assert winners[0].epoch == 1
    results = await asyncio.gather(*(store.acquire_lease("s1", f"h{i}", 30, at(31)) for i in range(20)))
    winners = [r for r in results if r is not None]
    assert len(winners) == 1
    assert winners[0].epoch == 2


async def test_get_lease(store: Store) -> None:
    assert await store.get_lease("s1") is None  # never taken
    await store.acquire_lease("s1", "h1", 30, at(0))
    assert await store.get_lease("s1") == Lease("s1", "h1", 1, at(30))
    await store.renew_lease("s1", "h1", 1, 30, at(20))
    assert await store.get_lease("s1") == Lease("s1", "h1", 1, at(50))
    await store.acquire_lease("s1", "h2", 30, at(60))  # expired at 50: taken over, epoch + 1
    assert await store.get_lease("s1") == Lease("s1", "h2", 2, at(90))
    await store.release_lease("s1", "h2", 2)
    assert await store.get_lease("s1") is None  # released
    assert await store.get_lease("nobody") is None
