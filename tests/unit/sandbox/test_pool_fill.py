"""WarmPool's bookkeeping with a fake runtime: fill up to the room it is given, hand a member over
once, retarget, evict, close. (Docker behaviour: tests/integration/sandbox/test_warm_pool_docker.py.)"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, cast

from edge_agent.egress import EgressController
from edge_agent.sandbox.channel import DaemonChannel
from edge_agent.sandbox.docker_runtime import DockerRuntime
from edge_agent.sandbox.pool import WarmPool
from edge_agent.sandbox.spec import SandboxLimits, SandboxSpec
from tests.support import eventually

LIMITS = SandboxLimits(image="outpost-sandbox:1", cpus=1.0, memory_bytes=512 << 20, pids=128)


class FakeRuntime:
    def __init__(self) -> None:
        self.ids = itertools.count(1)
        self.containers: dict[str, str] = {}  # id -> state
        self.volumes: set[str] = set()

    async def ensure_volume(self, name: str, labels: Mapping[str, str]) -> None:
        self.volumes.add(name)

    async def create_container(self, spec: SandboxSpec) -> str:
        cid = f"c{next(self.ids):063d}"
        self.containers[cid] = "running"
        return cid

    async def pause(self, container_id: str) -> None:
        self.containers[container_id] = "paused"

    async def remove_container(self, container_id: str) -> bool:
        return self.containers.pop(container_id, None) is not None

    async def remove_volume(self, name: str) -> bool:
        if name in self.volumes:
            self.volumes.discard(name)
            return True
        return False


class FakeEgress:
    async def attachment(self, spec: Any) -> None:
        return None


class FakeChannel:
    closed = False

    async def close(self) -> None:
        self.closed = True


async def open_channel(_container_id: str) -> DaemonChannel:
    return cast(DaemonChannel, FakeChannel())


def make_pool(runtime: FakeRuntime, size: int, room: list[int]) -> WarmPool:
    """``room[0]``: how many more containers the 'manager' lets the pool hold."""
    pool: WarmPool

    def has_room() -> bool:
        return pool.ready + pool.creating < room[0]

    pool = WarmPool(
        cast(DockerRuntime, runtime),
        cast(EgressController, FakeEgress()),
        size=size,
        edge_id="edge-1",
        prefix="outpost",
        open_channel=open_channel,
        room=has_room,
        refill_delay_s=0,  # no CPU to spare here: refill at once, the test waits on the condition
    )
    return pool


async def test_fills_to_its_size_within_the_room_it_is_given() -> None:
    runtime = FakeRuntime()
    room = [2]
    pool = make_pool(runtime, 3, room)
    pool.start(LIMITS)
    await eventually(lambda: pool.ready == 2)
    assert set(runtime.containers.values()) == {"paused"} and len(runtime.volumes) == 2
    room[0] = 5
    pool.wake()
    await eventually(lambda: pool.ready == 3)
    await pool.close()
    assert not runtime.containers and not runtime.volumes


async def test_a_member_is_handed_over_once_and_the_pool_refills() -> None:
    runtime = FakeRuntime()
    pool = make_pool(runtime, 1, [10])
    pool.start(LIMITS)
    await eventually(lambda: pool.ready == 1)
    assert pool.take(replace(LIMITS, cpus=2.0)) is None  # another spec: no claim
    member = pool.take(LIMITS)
    assert member is not None and pool.take(LIMITS) is None
    pool.wake()
    await eventually(lambda: pool.ready == 1)
    again = pool.take(LIMITS)
    assert again is not None and again.container_id != member.container_id
    await pool.close()
    assert set(runtime.containers) == {member.container_id, again.container_id}  # the sessions' now


async def test_retarget_replaces_members_and_evict_frees_a_slot() -> None:
    runtime = FakeRuntime()
    pool = make_pool(runtime, 1, [10])
    pool.start(LIMITS)
    await eventually(lambda: pool.ready == 1)
    [old] = list(runtime.containers)
    other = replace(LIMITS, cpus=0.5)
    pool.retarget(other)
    assert pool.matches(other) and not pool.matches(LIMITS)
    await eventually(lambda: pool.ready == 1 and old not in runtime.containers)
    assert await pool.evict() and pool.ready == 0 and not await pool.evict()
    await pool.close()
    assert not runtime.containers and not runtime.volumes


async def test_size_zero_makes_nothing() -> None:
    runtime = FakeRuntime()
    pool = make_pool(runtime, 0, [10])
    pool.start(LIMITS)
    await asyncio.sleep(0)
    assert pool.ready == 0 and pool.take(LIMITS) is None and not runtime.containers
    await pool.close()
