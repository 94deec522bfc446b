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
from outpost_wire.frames import Destroy, Destroyed, Execute, Outcome, Provision, Provisioned, Request
from outpost_wire.results import ToolResult

ENV = "env_1"


class FakeConn:
    def __init__(self, registry: FakeRegistry, edge_id: str, capacity: int = 4) -> None:
        self.registry = registry
        self.edge_id = edge_id
        self.environment_id = ENV
        self.free_capacity = capacity
        self.draining = False
        self.closed = asyncio.Event()
        self.mcp_catalog: dict[str, Any] = {}
        self.requests: list[Request] = []

    def send_request(self, request: Request) -> None:
        self.requests.append(request)
        outcome: Outcome
        if isinstance(request.op, Provision):
            outcome = Provisioned(sandbox_id="sbx_" + self.edge_id, image="img", reused=False)
        elif isinstance(request.op, Destroy):
            outcome = Destroyed(existed=True)
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


def gateway(registry: FakeRegistry, store: MemoryStore | None = None) -> EdgeGateway:
    gw = EdgeGateway(registry, GatewayConfig(reconnect_grace_s=0.05, edge_wait_s=0.05))  # type: ignore[arg-type]
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
    gw = gateway(registry, store)
    await run(gw, key="k1")
    assert await store.get_sandbox_edge("s1") == "edge_a"
    registry.connect("edge_b")
    registry.drop("edge_a")
    assert await run(gw, key="k2") == "ran on edge_b"
    move = gw.take_move("s1")
    assert move == SandboxMove("edge_a", "edge_b", "edge edge_a did not come back within 0.05 s")
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
        await asyncio.sleep(0.03)
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
    fresh = gateway(registry, store)
    assert await run(fresh, key="k2") == "ran on edge_a"
    assert fresh.take_move("s1") is None
    # Without the store a fresh gateway has nothing to go by and picks the roomiest edge.
    assert await run(gateway(registry), key="k3") == "ran on edge_b"


async def test_forget_session_rereads_a_placement_moved_by_another_process() -> None:
    registry = FakeRegistry()
    registry.connect("edge_a")
    registry.connect("edge_b")
    store = MemoryStore()
    gw = gateway(registry, store)
    assert await run(gw, key="k1") == "ran on edge_a"
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
