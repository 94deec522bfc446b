"""EdgeGateway placement: a session stays on its sandbox's edge (remembered durably when the gateway
has a placement store), moves to another edge only when that edge is gone, and reports each move
once. The registry and connections are in-memory stand-ins: no network."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from control_plane.errors import GatewayDraining, NotFound
from control_plane.store.base import EdgeRecord
from control_plane.store.memory import MemoryStore
from control_plane.tunnel.gateway import EdgeGateway, GatewayConfig, SandboxMove
from outpost_wire.errors import ErrorCode, RemoteError
from outpost_wire.frames import (
    Destroy,
    Destroyed,
    Execute,
    Failure,
    Outcome,
    Provision,
    Provisioned,
    Request,
)
from outpost_wire.results import ToolResult

ENV = "env_1"


class FakeConn:
    """An edge: makes a sandbox per session on its first call, up to ``capacity`` (then refuses
    with ``capacity_exhausted``, as a real edge does), and reports its sandboxes only when it
    beats (:meth:`beat`), like the heartbeat of a real one."""

    def __init__(self, registry: FakeRegistry, edge_id: str, capacity: int = 4) -> None:
        self.registry = registry
        self.edge_id = edge_id
        self.environment_id = ENV
        self.sandbox_capacity = capacity
        self.sandboxes_in_use = 0  # as of its latest beat
        self.heartbeat_seq = 0
        self.sandboxes: set[str] = set()  # sessions with a sandbox here now
        self.draining = False
        self.closed = asyncio.Event()
        self.mcp_catalog: dict[str, Any] = {}
        self.requests: list[Request] = []

    def beat(self) -> None:
        self.heartbeat_seq += 1
        self.sandboxes_in_use = len(self.sandboxes)

    def send_request(self, request: Request) -> None:
        self.requests.append(request)
        outcome: Outcome
        if isinstance(request.op, Destroy):
            outcome = Destroyed(existed=request.session_id in self.sandboxes)
            self.sandboxes.discard(request.session_id)
        elif request.session_id not in self.sandboxes and len(self.sandboxes) >= self.sandbox_capacity:
            outcome = Failure(ErrorCode.CAPACITY_EXHAUSTED, f"{len(self.sandboxes)} sandboxes in use")
        else:
            self.sandboxes.add(request.session_id)
            if isinstance(request.op, Provision):
                outcome = Provisioned(sandbox_id="sbx_" + self.edge_id, image="img", reused=False)
            else:
                assert isinstance(request.op, Execute)
                outcome = ToolResult.text(f"ran on {self.edge_id}")
        self.registry.futures[request.request_id].set_result(outcome)

    def send_cancel(self, request_id: str) -> None:
        pass


class FakeRegistry:
    def __init__(self) -> None:
        self.conns: dict[str, FakeConn] = {}
        self.futures: dict[str, asyncio.Future[Outcome]] = {}

    def connect(self, edge_id: str, capacity: int = 4) -> FakeConn:
        conn = self.conns[edge_id] = FakeConn(self, edge_id, capacity)
        return conn

    def drop(self, edge_id: str) -> None:
        self.conns.pop(edge_id).closed.set()

    def get(self, edge_id: str) -> FakeConn | None:
        return self.conns.get(edge_id)

    async def wait_for(self, edge_id: str, timeout_s: float) -> FakeConn | None:
        await asyncio.sleep(min(timeout_s, 0.01))
        return self.conns.get(edge_id)

    def for_environment(self, environment_id: str) -> list[FakeConn]:
        return [c for c in self.conns.values() if c.environment_id == environment_id]

    async def wait_for_environment(self, environment_id: str, timeout_s: float) -> list[FakeConn]:
        await asyncio.sleep(min(timeout_s, 0.01))
        return self.for_environment(environment_id)

    def track(self, request_id: str, edge_id: str) -> asyncio.Future[Outcome]:
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self.futures[request_id] = future
        return future

    def forget(self, request_id: str) -> None:
        self.futures.pop(request_id, None)


def gateway(
    registry: FakeRegistry, store: MemoryStore | None = None, on_move: list[SandboxMove] | None = None
) -> EdgeGateway:
    gw = EdgeGateway(
        registry,  # type: ignore[arg-type]
        GatewayConfig(reconnect_grace_s=0.05, edge_wait_s=0.05),
        on_move=on_move.append if on_move is not None else None,
    )
    gw.placements = store
    return gw


async def run(gw: EdgeGateway, session_id: str = "s1", key: str = "k") -> str:
    result = await gw.execute(session_id, ENV, "bash", {"command": "true"}, idempotency_key=key)
    return result.to_json()[0]["text"]


async def test_a_session_sticks_to_its_edge_and_no_move_is_reported() -> None:
    registry = FakeRegistry()
    registry.connect("edge_a")
    gw = gateway(registry)
    assert await run(gw, key="k1") == "ran on edge_a"
    registry.connect("edge_b", capacity=100)  # a roomier edge does not attract a placed session
    assert await run(gw, key="k2") == "ran on edge_a"
    assert gw.take_move("s1") is None


async def test_a_dead_edge_moves_the_session_once_and_says_why() -> None:
    registry = FakeRegistry()
    registry.connect("edge_a")
    store = MemoryStore()
    told: list[SandboxMove] = []  # what the gateway's on_move hears (the metrics count these)
    gw = gateway(registry, store, on_move=told)
    await run(gw, key="k1")
    assert await store.get_sandbox_edge("s1") == "edge_a"
    registry.connect("edge_b")
    registry.drop("edge_a")
    assert await run(gw, key="k2") == "ran on edge_b"
    move = gw.take_move("s1")
    assert move == SandboxMove("edge_a", "edge_b", "edge edge_a did not come back within 0.05 s")
    assert told == [move]
    assert gw.take_move("s1") is None  # reported once
    assert await store.get_sandbox_edge("s1") == "edge_b"
    assert await run(gw, key="k3") == "ran on edge_b"
    assert gw.take_move("s1") is None


async def test_an_edge_shutting_down_for_good_moves_the_session_after_the_grace() -> None:
    registry = FakeRegistry()
    registry.connect("edge_a")
    gw = gateway(registry)
    await run(gw, key="k1")
    registry.connect("edge_b")
    registry.conns["edge_a"].draining = True  # it drains and never closes within the grace
    assert await run(gw, key="k2") == "ran on edge_b"
    move = gw.take_move("s1")
    assert move is not None and move.reason == "edge edge_a shut down and did not come back within 0.05 s"


async def test_an_edge_restarting_keeps_its_sessions() -> None:
    """SIGTERM, drain, reconnect (an upgrade): the session waits for its workspace's edge instead
    of moving to an idle one."""
    registry = FakeRegistry()
    registry.connect("edge_a")
    gw = EdgeGateway(registry, GatewayConfig(reconnect_grace_s=1.0, edge_wait_s=0.05))  # type: ignore[arg-type]
    await run(gw, key="k1")
    registry.connect("edge_b", capacity=100)
    registry.conns["edge_a"].draining = True

    async def restart() -> None:
        await asyncio.sleep(0.02)
        registry.drop("edge_a")  # its tunnel closes once its calls are done ...
        await asyncio.sleep(0.02)
        registry.connect("edge_a")  # ... and the new process connects

    task = asyncio.create_task(restart())
    real_wait_for = registry.wait_for

    async def wait_for(edge_id: str, timeout_s: float) -> FakeConn | None:
        await task  # (the real registry wakes waiters when an edge connects)
        return await real_wait_for(edge_id, timeout_s)

    registry.wait_for = wait_for  # type: ignore[method-assign]
    assert await run(gw, key="k2") == "ran on edge_a"
    assert gw.take_move("s1") is None


async def test_the_same_edge_coming_back_late_is_not_a_move() -> None:
    registry = FakeRegistry()
    registry.connect("edge_a")
    gw = gateway(registry)
    await run(gw, key="k1")
    registry.drop("edge_a")

    async def come_back() -> None:
        await asyncio.sleep(0.03)  # back after a moment, while the call waits for it
        registry.connect("edge_a")

    task = asyncio.create_task(come_back())
    registry_wait = registry.wait_for_environment

    async def slower_wait(environment_id: str, timeout_s: float) -> list[FakeConn]:
        await task  # the edge returns while the gateway waits for any edge of the environment
        return await registry_wait(environment_id, timeout_s)

    registry.wait_for_environment = slower_wait  # type: ignore[method-assign]
    assert await run(gw, key="k2") == "ran on edge_a"
    assert gw.take_move("s1") is None


async def test_placement_survives_a_new_gateway_with_the_same_store() -> None:
    """A control-plane restart, or another process on the same store: the session goes back to
    the edge that holds its workspace, not to the edge with the most room."""
    registry = FakeRegistry()
    registry.connect("edge_a", capacity=1)
    store = MemoryStore()
    await run(gateway(registry, store), key="k1")
    registry.connect("edge_b", capacity=100)
    registry.conns["edge_a"].beat()  # edge_a reports its sandbox: it is full
    fresh = gateway(registry, store)
    assert await run(fresh, key="k2") == "ran on edge_a"
    assert fresh.take_move("s1") is None
    # Without the store a fresh gateway has nothing to go by and picks an edge with room.
    assert await run(gateway(registry), key="k3") == "ran on edge_b"


async def test_forget_session_rereads_a_placement_moved_by_another_process() -> None:
    registry = FakeRegistry()
    registry.connect("edge_a")
    store = MemoryStore()
    gw = gateway(registry, store)
    assert await run(gw, key="k1") == "ran on edge_a"
    registry.connect("edge_b")
    await store.set_sandbox_edge("s1", "edge_b")  # another process moved the session meanwhile
    assert await run(gw, key="k2") == "ran on edge_a"  # the cache is trusted within one hold
    gw.forget_session("s1")  # the harness took the session again
    assert await run(gw, key="k3") == "ran on edge_b"
    assert gw.take_move("s1") is None


async def test_forget_session_without_a_store_keeps_the_memory() -> None:
    registry = FakeRegistry()
    registry.connect("edge_a")
    gw = gateway(registry)
    await run(gw, key="k1")
    registry.connect("edge_b", capacity=100)
    gw.forget_session("s1")
    assert await run(gw, key="k2") == "ran on edge_a"


async def test_destroy_forgets_the_placement() -> None:
    registry = FakeRegistry()
    registry.connect("edge_a")
    store = MemoryStore()
    gw = gateway(registry, store)
    await run(gw, key="k1")
    assert await gw.destroy("s1", ENV) is True
    assert await store.get_sandbox_edge("s1") is None
    assert [type(r.op) for r in registry.conns["edge_a"].requests] == [Execute, Destroy]


async def test_destroy_after_a_restart_goes_to_the_recorded_edge_only() -> None:
    registry = FakeRegistry()
    registry.connect("edge_a")
    registry.connect("edge_b")
    store = MemoryStore()
    await store.set_sandbox_edge("s1", "edge_b")
    registry.conns["edge_b"].sandboxes.add("s1")  # made before the restart
    assert await gateway(registry, store).destroy("s1", ENV) is True
    assert registry.conns["edge_a"].requests == []
    assert [type(r.op) for r in registry.conns["edge_b"].requests] == [Destroy]


async def test_a_draining_gateway_refuses_before_picking() -> None:
    registry = FakeRegistry()
    registry.connect("edge_a")
    store = MemoryStore()
    gw = gateway(registry, store)
    gw.start_draining()
    with pytest.raises(GatewayDraining):
        await run(gw)
    assert await store.get_sandbox_edge("s1") is None


async def test_a_store_failure_does_not_fail_the_call(caplog: pytest.LogCaptureFixture) -> None:
    class BrokenStore(MemoryStore):
        async def get_sandbox_edge(self, session_id: str) -> str | None:
            raise OSError("disk gone")

        async def set_sandbox_edge(self, session_id: str, edge_id: str | None) -> None:
            raise OSError("disk gone")

    registry = FakeRegistry()
    registry.connect("edge_a")
    gw = gateway(registry, BrokenStore())
    assert await run(gw) == "ran on edge_a"
    assert "could not record its sandbox placement" in caplog.text


async def test_a_remembered_edge_of_another_environment_is_not_reached() -> None:
    """``exec`` takes the caller's session id: naming another environment's session must neither
    reach its sandbox nor move it, whether its edge is connected or only in the store."""
    registry = FakeRegistry()
    registry.connect("edge_a")
    store = MemoryStore()
    await store.create_edge(
        EdgeRecord(
            id="edge_a",
            environment_id=ENV,
            name="a",
            cert_serial="01",
            cert_fingerprint="f" * 64,
            created_at=datetime(2026, 12, 1, tzinfo=UTC),
            cert_not_after=datetime(2027, 12, 1, tzinfo=UTC),
        )
    )
    gw = gateway(registry, store)
    assert await run(gw) == "ran on edge_a"
    edge_a = registry.get("edge_a")
    assert edge_a is not None
    sent = len(edge_a.requests)
    for fresh in (gw, gateway(registry, store)):  # remembered in memory, and only in the store
        with pytest.raises(NotFound):
            await fresh.execute("s1", "env_other", "bash", {"command": "true"}, idempotency_key="x")
        with pytest.raises(NotFound):
            await fresh.destroy("s1", "env_other")
    assert len(edge_a.requests) == sent  # nothing reached the sandbox
    registry.drop("edge_a")  # not connected: the store says where it belongs
    with pytest.raises(NotFound):
        await gateway(registry, store).execute("s1", "env_other", "bash", {}, idempotency_key="y")
    assert await store.get_sandbox_edge("s1") == "edge_a"  # nothing moved


# -- spreading by live load ---------------------------------------------------------------------


def edges(registry: FakeRegistry, count: int, capacity: int) -> list[FakeConn]:
    return [registry.connect(f"edge_{i:02d}", capacity=capacity) for i in range(count)]


def spread(conns: list[FakeConn]) -> list[int]:
    return [len(c.sandboxes) for c in conns]


async def test_fifty_sessions_spread_evenly_over_ten_edges_before_any_heartbeat() -> None:
    """The issue's measurement: 10 edges of 8, one tool call per new session. No edge beats in
    between, so only the gateway's own placements in flight can spread them."""
    registry = FakeRegistry()
    conns = edges(registry, 10, capacity=8)
    gw = gateway(registry)
    for i in range(50):
        assert (await run(gw, f"s{i}", key=f"k{i}")).startswith("ran on edge_")
    assert spread(conns) == [5] * 10
    assert sum(len(c.requests) for c in conns) == 50  # no call was refused and sent again


