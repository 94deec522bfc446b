"""Contract: what control-plane processes share through the store: edge presence (which process holds
each edge's tunnel, with an expiry), wake requests (work one process noticed and another must run)
and one-time nonces."""

from __future__ import annotations

from dataclasses import replace

from control_plane.store import EdgeRecord, Store
from tests.support.store_contract import at


async def test_no_holder_until_one_is_recorded(store: Store) -> None:
    assert await store.edge_holder("edge_a", at(0)) is None


async def test_a_record_holds_until_it_expires_and_refreshing_extends_it(store: Store) -> None:
    await store.hold_edges("cp_1", ["edge_a", "edge_b"], 15, at(0))
    assert await store.edge_holder("edge_a", at(14.999)) == "cp_1"
    assert await store.edge_holder("edge_b", at(0)) == "cp_1"
    assert await store.edge_holder("edge_a", at(15)) is None  # expired: the process is gone
    await store.hold_edges("cp_1", ["edge_a"], 15, at(10))
    assert await store.edge_holder("edge_a", at(20)) == "cp_1"
    assert await store.edge_holder("edge_b", at(20)) is None


async def test_the_last_process_to_record_an_edge_holds_it(store: Store) -> None:
    await store.hold_edges("cp_1", ["edge_a"], 15, at(0))
    await store.hold_edges("cp_2", ["edge_a"], 15, at(1))  # the edge moved
    assert await store.edge_holder("edge_a", at(2)) == "cp_2"
    await store.release_edges("cp_1", ["edge_a"])  # the old process's late release changes nothing
    assert await store.edge_holder("edge_a", at(2)) == "cp_2"
    await store.release_edges("cp_2", ["edge_a", "edge_unknown"])
    assert await store.edge_holder("edge_a", at(2)) is None


async def test_every_live_record_is_listed_with_its_holder(store: Store) -> None:
    assert await store.edge_holders(at(0)) == {}
    await store.hold_edges("cp_1", ["edge_a", "edge_b"], 15, at(0))
    await store.hold_edges("cp_2", ["edge_c"], 15, at(10))
    assert await store.edge_holders(at(1)) == {"edge_a": "cp_1", "edge_b": "cp_1", "edge_c": "cp_2"}
    assert await store.edge_holders(at(15)) == {"edge_c": "cp_2"}  # cp_1's records expired
    await store.release_edges("cp_2", ["edge_c"])
    assert await store.edge_holders(at(15)) == {}


async def test_holding_an_edge_records_when_it_was_last_seen(store: Store) -> None:
    record = EdgeRecord(
        id="edge_a",
        environment_id="env_1",
        name="a",
        cert_serial="01",
        cert_fingerprint="f" * 64,
        created_at=at(0),
        cert_not_after=at(86_400),
    )
    await store.create_edge(record)
    assert (await store.get_edge("edge_a")).last_seen_at is None
    await store.hold_edges("cp_1", ["edge_a", "edge_not_enrolled"], 15, at(7))
    assert (await store.get_edge("edge_a")).last_seen_at == at(7)
    await store.release_edges("cp_1", ["edge_a"])  # the tunnel closed: last seen stays
    assert await store.list_edges() == [replace(record, last_seen_at=at(7))]


async def test_empty_batches_are_fine(store: Store) -> None:
    await store.hold_edges("cp_1", [], 15, at(0))
    await store.release_edges("cp_1", [])
    assert await store.edge_holder("edge_a", at(0)) is None


# -- wake requests ------------------------------------------------------------------------------


async def test_wake_requests_oldest_first_and_cleared(store: Store) -> None:
    assert await store.wake_requests() == []
    await store.request_wake("s2", at(2))
    await store.request_wake("s1", at(1))
    await store.request_wake("s2", at(5))  # asking again keeps its place
    assert await store.wake_requests() == ["s1", "s2"]
    assert await store.wake_requests(limit=1) == ["s1"]
    await store.clear_wake("s1")
    await store.clear_wake("s_unknown")
    assert await store.wake_requests() == ["s2"]


async def test_deleting_a_session_drops_its_wake_request(store: Store) -> None:
    await store.create_resource("session", "s1", {}, at(0))
    await store.request_wake("s1", at(1))
    await store.delete_resource("session", "s1")
    assert await store.wake_requests() == []


# -- one-time nonces ----------------------------------------------------------------------------


async def test_a_nonce_works_once_until_it_expires(store: Store) -> None:
    assert await store.use_nonce("n1", at(30), at(0)) is True
    assert await store.use_nonce("n1", at(30), at(29.9)) is False  # replayed
    assert await store.use_nonce("n2", at(30), at(1)) is True  # others are independent
    assert await store.use_nonce("n1", at(90), at(30)) is True  # expired: pruned, usable again
    assert await store.use_nonce("n1", at(90), at(31)) is False
