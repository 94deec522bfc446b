"""The sandbox spec travels at provision only: the gateway sends a session's spec once per edge
connection (and again when it changes), and sends a call again, with it, when the edge answers
``sandbox_spec_required``. A recording edge stands in for the tunnel: no network."""

from __future__ import annotations

import asyncio
from typing import Any

from control_plane.tunnel.gateway import EdgeGateway, GatewayConfig
from outpost_wire.errors import ErrorCode
from outpost_wire.frames import (
    Destroy,
    Destroyed,
    Execute,
    Failure,
    Outcome,
    Provision,
    Provisioned,
    Repository,
    Request,
)
from outpost_wire.results import ToolResult

ENV = "env_1"


class RecordingEdge:
    """One connection of an edge: holds the specs it was sent (``forget`` is a restart's memory
    loss), refuses an Execute without a spec it does not hold, as the dispatcher does."""

    def __init__(self, registry: FakeRegistry, edge_id: str) -> None:
        self.registry = registry
        self.edge_id = edge_id
        self.environment_id = ENV
        self.sandbox_capacity = 8
        self.sandboxes_in_use = 0
        self.heartbeat_seq = 0
        self.draining = False
        self.closed = asyncio.Event()
        self.mcp_catalog: dict[str, Any] = {}
        self.requests: list[Request] = []
        self.specs: dict[str, Provision] = {}

    def send_request(self, request: Request) -> None:
        self.requests.append(request)
        op, sid = request.op, request.session_id
        outcome: Outcome
        if isinstance(op, Destroy):
            outcome = Destroyed(existed=self.specs.pop(sid, None) is not None)
        elif isinstance(op, Provision):
            self.specs[sid] = op
            outcome = Provisioned(sandbox_id="sbx", image="img", reused=False)
        else:
            assert isinstance(op, Execute)
            if op.sandbox is not None:
                self.specs[sid] = op.sandbox
            if sid in self.specs:
                outcome = ToolResult.text(f"ran with {len(self.specs[sid].repositories)} repositories")
            else:
                outcome = Failure(ErrorCode.SANDBOX_SPEC_REQUIRED, "no spec")
        self.registry.futures[request.request_id].set_result(outcome)

    def send_cancel(self, request_id: str) -> None:
        pass

    def sent_specs(self) -> list[bool]:
        """For each Execute or Provision this connection got: did it carry the spec?"""
        return [
            isinstance(r.op, Provision) or (isinstance(r.op, Execute) and r.op.sandbox is not None)
            for r in self.requests
            if not isinstance(r.op, Destroy)
        ]


class FakeRegistry:
    def __init__(self) -> None:
        self.conns: dict[str, RecordingEdge] = {}
        self.futures: dict[str, asyncio.Future[Outcome]] = {}

    def connect(self, edge_id: str) -> RecordingEdge:
        conn = self.conns[edge_id] = RecordingEdge(self, edge_id)
        return conn

    def drop(self, edge_id: str) -> None:
        self.conns.pop(edge_id).closed.set()

    def get(self, edge_id: str) -> RecordingEdge | None:
        return self.conns.get(edge_id)

    async def wait_for(self, edge_id: str, timeout_s: float) -> RecordingEdge | None:
        await asyncio.sleep(min(timeout_s, 0.01))
        return self.conns.get(edge_id)

    def for_environment(self, environment_id: str) -> list[RecordingEdge]:
        return [c for c in self.conns.values() if c.environment_id == environment_id]

    async def wait_for_environment(self, environment_id: str, timeout_s: float) -> list[RecordingEdge]:
        await asyncio.sleep(min(timeout_s, 0.01))
        return self.for_environment(environment_id)

    def track(self, request_id: str, edge_id: str) -> asyncio.Future[Outcome]:
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self.futures[request_id] = future
        return future

    def forget(self, request_id: str) -> None:
        self.futures.pop(request_id, None)


class Specs:
    """The sessions' specs, as the control plane's store would give them (a token can rotate)."""

    def __init__(self) -> None:
        self.token = "tok-1"
        self.reads = 0

    async def __call__(self, session_id: str, environment_id: str) -> Provision:
        self.reads += 1
        return Provision(
            repositories=(Repository("r1", "https://git.test/a.git", "/workspace/a", token=self.token),)
        )


def gateway(registry: FakeRegistry, specs: Specs) -> EdgeGateway:
    return EdgeGateway(
        registry,  # type: ignore[arg-type]
        GatewayConfig(reconnect_grace_s=0.05, edge_wait_s=0.05),  # quick: nothing here waits on time
        sandbox_spec=specs,
    )


async def run(gw: EdgeGateway, key: str, session_id: str = "s1") -> str:
    result = await gw.execute(session_id, ENV, "bash", {"command": "true"}, idempotency_key=key)
    return result.plain_text


async def test_the_spec_goes_with_the_first_call_of_a_session_on_a_connection_only() -> None:
    registry = FakeRegistry()
    edge = registry.connect("edge_a")
    specs = Specs()
    gw = gateway(registry, specs)
    for key in ("k1", "k2", "k3"):
        assert await run(gw, key) == "ran with 1 repositories"
    await run(gw, "k4", session_id="s2")  # another session: its own first call
    assert edge.sent_specs() == [True, False, False, True]


async def test_a_provision_sends_it_and_the_executes_after_it_do_not() -> None:
    registry = FakeRegistry()
    edge = registry.connect("edge_a")
    gw = gateway(registry, Specs())
    await gw.provision("s1", ENV)
    await run(gw, "k1")
    assert edge.sent_specs() == [True, False]


async def test_a_new_connection_a_destroy_and_a_changed_spec_each_send_it_again() -> None:
    registry = FakeRegistry()
    edge = registry.connect("edge_a")
    specs = Specs()
    gw = gateway(registry, specs)
    await run(gw, "k1")
    await run(gw, "k2")
    specs.token = "tok-2"  # a rotated token: the edge gets the new one with the next call
    await run(gw, "k3")
    await run(gw, "k4")
    assert edge.sent_specs() == [True, False, True, False]
    assert edge.specs["s1"].repositories[0].token == "tok-2"

    registry.drop("edge_a")
    back = registry.connect("edge_a")  # the link came back: a new connection
    await run(gw, "k5")
    await run(gw, "k6")
    assert back.sent_specs() == [True, False]

    assert await gw.destroy("s1", ENV)
    await run(gw, "k7")
    assert back.sent_specs() == [True, False, True]


async def test_an_edge_that_forgot_the_spec_gets_the_call_again_with_it_and_the_same_key() -> None:
    registry = FakeRegistry()
    edge = registry.connect("edge_a")
    gw = gateway(registry, Specs())
    await run(gw, "k1")
    edge.specs.clear()  # as after a restart of the edge agent behind the same connection
    assert await run(gw, "k2") == "ran with 1 repositories"
    assert edge.sent_specs() == [True, False, True]
    refused, again = edge.requests[1:]
    assert refused.idempotency_key == again.idempotency_key == "k2"
    assert refused.request_id != again.request_id
    await run(gw, "k3")
    assert edge.sent_specs() == [True, False, True, False]
