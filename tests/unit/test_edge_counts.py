"""Counting an environment's edges: enrolled (not revoked) and connected to any control-plane process
(this one's registry, or an unexpired presence record of another), on the in-memory store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from control_plane.edge_counts import EdgeCounts, count_edges, no_edge_here
from control_plane.store.base import EdgeRecord
from control_plane.store.memory import MemoryStore

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def edge(edge_id: str, environment_id: str) -> EdgeRecord:
    return EdgeRecord(
        id=edge_id,
        environment_id=environment_id,
        name=edge_id,
        cert_serial="01",
        cert_fingerprint=edge_id.ljust(64, "0"),
        created_at=T0,
        cert_not_after=T0 + timedelta(days=365),
    )


async def test_counts_by_environment_from_the_registry_and_presence() -> None:
    store = MemoryStore()
    for record in (edge("e1", "env_a"), edge("e2", "env_a"), edge("e3", "env_a"), edge("e4", "env_b")):
        await store.create_edge(record)
    await store.revoke_edge("e3", T0)
    await store.hold_edges("cp_other", ["e2", "e3", "e4"], 15, T0)

    counts = await count_edges(store, T0 + timedelta(seconds=1), local={"e1"})
    assert counts == {"env_a": EdgeCounts(2, 2), "env_b": EdgeCounts(1, 1)}
    later = await count_edges(store, T0 + timedelta(seconds=15))  # the other process's records expired
    assert later == {"env_a": EdgeCounts(2, 0), "env_b": EdgeCounts(1, 0)}
    one = await count_edges(store, T0, environment_id="env_a", local={"e1"})
    assert one == {"env_a": EdgeCounts(2, 2)}
    assert await count_edges(store, T0, environment_id="env_none") == {"env_none": EdgeCounts(0, 0)}
    assert EdgeCounts(2, 1).to_json() == {"enrolled": 2, "connected": 1}


def test_the_message_says_what_is_missing_and_what_to_do() -> None:
    assert no_edge_here("env_a", EdgeCounts(0, 0)) == (
        "no edge of environment env_a is connected: none is enrolled (outpost-control tokens create "
        "--environment env_a, then outpost-edge register on the edge host)"
    )
    assert no_edge_here("env_a", EdgeCounts(3, 0)) == (
        "no edge of environment env_a is connected (3 enrolled, none with a tunnel up: see "
        "outpost-control edges list)"
    )
    elsewhere = no_edge_here("env_a", EdgeCounts(3, 1))
    assert "1 of its 3 enrolled edge(s) connected to another process" in elsewhere
