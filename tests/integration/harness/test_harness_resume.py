"""Crash and takeover: a harness dies mid-tool or is fenced out; another one resumes the session.

Every tool call runs once (the fake gateway dedupes by idempotency key like the edge) and no
finished model turn is requested twice (the model server's request log holds no repeated request).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from control_plane.bus import EventBus
from control_plane.harness import AnthropicModelClient, Harness, HarnessConfig
from control_plane.harness import event_drafts as ev
from control_plane.store import SqliteStore
from scripted_model import LocalModelServer, RecordedRequest, Script, Turn
from tests.support import eventually
from tests.support.harness import (
    FakeGateway,
    create_session,
    idle_count,
    send_message,
    types,
    utcnow,
    wait_for_events,
)

SHORT_LEASE = HarnessConfig(
    lease_ttl_s=0.6,
    lease_scan_interval_s=0.1,
    lease_busy_retry_s=0.05,
    model_backoff_initial_s=0.05,
    model_backoff_max_s=0.2,
)


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Path]:
    yield tmp_path / "outpost.db"


def assert_no_request_repeated(requests: list[RecordedRequest]) -> None:
    bodies = [json.dumps(r.body["messages"], sort_keys=True) for r in requests]
    assert len(bodies) == len(set(bodies)), "a model turn was requested twice"


async def test_killed_mid_tool_a_second_harness_resumes_and_runs_each_tool_once(db: Path) -> None:
    script = Script(
        [
            Turn.tool_use("bash", {"command": "make build"}, preamble="Building."),
            Turn.tool_use("bash", {"command": "make test"}),
            Turn.text("Built and tested."),
        ]
    )
    gateway = FakeGateway()
    gateway.gate.clear()  # the first tool call hangs until released
    store_a, store_b = SqliteStore(db), SqliteStore(db)
    async with LocalModelServer(script) as server:
        model_a = AnthropicModelClient(base_url=server.base_url, api_key="k")
        model_b = AnthropicModelClient(base_url=server.base_url, api_key="k")
        harness_a = Harness(store_a, gateway, EventBus(), model_a, SHORT_LEASE, holder_id="harness_a")
        await harness_a.start()
        session_id = await create_session(store_a)
        await send_message(store_a, session_id, "Build and test.")
        await harness_a.wake(session_id)
        await asyncio.wait_for(gateway.in_flight.wait(), 10)

        await harness_a.abort()  # kill -9: no cleanup, the lease stays until it expires
        lease = await store_b.acquire_lease(session_id, "probe", 1, utcnow())
        assert lease is None, "the dead harness's lease must still be live"
        gateway.gate.set()  # the sandbox finishes the call while no brain is attached

        harness_b = Harness(store_b, gateway, EventBus(), model_b, SHORT_LEASE, holder_id="harness_b")
        await harness_b.start()  # finds the running session and waits for the lease to expire
        events = await wait_for_events(store_b, session_id, lambda es: idle_count(es) == 1)
        await harness_b.close()
        await model_a.close()
        await model_b.close()
        requests = server.requests
    await store_a.close()
    await store_b.close()

    tool_uses = [e for e in events if e.type == ev.AGENT_TOOL_USE]
    results = [e for e in events if e.type == ev.AGENT_TOOL_RESULT]
    assert len(tool_uses) == 2 and len(results) == 2
    assert [r.payload["tool_use_id"] for r in results] == [t.id for t in tool_uses]
    assert gateway.runs == {tool_uses[0].id: 1, tool_uses[1].id: 1}
    assert gateway.calls[tool_uses[0].id] == 2  # dispatched by A, re-dispatched by B with the same key
    assert len(requests) == 3
    assert_no_request_repeated(requests)
    assert types(events).count(ev.SPAN_MODEL_REQUEST_START) == 3


async def test_killed_after_the_model_answered_the_turn_is_not_requested_again(db: Path) -> None:
    """The harness dies right after the final answer is stored: the resumed harness only ends the turn."""
    store_a, store_b = SqliteStore(db), SqliteStore(db)
    async with LocalModelServer(Script(["All done."])) as server:
        model = AnthropicModelClient(base_url=server.base_url, api_key="k")
        gateway = FakeGateway()
        harness_a = Harness(store_a, gateway, EventBus(), model, SHORT_LEASE, holder_id="harness_a")
        await harness_a.start()
        session_id = await create_session(store_a)
        await send_message(store_a, session_id, "Finish up.")
        await harness_a.wake(session_id)
        await wait_for_events(store_a, session_id, lambda es: ev.SESSION_USAGE in types(es))
        # Kill before status_idle lands (it may have landed already; either way nothing repeats).
        await harness_a.abort()
        harness_b = Harness(store_b, gateway, EventBus(), model, SHORT_LEASE, holder_id="harness_b")
        await harness_b.start()
        events = await wait_for_events(store_b, session_id, lambda es: idle_count(es) == 1, timeout_s=10)
        await eventually(lambda: _inactive(harness_b, session_id))
        await harness_b.close()
        await model.close()
        assert server.request_count == 1
    await store_a.close()
    await store_b.close()
    assert types(events)[-1] == ev.SESSION_STATUS_IDLE


async def _inactive(harness: Harness, session_id: str) -> bool:
    return session_id not in harness.active_sessions()


def skewed(offset_s: float) -> Callable[[], datetime]:
    return lambda: utcnow() + timedelta(seconds=offset_s)


async def test_fenced_harness_stops_and_the_new_owner_finishes(
    db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="control_plane.harness")
    script = Script([Turn.tool_use("bash", {"command": "deploy"}), Turn.text("Deployed.")])
    gateway = FakeGateway()
    gateway.gate.clear()
    long_lease = SHORT_LEASE.model_copy(update={"lease_ttl_s": 60.0, "lease_scan_interval_s": 60.0})
    store_a, store_b = SqliteStore(db), SqliteStore(db)
    async with LocalModelServer(script) as server:
        model = AnthropicModelClient(base_url=server.base_url, api_key="k")
        harness_a = Harness(store_a, gateway, EventBus(), model, long_lease, holder_id="harness_a")
        # B's clock runs two minutes ahead: to B, A's lease has expired (A is a zombie: alive but stalled).
        harness_b = Harness(
            store_b, gateway, EventBus(), model, long_lease, holder_id="harness_b", clock=skewed(120)
        )
        await harness_a.start()
        session_id = await create_session(store_a)
        await send_message(store_a, session_id, "Deploy.")
        await harness_a.wake(session_id)
        await asyncio.wait_for(gateway.in_flight.wait(), 10)

        await harness_b.wake(session_id)  # B takes the lease over (epoch + 1) and re-dispatches
        tool_use = next(e for e in await store_b.get_events(session_id) if e.type == ev.AGENT_TOOL_USE)
        await eventually(lambda: _dispatched_twice(gateway, tool_use.id), what="B's re-dispatch")
        gateway.gate.set()  # both A and B get the one result; A's append is fenced

        events = await wait_for_events(store_b, session_id, lambda es: idle_count(es) == 1)
        await eventually(lambda: _inactive(harness_a, session_id), what="A to stop")
        await harness_a.close()
        await harness_b.close()
        await model.close()
        requests = server.requests
    await store_a.close()
    await store_b.close()

    results = [e for e in events if e.type == ev.AGENT_TOOL_RESULT]
    assert len(results) == 1
    assert gateway.runs == {tool_use.id: 1}
    assert len(requests) == 2
    assert_no_request_repeated(requests)
    assert any(
        "fenced" in r.getMessage() and r.name == "control_plane.harness.driver" for r in caplog.records
    )
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def _dispatched_twice(gateway: FakeGateway, key: str) -> bool:
    return gateway.calls[key] == 2


async def test_a_live_lease_keeps_a_second_harness_out(db: Path) -> None:
    """While A holds a live lease, B's wake waits; B never appends or calls the model."""
    store_a, store_b = SqliteStore(db), SqliteStore(db)
    gateway = FakeGateway()
    gateway.gate.clear()
    async with LocalModelServer(Script([Turn.tool_use("bash", {"command": "x"}), Turn.text("ok")])) as server:
        model = AnthropicModelClient(base_url=server.base_url, api_key="k")
        config = SHORT_LEASE.model_copy(update={"lease_ttl_s": 1.0})
        harness_a = Harness(store_a, gateway, EventBus(), model, config, holder_id="harness_a")
        harness_b = Harness(store_b, gateway, EventBus(), model, config, holder_id="harness_b")
        await harness_a.start()
        session_id = await create_session(store_a)
        await send_message(store_a, session_id, "go")
        await harness_a.wake(session_id)
        await asyncio.wait_for(gateway.in_flight.wait(), 10)
        await harness_b.wake(session_id)
        # A negative check over a span longer than the TTL: A keeps renewing, B keeps waiting.
        await asyncio.sleep(1.5)
        tool_use = next(e for e in await store_a.get_events(session_id) if e.type == ev.AGENT_TOOL_USE)
        assert gateway.calls[tool_use.id] == 1
        gateway.gate.set()
        await wait_for_events(store_a, session_id, lambda es: idle_count(es) == 1)
        await eventually(lambda: _inactive(harness_b, session_id), what="B to find nothing to do")
        await harness_a.close()
        await harness_b.close()
        await model.close()
        assert server.request_count == 2
    await store_a.close()
    await store_b.close()


async def test_input_appended_before_a_crash_is_picked_up_at_start(db: Path) -> None:
    """The API stored a user.message but the process died before any harness took the lease:
    the session's body still says idle, and a harness starting later must still run the turn."""
    store = SqliteStore(db)
    async with LocalModelServer(Script(["Picked up."])) as server:
        model = AnthropicModelClient(base_url=server.base_url, api_key="k")
        session_id = await create_session(store)
        await send_message(store, session_id, "Are you there?")  # no wake: the crash came first
        harness = Harness(store, FakeGateway(), EventBus(), model, SHORT_LEASE, holder_id="harness_late")
        await harness.start()
        events = await wait_for_events(store, session_id, lambda es: idle_count(es) == 1, timeout_s=10)
        await harness.close()
        await model.close()
        assert server.request_count == 1
    await store.close()
    assert types(events)[-1] == ev.SESSION_STATUS_IDLE
