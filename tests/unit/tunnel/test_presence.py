"""EdgePresence: the store learns at once which edges' tunnels this process holds, refreshes the
records before they expire, releases edges that left, and releases everything at close."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from control_plane.store.memory import MemoryStore
from control_plane.tunnel.presence import EdgePresence
from tests.support import eventually


class Conn:
    def __init__(self, edge_id: str) -> None:
        self.edge_id = edge_id
        self.is_open = True


class Registry:
    def __init__(self) -> None:
        self.conns: dict[str, Conn] = {}
        self.generation = 0
        self._changed = asyncio.Condition()

    def all_connections(self) -> list[Conn]:
        return list(self.conns.values())

    async def set(self, *edge_ids: str) -> None:
        self.conns = {e: Conn(e) for e in edge_ids}
        self.generation += 1
        async with self._changed:
            self._changed.notify_all()

    async def wait_changed(self, seen: int, timeout_s: float) -> None:
        try:
            async with asyncio.timeout(timeout_s), self._changed:
                await self._changed.wait_for(lambda: self.generation != seen)
        except TimeoutError:
            return


T0 = datetime(2030, 1, 1, tzinfo=UTC)


async def eventually_holder(store: MemoryStore, edge_id: str, expected: str | None, at: datetime) -> None:
    async def holds() -> bool:
        return await store.edge_holder(edge_id, at) == expected

    await eventually(holds, what=f"{edge_id}'s holder to be {expected!r}", interval_s=0.005)


async def test_connects_and_disconnects_are_recorded_at_once_and_close_releases() -> None:
    store, registry = MemoryStore(), Registry()
    now = [T0]
    presence = EdgePresence(store, registry, "cp_1", ttl_s=15, refresh_s=10, clock=lambda: now[0])  # type: ignore[arg-type]
    await presence.start()
    await registry.set("edge_a", "edge_b")
    await eventually_holder(store, "edge_a", "cp_1", T0)
    await eventually_holder(store, "edge_b", "cp_1", T0)
    await registry.set("edge_b")  # edge_a left
    await eventually_holder(store, "edge_a", None, T0)
    assert await store.edge_holder("edge_b", T0) == "cp_1"
    await presence.close()
    assert await store.edge_holder("edge_b", T0) is None


async def test_records_are_refreshed_before_they_expire() -> None:
    store, registry = MemoryStore(), Registry()
    now = [T0]
    presence = EdgePresence(store, registry, "cp_1", ttl_s=0.3, refresh_s=0.05, clock=lambda: now[0])  # type: ignore[arg-type]
    await registry.set("edge_a")
    await presence.start()
    for step in range(1, 6):  # time goes on; each refresh pushes the expiry
        now[0] = T0 + timedelta(seconds=0.2 * step)
        await asyncio.sleep(0.08)
        assert await store.edge_holder("edge_a", now[0]) == "cp_1"
    await presence.close()


async def test_a_store_failure_is_retried_at_the_next_tick(caplog: pytest.LogCaptureFixture) -> None:
    class Flaky(MemoryStore):
        fail = True

        async def hold_edges(self, holder: str, edge_ids: object, ttl_s: float, now: datetime) -> None:
            if self.fail:
                self.fail = False
                raise OSError("database is locked")
            await super().hold_edges(holder, edge_ids, ttl_s, now)  # type: ignore[arg-type]

    store, registry = Flaky(), Registry()
    await registry.set("edge_a")
    presence = EdgePresence(store, registry, "cp_1", ttl_s=15, refresh_s=0.05, clock=lambda: T0)  # type: ignore[arg-type]
    await presence.start()
    assert "could not record which edges" in caplog.text
    await eventually_holder(store, "edge_a", "cp_1", T0)
    await presence.close()


def test_refresh_must_come_before_expiry() -> None:
    with pytest.raises(ValueError):
        EdgePresence(MemoryStore(), Registry(), "cp_1", ttl_s=5, refresh_s=5)  # type: ignore[arg-type]
