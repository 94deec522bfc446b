"""Contract: sandbox placement (which edge holds a session's sandbox and workspace)."""

from __future__ import annotations

from control_plane.store import Store
from tests.support.store_contract import at


async def test_no_placement_until_one_is_recorded(store: Store) -> None:
    assert await store.get_sandbox_edge("s1") is None


async def test_record_move_and_forget(store: Store) -> None:
    await store.set_sandbox_edge("s1", "edge_a")
    await store.set_sandbox_edge("s2", "edge_a")
    assert await store.get_sandbox_edge("s1") == "edge_a"
    await store.set_sandbox_edge("s1", "edge_b")  # the sandbox moved: last write wins
    assert await store.get_sandbox_edge("s1") == "edge_b"
    await store.set_sandbox_edge("s1", None)
    assert await store.get_sandbox_edge("s1") is None
    await store.set_sandbox_edge("s1", None)  # forgetting twice is fine
    assert await store.get_sandbox_edge("s2") == "edge_a"  # other sessions untouched


async def test_deleting_the_session_forgets_its_placement(store: Store) -> None:
    await store.create_resource("session", "s1", {}, at(0))
    await store.set_sandbox_edge("s1", "edge_a")
    await store.delete_resource("session", "s1")
    assert await store.get_sandbox_edge("s1") is None
