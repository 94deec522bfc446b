"""A PostgreSQL restart in the middle of appends loses no event and doubles none.

The server is a private one (``pg_ctl restart`` would cut every other test's connections on the
shared cluster). A fenced writer appends batches as the harness does: a call that fails with
``ControlPlaneError`` (the connection dropped, the server is starting) is retried with the same
event ids until it lands. Afterwards the log holds every batch once, in order, without gaps, and a
follower of the feed was told to re-read (``notify(None, 0)``) and then hears appends again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest

from control_plane.errors import ControlPlaneError
from control_plane.store import Event, NewEvent
from control_plane.store.postgres import PostgresStore
from tests.support import eventually
from tests.support.pg import PrivateCluster, private_cluster

_BATCHES = 120
_PER_BATCH = 5
_DEADLINE_S = 120.0  # generous: the machine is small and a restart takes a few seconds


@pytest.fixture
def cluster() -> Iterator[PrivateCluster]:
    yield from private_cluster()


def _batch(i: int) -> list[NewEvent]:
    return [NewEvent(f"b{i}-e{j}", "agent.message", {"batch": i, "n": j}) for j in range(_PER_BATCH)]


async def _append_until_it_lands(
    store: PostgresStore, i: int, epoch: int, failures: list[str]
) -> list[Event]:
    deadline = time.monotonic() + _DEADLINE_S
    while True:
        try:
            return await store.append("s1", _batch(i), datetime.now(UTC), epoch=epoch)
        except ControlPlaneError as exc:  # the harness's rule: retry with the same ids
            failures.append(str(exc))
            assert time.monotonic() < deadline, f"batch {i} never landed: {failures[-3:]}"
            await asyncio.sleep(0.05)


async def _until(done: Callable[[], bool], heard: list[tuple[str | None, int]]) -> None:
    await eventually(
        done, _DEADLINE_S, lambda: f"the feed to recover (last heard: {heard[-5:]})", interval_s=0.05
    )


async def test_a_restart_mid_appends_loses_and_doubles_nothing(cluster: PrivateCluster) -> None:
    store = PostgresStore(cluster.config())
    heard: list[tuple[str | None, int]] = []
    try:
        lease = await store.acquire_lease("s1", "harness-1", 600, datetime.now(UTC))
        assert lease is not None
        feed = await store.follow_appends(lambda sid, seq: heard.append((sid, seq)))
        failures: list[str] = []
        restarted = asyncio.Event()

        async def restart_after_some_appends() -> None:
            while len(heard) < 20:
                await asyncio.sleep(0.01)
            await asyncio.to_thread(cluster.pg_ctl, "-m", "fast", "-w", "restart")
            restarted.set()

        restarter = asyncio.create_task(restart_after_some_appends())
        results = []
        for i in range(_BATCHES):
            results.append(await _append_until_it_lands(store, i, lease.epoch, failures))
            if i == _BATCHES // 2:
                await asyncio.wait_for(restarted.wait(), _DEADLINE_S)  # the rest after the restart
        await restarter
        assert failures, "the restart was expected to fail at least one call"
        assert not any(cluster.password_file.read_text().strip() in f for f in failures)

        # Every batch once, in order, no gaps.
        events = await store.get_events("s1")
        assert [e.seq for e in events] == list(range(1, _BATCHES * _PER_BATCH + 1))
        assert [e.id for e in events] == [e.id for i in range(_BATCHES) for e in _batch(i)]
        assert [e for r in results for e in r] == events
        assert await store.last_seq("s1") == _BATCHES * _PER_BATCH
        # A retry of a batch that landed (its answer lost) is answered from the log, writes nothing.
        assert await store.append("s1", _batch(3), datetime.now(UTC), epoch=lease.epoch) == results[3]
        assert await store.last_seq("s1") == _BATCHES * _PER_BATCH

        # The follower was told to re-read (the appends made while it reconnected were not
        # heard, and need not be), and hears the appends made after that.
        await _until(lambda: (None, 0) in heard, heard)
        await _append_until_it_lands(store, _BATCHES, lease.epoch, failures)
        await _until(lambda: ("s1", (_BATCHES + 1) * _PER_BATCH) in heard, heard)
        await feed.close()
    finally:
        await store.close()
