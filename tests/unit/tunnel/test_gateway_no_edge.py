"""EdgeGateway with no edge connected: a call waits ``edge_wait_s`` (the wait for the session's own
edge counts against it), then fails with an ``EdgeUnavailable`` naming the environment;
``edges_connected`` tells the harness beforehand. In-memory stand-ins, no network."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from control_plane.errors import EdgeUnavailable
from control_plane.tunnel.gateway import EdgeGateway, GatewayConfig

ENV = "env_1"


class Conn:
    def __init__(self, edge_id: str, environment_id: str = ENV) -> None:
        self.edge_id = edge_id
        self.environment_id = environment_id
        self.draining = False


class WaitingRegistry:
    """No edge ever connects; records how long each wait was asked to be."""

    def __init__(self, conns: list[Conn] | None = None) -> None:
        self.conns = conns or []
        self.waits: list[tuple[str, float]] = []

    def get(self, edge_id: str) -> Any:
        return None

    def for_environment(self, environment_id: str) -> list[Conn]:
        return [c for c in self.conns if c.environment_id == environment_id]

    async def wait_for(self, edge_id: str, timeout_s: float) -> None:
        self.waits.append((edge_id, timeout_s))
        await asyncio.sleep(timeout_s)

    async def wait_for_environment(self, environment_id: str, timeout_s: float) -> list[Conn]:
        self.waits.append((environment_id, timeout_s))
        await asyncio.sleep(timeout_s)
        return []


def gateway(registry: WaitingRegistry, **config: float) -> EdgeGateway:
    return EdgeGateway(registry, GatewayConfig(**config))  # type: ignore[arg-type]


def test_edge_wait_s_defaults_to_30_s_and_edges_are_counted_per_environment() -> None:
    registry = WaitingRegistry([Conn("edge_a"), Conn("edge_b", "env_2")])
    gw = gateway(registry)
    assert gw.edge_wait_s == 30.0
    assert (gw.edges_connected(ENV), gw.edges_connected("env_2"), gw.edges_connected("env_3")) == (1, 1, 0)


async def test_a_call_waits_edge_wait_s_then_names_the_environment() -> None:
    registry = WaitingRegistry()
    gw = gateway(registry, edge_wait_s=0.05)
    with pytest.raises(EdgeUnavailable) as caught:
        await gw.execute("s1", ENV, "bash", {"command": "true"}, idempotency_key="k")
    [(environment, wait)] = registry.waits
    assert environment == ENV and 0 < wait <= 0.05
    assert caught.value.environment_id == ENV
    assert str(caught.value).startswith(f"no edge of environment {ENV} is connected (waited ")
    assert str(caught.value).endswith(" s for one to connect, edge_wait_s)")


async def test_the_wait_for_the_sessions_own_edge_counts_against_edge_wait_s() -> None:
    registry = WaitingRegistry()
    gw = gateway(registry, reconnect_grace_s=0.1, edge_wait_s=0.3)
    gw._sticky["s1"] = "edge_a"  # the session's sandbox was on edge_a, which is gone
    with pytest.raises(EdgeUnavailable):
        await gw.execute("s1", ENV, "bash", {"command": "true"}, idempotency_key="k")
    [(first, grace), (second, rest)] = registry.waits
    assert (first, second) == ("edge_a", ENV)
    assert 0 < grace <= 0.1
    assert 0 <= rest <= 0.2  # what is left of the 0.3 s after the grace

    registry.waits.clear()
    gw = gateway(registry, reconnect_grace_s=0.1, edge_wait_s=0.05)
    gw._sticky["s1"] = "edge_a"
    with pytest.raises(EdgeUnavailable):
        await gw.execute("s1", ENV, "bash", {"command": "true"}, idempotency_key="k")
    assert registry.waits[-1] == (ENV, 0.0)  # the grace outlasted edge_wait_s: no second wait
