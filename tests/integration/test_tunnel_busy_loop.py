"""Tunnels stay up while the process's event loop is busy and calls are in flight (issue 11).

A control plane running a thousand sessions iterates its event loop a few dozen times a second.
grpc-aio hands gRPC completions to the loop through a socketpair, one byte per completion and one
byte read per loop iteration; once ~280 bytes pile up its poller thread blocks and no tunnel frame
moves in either direction, on any tunnel, for seconds: every edge dropped its tunnel at once
(``outpost_wire.grpc_wakeups``). Here the same mechanism at a small size: a real control plane
and real edge links (``Dialer`` + ``Link``, gRPC on loopback) in one process, a loop kept busy by
tasks that each hold it a moment per iteration, and many calls in flight on every tunnel. Nothing
times anything: every tunnel must still be its first one at the end.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from control_plane.server import ControlPlane
from edge_agent.connection import Link
from edge_agent.enroll import register
from edge_agent.identity import Identity
from outpost_wire.frames import Execute, Request
from outpost_wire.grpc_wakeups import wakeups_drained
from outpost_wire.results import ToolResult
from tests.support import eventually
from tests.support.edge_link import (
    api_client,
    make_dialer,
    running_control_plane,
    running_link,
)
from tests.support.edge_link import no_ambient_proxy as no_ambient_proxy

pytestmark = pytest.mark.usefixtures("no_ambient_proxy")

EDGES = 4
CALLS_PER_EDGE = 40  # in flight at once on every tunnel, each followed by the next at once
HOGS = 100  # tasks holding the loop ~1 ms per iteration each: ~0.1 s iterations, as under load
LOAD_S = 10.0  # over three heartbeat timeouts of edge_link (3 s): time for a stall to drop tunnels


async def _enroll(cp: ControlPlane, api: httpx.AsyncClient, environment: str, state_dir: Path) -> Identity:
    r = await api.post(f"/v1/environments/{environment}/enrollment_tokens", json={})
    token = r.json()
    return await register(
        cp.http_url, token["token"], state_dir, name=state_dir.name, ca_fingerprint=token["ca_fingerprint"]
    )


async def _hog(stop: asyncio.Event) -> None:
    """Hold the loop about a millisecond, yield, again: the loop iterates slowly but never stalls."""
    while not stop.is_set():
        end = time.perf_counter() + 0.001
        while time.perf_counter() < end:
            pass
        await asyncio.sleep(0)


async def _caller(cp: ControlPlane, edge_id: str, stop: asyncio.Event) -> int:
    """Send Execute requests to ``edge_id`` one after the other until ``stop``; returns how many
    were answered."""
    answered = 0
    while not stop.is_set():
        conn = cp.registry.get(edge_id)
        if conn is None:
            await asyncio.sleep(0.05)
            continue
        request_id = "req_" + uuid.uuid4().hex
        future = cp.registry.track(request_id, edge_id)
        try:
            conn.send_request(
                Request(
                    request_id=request_id,
                    session_id="sesn_busy",
                    idempotency_key=request_id,
                    deadline_ms=int((time.monotonic() + 60) * 1000),
                    op=Execute(tool="bash", input_json='{"command": "true"}'),
                )
            )
            closed: asyncio.Future[Any] = asyncio.ensure_future(conn.closed.wait())
            try:
                await asyncio.wait([future, closed], return_when=asyncio.FIRST_COMPLETED)
            finally:
                closed.cancel()
            if future.done() and isinstance(future.result(), ToolResult):
                answered += 1
        finally:
            cp.registry.forget(request_id)
    return answered


async def test_tunnels_survive_a_busy_loop_with_many_calls_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with AsyncExitStack() as stack:
        cp = await stack.enter_async_context(running_control_plane(tmp_path, monkeypatch))
        api = await stack.enter_async_context(api_client(cp))
        r = await api.post("/v1/environments", json={"name": "busy", "config": {"type": "self_hosted"}})
        environment = str(r.json()["id"])
        identities = [await _enroll(cp, api, environment, tmp_path / f"edge{i}") for i in range(EDGES)]
        links: list[Link] = []
        for identity in identities:
            dialer = make_dialer(identity, tmp_path / identity.edge_id)
            links.append(await stack.enter_async_context(running_link(identity, dialer)))

        async def all_up() -> bool:
            return all(link.connected.is_set() for link in links) and all(
                cp.registry.get(identity.edge_id) is not None for identity in identities
            )

        await eventually(all_up, what="every edge connected")
        first = {identity.edge_id: cp.registry.get(identity.edge_id) for identity in identities}
        # The tunnel server drains grpc-aio's wake-ups (this grpc still has the shape it knows).
        assert wakeups_drained()

        stop = asyncio.Event()
        hogs = [asyncio.create_task(_hog(stop)) for _ in range(HOGS)]
        callers = [
            asyncio.create_task(_caller(cp, identity.edge_id, stop))
            for identity in identities
            for _ in range(CALLS_PER_EDGE)
        ]
        await asyncio.sleep(LOAD_S)
        stop.set()
        answered = await asyncio.gather(*callers)
        await asyncio.gather(*hogs)

        assert sum(answered) > 0
        assert [link.connections for link in links] == [1] * EDGES, "a tunnel dropped and came back"
        for identity in identities:
            assert cp.registry.get(identity.edge_id) is first[identity.edge_id], "a tunnel was replaced"
