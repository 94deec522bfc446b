"""Finding released sessions and following the tunnels (``follow_tunnels``), on a real store.

* The sweep for resumable sessions whose lease is free walks every page of sessions, not the first.
* A harness holding a session whose environment has no edge on its process any more lets the lease
  go after ``tunnel_lost_release_s``; the harness whose placement says yes takes the session over
  and finishes it, every tool call running once.

Placement is a fake callable per harness (the control plane's says whether its process holds a
tunnel to an edge of the environment).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from control_plane.bus import EventBus
from control_plane.harness import AnthropicModelClient, Harness, HarnessConfig
from control_plane.harness import event_drafts as ev
from control_plane.store import SqliteStore
from control_plane.store.base import Store
from scripted_model import LocalModelServer, Script, Turn
from tests.support import eventually
from tests.support.harness import (
    ENV,
    FakeGateway,
    create_session,
    idle_count,
    send_message,
    settle,
    types,
    utcnow,
    wait_for_events,
)

FAST = {
    "lease_ttl_s": 3.0,
    "lease_scan_interval_s": 0.1,
    "lease_busy_retry_s": 0.05,
    "model_backoff_initial_s": 0.05,
    "model_backoff_max_s": 0.2,
}


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Path]:
    yield tmp_path / "outpost.db"


async def mark_running(store: Store, session_id: str) -> None:
    """Leave the session as a harness that released it mid-turn does: status ``running``."""
    resource = await store.get_resource("session", session_id)
    await store.update_resource("session", session_id, {**resource.body, "status": "running"}, utcnow())


async def test_the_released_session_sweep_reads_every_page(db: Path) -> None:
    store = SqliteStore(db)
    async with LocalModelServer(Script(["Picked up."])) as server:
        model = AnthropicModelClient(base_url=server.base_url, api_key="k")
        harness = Harness(
            store,
            FakeGateway(),
            EventBus(),
            model,
            HarnessConfig(**FAST),
            holder_id="sweeper",
            scan_page_size=2,
        )
        await harness.start()  # nothing to do yet: the sessions below are found by the sweep only
        # Five resumable sessions; four are held by a live harness elsewhere and stay so. The free
        # one is in the middle, so it is on the second page whichever way the listing is ordered.
        sessions = [await create_session(store) for _ in range(5)]
        free = sessions[2]
        for session_id in sessions:
            await send_message(store, session_id, "Carry on.")
            if session_id != free:
                assert await store.acquire_lease(session_id, "elsewhere", 60, utcnow()) is not None
            await mark_running(store, session_id)

        events = await wait_for_events(store, free, lambda es: idle_count(es) == 1, timeout_s=10)
        assert types(events)[-1] == ev.SESSION_STATUS_IDLE
        for session_id in sessions:
            if session_id != free:
                lease = await store.get_lease(session_id)
                assert lease is not None and lease.holder == "elsewhere"
        await harness.close()
        await model.close()
        assert server.request_count == 1
    await store.close()


async def test_a_session_whose_edge_left_is_released_and_taken_over_where_the_edge_went(db: Path) -> None:
    release_s = 1.0
    config = HarnessConfig(**FAST, follow_tunnels=True, tunnel_lost_release_s=release_s)
    edge_on = {"a"}  # which harness's process holds a tunnel to an edge of ENV

    def placement(name: str) -> Callable[[str, str], Awaitable[bool]]:
        async def here(session_id: str, environment_id: str) -> bool:
            assert session_id.startswith("sesn_") and environment_id == ENV
            return name in edge_on

        return here

    script = Script([Turn.tool_use("bash", {"command": "make build"}), Turn.text("Built.")])
    gateway = FakeGateway()
    gateway.gate.clear()  # the tool call runs until released
    store_a, store_b = SqliteStore(db), SqliteStore(db)
    async with LocalModelServer(script) as server:
        model = AnthropicModelClient(base_url=server.base_url, api_key="k")
        harness_a = Harness(
            store_a, gateway, EventBus(), model, config, holder_id="harness_a", placement=placement("a")
        )
        harness_b = Harness(
            store_b, gateway, EventBus(), model, config, holder_id="harness_b", placement=placement("b")
        )
        await harness_a.start()
        await harness_b.start()
        session_id = await create_session(store_a)
        await send_message(store_a, session_id, "Build it.")
        await harness_b.wake(session_id)  # B has no edge of the environment: it leaves the session
        await harness_a.wake(session_id)
        await asyncio.wait_for(gateway.in_flight.wait(), 10)
        lease = await store_a.get_lease(session_id)
        assert lease is not None and lease.holder == "harness_a"

        async def b_left() -> bool:  # B's task may still be writing its wake request
            return session_id not in harness_b.active_sessions()

        await eventually(b_left, 10, "B to leave the session")

        edge_on.clear()  # the edge's tunnel to A's process is gone ...
        lost = time.monotonic()
        await asyncio.sleep(release_s / 2)
        lease = await store_a.get_lease(session_id)  # ... A keeps the session for tunnel_lost_release_s
        assert lease is not None and lease.holder == "harness_a"
        assert session_id in harness_a.active_sessions()
        edge_on.add("b")  # ... and the edge is now connected to B's process

        async def moved_to_b() -> bool:
            held = await store_b.get_lease(session_id)
            return held is not None and held.holder == "harness_b"

        await eventually(moved_to_b, 10, "B to take the lease over")
        assert time.monotonic() - lost >= release_s
        await settle(harness_a, session_id)  # A only looks at the session now, and leaves it
        gateway.gate.set()  # the sandbox finishes the call; B's repeat of it joins the same run
        events = await wait_for_events(store_b, session_id, lambda es: idle_count(es) == 1, timeout_s=10)
        await harness_a.close()
        await harness_b.close()
        await model.close()
        requests = server.request_count
    await store_a.close()
    await store_b.close()

    tool_uses = [e for e in events if e.type == ev.AGENT_TOOL_USE]
    results = [e for e in events if e.type == ev.AGENT_TOOL_RESULT]
    assert len(tool_uses) == 1 and len(results) == 1 and not results[0].payload.get("is_error")
    assert gateway.runs == {tool_uses[0].id: 1}
    assert gateway.calls[tool_uses[0].id] == 2  # sent by A, again by B with the same key
    assert requests == 2


async def test_input_sent_to_a_process_that_may_not_run_the_session_reaches_the_one_that_may(
    db: Path,
) -> None:
    """Behind a load balancer, a user message can land on any process. B (no tunnel to the
    session's edge) is woken for it, leaves the session and records a wake request; A's sweep
    finds the request, runs the turn and clears it."""
    config = HarnessConfig(**FAST, follow_tunnels=True)

    def placement(placed: bool) -> Callable[[str, str], Awaitable[bool]]:
        async def here(session_id: str, environment_id: str) -> bool:
            return placed

        return here

    store_a, store_b = SqliteStore(db), SqliteStore(db)
    async with LocalModelServer(Script([Turn.text("Hello from the right process.")])) as server:
        model = AnthropicModelClient(base_url=server.base_url, api_key="k")
        harness_a = Harness(
            store_a,
            FakeGateway(),
            EventBus(),
            model,
            config,
            holder_id="harness_a",
            placement=placement(True),
        )
        harness_b = Harness(
            store_b,
            FakeGateway(),
            EventBus(),
            model,
            config,
            holder_id="harness_b",
            placement=placement(False),
        )
        await harness_a.start()
        await harness_b.start()
        session_id = await create_session(store_b)
        await send_message(store_b, session_id, "Hello?")
        await harness_b.wake(session_id)  # the API of the process the client reached wakes its harness

        async def requested() -> bool:
            return await store_b.wake_requests() == [session_id]

        await eventually(requested, 5, "B's wake request")
        events = await wait_for_events(store_a, session_id, lambda es: idle_count(es) == 1, timeout_s=10)
        await settle(harness_a, session_id)
        assert await store_a.wake_requests() == []  # A took the session and cleared the request
        assert session_id not in harness_b.active_sessions()
        await harness_a.close()
        await harness_b.close()
        await model.close()
    await store_a.close()
    await store_b.close()
    assert types(events)[-1] == ev.SESSION_STATUS_IDLE
    assert [e.payload["content"][0]["text"] for e in events if e.type == ev.AGENT_MESSAGE] == [
        "Hello from the right process."
    ]
