"""A draining control plane sends edges elsewhere at once, no Docker: two real control planes
(SQLite store, CA and admin key shared, gRPC mTLS and uvicorn on loopback, port 0) in this process,
and the edge's real ``Dialer`` + ``Link`` (both addresses, A first) with a fake request handler.

"Draining" is what ``ControlPlane.close`` does first (``gateway.start_draining()``, then
``tunnel.announce_drain(...)``) while the process is still up finishing its in-flight work.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from control_plane.server import ControlPlane
from edge_agent.connection import Dialer
from edge_agent.connection.dialer import Endpoint
from edge_agent.identity import Identity
from tests.support import eventually
from tests.support.edge_link import (
    FakeHandler,
    api_client,
    connected_edges,
    make_dialer,
    running_link,
)
from tests.support.edge_link import no_ambient_proxy as no_ambient_proxy

MOVE_WITHIN_S = 3.0  # far below drain_grace_s: the edge must not wait for A to close its tunnel

pytestmark = pytest.mark.usefixtures("no_ambient_proxy")


def dialer_a_then_b(
    identity: Identity, tmp_path: Path, transport: str, a: ControlPlane, b: ControlPlane
) -> Dialer:
    return make_dialer(
        identity,
        tmp_path / "edge",
        transport,
        tunnel_address=a.tunnel_address,
        control_plane_url=a.http_url,
        more_endpoints=[Endpoint(b.tunnel_address, b.http_url)],
        backoff_initial_s=2.0,  # a drain must not wait for a backoff: this would show
        backoff_max_s=4.0,
    )


def start_draining(cp: ControlPlane) -> None:
    """The first steps of ``ControlPlane.close``; the process stays up."""
    assert cp.tunnel is not None
    cp.gateway.start_draining()
    cp.tunnel.announce_drain(cp.config.drain_grace_s)


async def on_b_only(a: ControlPlane, b: ControlPlane, edge_id: str) -> bool:
    return await connected_edges(b) == [edge_id] and await connected_edges(a) == []


@pytest.mark.parametrize("transport", ["grpc", "websocket"])
async def test_an_edge_connecting_to_a_draining_control_plane_moves_on_at_once(
    pair: tuple[ControlPlane, ControlPlane], enrolled: tuple[str, Identity], tmp_path: Path, transport: str
) -> None:
    a, b = pair
    environment, identity = enrolled
    start_draining(a)
    dialer = dialer_a_then_b(identity, tmp_path, transport, a, b)
    started = time.monotonic()
    async with running_link(identity, dialer) as link:
        await eventually(lambda: on_b_only(a, b, identity.edge_id), MOVE_WITHIN_S, "the edge on B")
        elapsed = time.monotonic() - started
        print(f"{transport}: on B {elapsed:.2f} s after dialling the draining A")
        assert dialer.endpoint_index == 1
        # Turned away by A (one handshake), then on B: no failure, no backoff.
        assert link.connections == 2 and link.connected.is_set()
        assert link.last_error is None and link._backoff.attempt == 0
        # A never made the edge available: no call, placement or status sees it there.
        assert a.registry.for_environment(environment) == [] and a.registry.statuses() == []
        conn = b.registry.get(identity.edge_id)
        assert conn is not None and not conn.draining
        await asyncio.sleep(0.5)  # and it stays on B
        assert b.registry.get(identity.edge_id) is conn and link.connections == 2
    assert elapsed < MOVE_WITHIN_S


async def test_a_connected_idle_edge_leaves_a_control_plane_that_starts_draining(
    pair: tuple[ControlPlane, ControlPlane], enrolled: tuple[str, Identity], tmp_path: Path
) -> None:
    a, b = pair
    _, identity = enrolled
    dialer = dialer_a_then_b(identity, tmp_path, "grpc", a, b)
    async with running_link(identity, dialer) as link:
        await asyncio.wait_for(link.connected.wait(), 15)
        assert await connected_edges(a) == [identity.edge_id]
        start_draining(a)  # A would close the tunnel only after drain_grace_s (30 s)
        started = time.monotonic()
        await eventually(lambda: on_b_only(a, b, identity.edge_id), MOVE_WITHIN_S, "the edge on B")
        print(f"idle edge on B {time.monotonic() - started:.2f} s after A started draining")
        assert dialer.endpoint_index == 1 and link.connections == 2
        assert link.last_error is None and link._backoff.attempt == 0


async def test_an_edge_answers_its_call_in_flight_before_it_leaves_a_draining_control_plane(
    pair: tuple[ControlPlane, ControlPlane], enrolled: tuple[str, Identity], tmp_path: Path
) -> None:
    a, b = pair
    environment, identity = enrolled
    handler = FakeHandler()
    handler.release.clear()
    dialer = dialer_a_then_b(identity, tmp_path, "grpc", a, b)
    async with running_link(identity, dialer, handler) as link, api_client(a) as api:
        await asyncio.wait_for(link.connected.wait(), 15)
        body: dict[str, Any] = {
            "environment_id": environment,
            "session_id": "s1",
            "tool": "bash",
            "input": {},
        }
        call = asyncio.create_task(api.post("/v1/sandboxes/exec", json=body))
        await asyncio.wait_for(handler.started.wait(), 10)
        start_draining(a)
        await asyncio.sleep(0.5)  # a while: the edge must not leave A while it owes A an answer
        assert await connected_edges(a) == [identity.edge_id]  # still owes A an answer
        assert dialer.endpoint_index == 1  # but already knows where it goes next
        handler.release.set()
        r = await asyncio.wait_for(call, 10)
        assert r.status_code == 200, r.text
        assert "fake bash ran" in r.text
        await eventually(lambda: on_b_only(a, b, identity.edge_id), MOVE_WITHIN_S, "the edge on B")
        assert not link.session.unacked_results() and link._backoff.attempt == 0
