"""Contract: bounded state (retention of archived resources, ended sessions' leases, spent
enrollment tokens) and the status filter the harness's sweep relies on."""

from __future__ import annotations

import pytest

from control_plane.errors import InvalidRequest, NotFound, TokenRejected
from control_plane.store import EnrollmentTokenRecord, Store
from tests.support.store_contract import at, new_events


async def _archived_session(store: Store, id: str, archived_s: float, events: int = 3) -> None:
    await store.create_resource("session", id, {"status": "idle"}, at(0))
    await store.update_resource("session", id, {"status": "terminated"}, at(1), keep_history=True)
    await store.append(id, new_events(id, events), at(1))
    lease = await store.acquire_lease(id, "h1", 30, at(1))
    assert lease is not None
    await store.release_lease(id, "h1", lease.epoch)
    await store.set_sandbox_edge(id, "edge-1")
    await store.request_wake(id, at(1))
    await store.archive_resource("session", id, at(archived_s))


async def test_prune_archived_deletes_old_sessions_with_everything_they_own(store: Store) -> None:
    await _archived_session(store, "old", archived_s=10)
    await _archived_session(store, "recent", archived_s=100)
    await store.create_resource("session", "live", {"status": "idle"}, at(0))
    await store.append("live", new_events("live", 2), at(1))

    assert await store.prune_archived("session", at(50)) == ["old"]

    with pytest.raises(NotFound):
        await store.get_resource("session", "old")
    with pytest.raises(NotFound):
        await store.get_resource("session", "old", version=1)
    assert await store.get_events("old") == []
    assert await store.last_seq("old") == 0
    assert await store.get_sandbox_edge("old") is None
    assert await store.wake_requests() == ["recent"]
    # A new lease starts over: the row is gone.
    assert (await store.acquire_lease("old", "h2", 30, at(60)) or pytest.fail()).epoch == 1
    # The others are untouched.
    assert (await store.get_resource("session", "recent")).archived_at == at(100)
    assert len(await store.get_events("recent")) == 3
    assert len(await store.get_events("live")) == 2
    assert await store.get_sandbox_edge("recent") == "edge-1"


async def test_prune_archived_oldest_first_in_batches(store: Store) -> None:
    for i in range(5):
        await _archived_session(store, f"s{i}", archived_s=50 - i, events=1)
    assert await store.prune_archived("session", at(100), limit=2) == ["s4", "s3"]
    assert await store.prune_archived("session", at(100), limit=2) == ["s2", "s1"]
    assert await store.prune_archived("session", at(100), limit=2) == ["s0"]
    assert await store.prune_archived("session", at(100), limit=2) == []


async def test_prune_archived_bound_is_exclusive_and_kind_scoped(store: Store) -> None:
    await _archived_session(store, "s1", archived_s=50)
    await store.create_resource("agent", "a1", {"name": "x"}, at(0))
    await store.archive_resource("agent", "a1", at(10))
    assert await store.prune_archived("session", at(50)) == []
    assert await store.prune_archived("session", at(50.000001)) == ["s1"]
    assert (await store.get_resource("agent", "a1")).archived_at == at(10)
    assert await store.prune_archived("agent", at(50)) == ["a1"]


async def test_prune_archived_a_long_log(store: Store) -> None:
    await _archived_session(store, "long", archived_s=10, events=0)
    for start in range(0, 30_000, 5_000):
        await store.append("long", new_events(f"long{start}", 5_000), at(2))
    await _archived_session(store, "short", archived_s=20)
    assert await store.prune_archived("session", at(50)) == ["long", "short"]
    assert await store.get_events("long") == []


async def test_prune_archived_rejects_a_bad_limit(store: Store) -> None:
    with pytest.raises(InvalidRequest):
        await store.prune_archived("session", at(0), limit=0)


async def test_forget_lease_deletes_a_released_lease_only(store: Store) -> None:
    assert await store.forget_lease("never") is False
    held = await store.acquire_lease("s1", "h1", 30, at(0))
    assert held is not None
    assert await store.forget_lease("s1") is False  # live: its holder may still write
    assert await store.get_lease("s1") == held
    assert await store.forget_lease("s1") is False
    # Expired but never released: stays, so the holder stays fenced after a takeover.
    taken = await store.acquire_lease("s1", "h2", 30, at(40))
    assert taken is not None and taken.epoch == 2
    await store.release_lease("s1", "h2", 2)
    assert await store.forget_lease("s1") is True
    assert await store.forget_lease("s1") is False
    assert await store.get_lease("s1") is None
    assert await store.expired_leases(at(1000)) == []


def _token(id: str, *, expires_s: float = 3600) -> EnrollmentTokenRecord:
    return EnrollmentTokenRecord(
        id=id, environment_id="env", token_hash=f"hash-{id}", created_at=at(0), expires_at=at(expires_s)
    )


async def test_prune_enrollment_tokens(store: Store) -> None:
    for token in ("used", "revoked", "expired", "fresh", "used-late"):
        await store.create_enrollment_token(_token(token, expires_s=100 if token == "expired" else 3600))
    await store.consume_enrollment_token("hash-used", "edge-1", at(10))
    await store.revoke_enrollment_token("revoked", at(20))
    await store.consume_enrollment_token("hash-used-late", "edge-2", at(500))

    assert await store.prune_enrollment_tokens(at(200), limit=2) == 2
    assert await store.prune_enrollment_tokens(at(200), limit=2) == 1
    assert await store.prune_enrollment_tokens(at(200)) == 0
    assert [t.id for t in await store.list_enrollment_tokens()] == ["fresh", "used-late"]
    # A pruned token's hash is unknown now.
    with pytest.raises(TokenRejected) as rejected:
        await store.consume_enrollment_token("hash-used", "edge-3", at(300))
    assert rejected.value.reason == "unknown"


async def test_status_filter_sees_status_changes_and_skips_archived(store: Store) -> None:
    """The sweep's query: sessions by status, archived ones left out (an index on SQLite)."""
    for i in range(6):
        await store.create_resource("session", f"s{i}", {"status": "idle"}, at(i))
    await store.create_resource("session", "numeric", {"status": 1}, at(10))
    for i in (1, 3, 5):
        await store.update_resource("session", f"s{i}", {"status": "running"}, at(20))
    await store.archive_resource("session", "s5", at(30))

    running = await store.list_resources("session", filters={"status": "running"})
    assert [r.id for r in running.items] == ["s3", "s1"]
    page1 = await store.list_resources("session", filters={"status": ("running", "idle")}, limit=3)
    page2 = await store.list_resources(
        "session", filters={"status": ("running", "idle")}, limit=3, cursor=page1.next_cursor
    )
    assert [r.id for r in page1.items + page2.items] == ["s4", "s3", "s2", "s1", "s0"]
    assert page2.next_cursor is None
    with_archived = await store.list_resources(
        "session", filters={"status": "running"}, include_archived=True
    )
    assert [r.id for r in with_archived.items] == ["s5", "s3", "s1"]
    assert [r.id for r in (await store.list_resources("session", filters={"status": 1})).items] == ["numeric"]
    await store.update_resource("session", "s3", {"status": "idle"}, at(40))
    running = await store.list_resources("session", filters={"status": "running"})
    assert [r.id for r in running.items] == ["s1"]