async def test_concurrent_new_sessions_spread_within_two_of_even() -> None:
    registry = FakeRegistry()
    conns = edges(registry, 10, capacity=8)
    gw = gateway(registry)
    results = await asyncio.gather(*(run(gw, f"s{i}", key=f"k{i}") for i in range(50)))
    assert all(r.startswith("ran on edge_") for r in results)
    assert all(3 <= n <= 7 for n in spread(conns)), spread(conns)


async def test_placements_in_flight_count_until_a_heartbeat_shows_them() -> None:
    """Answered placements leave the book only when a later beat reports them; the load stays
    the same across that beat, and sessions keep spreading."""
    registry = FakeRegistry()
    conns = edges(registry, 3, capacity=4)
    gw = gateway(registry)
    for i in range(3):
        await run(gw, f"s{i}", key=f"k{i}")
    assert spread(conns) == [1, 1, 1]
    conns[0].beat()  # edge_00 reports its one sandbox; the others have not beaten yet
    for i in range(3, 9):
        await run(gw, f"s{i}", key=f"k{i}")
    assert spread(conns) == [3, 3, 3]


async def test_every_edge_full_is_a_typed_capacity_error_sent_to_no_edge() -> None:
    registry = FakeRegistry()
    conns = edges(registry, 10, capacity=8)
    gw = gateway(registry)
    for i in range(80):
        await run(gw, f"s{i}", key=f"k{i}")
    assert spread(conns) == [8] * 10  # none refused while capacity remained
    sent = sum(len(c.requests) for c in conns)
    with pytest.raises(RemoteError) as caught:
        await run(gw, "s80", key="k80")
    assert caught.value.code is ErrorCode.CAPACITY_EXHAUSTED
    assert caught.value.message == (
        f"every edge of environment {ENV} is full: 10 edge(s), 80 of 80 sandboxes in use or being made"
    )
    assert sum(len(c.requests) for c in conns) == sent
    assert gw.edge_for_session("s80") is None


async def test_a_full_edge_is_skipped_while_another_has_room() -> None:
    """Sandboxes another control plane made show in the edge's heartbeat."""
    registry = FakeRegistry()
    busy, idle = registry.connect("edge_a", capacity=4), registry.connect("edge_b", capacity=4)
    busy.sandboxes.update({"other1", "other2", "other3", "other4"})
    busy.beat()
    gw = gateway(registry)
    for i in range(4):
        assert await run(gw, f"s{i}", key=f"k{i}") == "ran on edge_b"
    assert busy.requests == []
    with pytest.raises(RemoteError, match="every edge of environment env_1 is full"):
        await run(gw, "s4", key="k4")
    assert len(idle.sandboxes) == 4


async def test_an_edge_that_filled_up_since_its_beat_refuses_and_the_next_edge_takes_it() -> None:
    """Another control plane filled edge_a after its last heartbeat: it refuses the placement with
    ``capacity_exhausted`` and the call goes on to the next edge, recorded there, no move."""
    registry = FakeRegistry()
    full, roomy = registry.connect("edge_a", capacity=2), registry.connect("edge_b", capacity=2)
    roomy.sandboxes.add("other0")
    roomy.beat()  # edge_b reports 1 of 2; edge_a reported 0 of 2 ...
    full.beat()
    full.sandboxes.update({"other1", "other2"})  # ... and filled up since
    store = MemoryStore()
    gw = gateway(registry, store)
    assert await run(gw, "s1", key="k1") == "ran on edge_b"
    assert [r.idempotency_key for r in full.requests] == ["k1"]  # refused there, ran once here
    assert await store.get_sandbox_edge("s1") == "edge_b"
    assert gw.edge_for_session("s1") == "edge_b"
    assert gw.take_move("s1") is None
    with pytest.raises(RemoteError, match=r"2 edge\(s\), 4 of 4 .*; 1 refused the session just now"):
        await run(gw, "s2", key="k2")  # edge_a refuses again, edge_b is full by the book
    assert gw.edge_for_session("s2") is None and await store.get_sandbox_edge("s2") is None
    full.sandboxes.clear()  # room again: the next call of s2 is placed afresh, not stuck on edge_a
    assert await run(gw, "s2", key="k3") == "ran on edge_a"  # edge_b is full (other0, s1)


async def test_destroyed_sandboxes_free_room_before_the_next_heartbeat() -> None:
    registry = FakeRegistry()
    edge = registry.connect("edge_a", capacity=2)
    gw = gateway(registry)
    await run(gw, "s1", key="k1")
    await run(gw, "s2", key="k2")
    edge.beat()  # reports 2 of 2
    assert await gw.destroy("s1", ENV) is True
    assert await run(gw, "s3", key="k3") == "ran on edge_a"  # no beat since the destroy
    with pytest.raises(RemoteError, match=r"1 edge\(s\), 2 of 2"):
        await run(gw, "s4", key="k4")


async def test_a_sticky_session_stays_on_its_full_edge() -> None:
    registry = FakeRegistry()
    edge = registry.connect("edge_a", capacity=1)
    gw = gateway(registry)
    await run(gw, "s1", key="k1")
    edge.beat()
    registry.connect("edge_b", capacity=8)
    assert await run(gw, "s1", key="k2") == "ran on edge_a"
    assert await run(gw, "s2", key="k3") == "ran on edge_b"
