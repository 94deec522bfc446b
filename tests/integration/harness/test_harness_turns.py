"""The harness on a real SQLite store, the local model server (real SDK path) and a fake gateway."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from control_plane.bus import Delta, EventBus, Persisted
from control_plane.harness import AnthropicModelClient, Harness, HarnessConfig
from control_plane.harness import event_drafts as ev
from control_plane.store import SqliteStore
from control_plane.tunnel import SandboxMove
from scripted_model import LocalModelServer, Script, ToolUse, Turn
from tests.support import eventually
from tests.support.harness import (
    FAST,
    FakeGateway,
    create_session,
    idle_count,
    send,
    send_message,
    settle,
    types,
    utcnow,
    wait_for_events,
)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    opened = SqliteStore(tmp_path / "outpost.db")
    try:
        yield opened
    finally:
        await opened.close()


async def run_harness(
    store: SqliteStore,
    server: LocalModelServer,
    gateway: FakeGateway,
    bus: EventBus,
    config: HarnessConfig = FAST,
) -> tuple[Harness, AnthropicModelClient]:
    model = AnthropicModelClient(base_url=server.base_url, api_key="test-key")
    harness = Harness(store, gateway, bus, model, config)
    await harness.start()
    return harness, model


async def test_full_turn_with_a_bash_tool_use(store: SqliteStore) -> None:
    script = Script(
        [
            Turn.tool_use("bash", {"command": "echo hi"}, preamble="Running it now, as asked."),
            Turn.text("The command printed hi."),
        ]
    )
    gateway, bus = FakeGateway(), EventBus()
    async with LocalModelServer(script) as server:
        harness, model = await run_harness(store, server, gateway, bus)
        session_id = await create_session(store)
        with bus.subscribe(session_id) as sub:
            await send_message(store, session_id, "Say hi with bash.")
            await harness.wake(session_id)
            events = await wait_for_events(store, session_id, lambda es: idle_count(es) == 1)
            await settle(harness, session_id)
            items: list[Any] = []
            while (item := await sub.get(timeout_s=0.01)) is not None:
                items.append(item)
        await harness.close()
        await model.close()
        requests = server.requests

    assert types(events) == [
        ev.USER_MESSAGE,
        ev.SESSION_STATUS_RUNNING,
        ev.SPAN_MODEL_REQUEST_START,
        ev.AGENT_MESSAGE,
        ev.AGENT_TOOL_USE,
        ev.SPAN_MODEL_REQUEST_END,
        ev.SESSION_USAGE,
        ev.AGENT_TOOL_RESULT,
        ev.SPAN_MODEL_REQUEST_START,
        ev.AGENT_MESSAGE,
        ev.SPAN_MODEL_REQUEST_END,
        ev.SESSION_USAGE,
        ev.SESSION_STATUS_IDLE,
    ]
    tool_use = events[4]
    assert tool_use.payload["name"] == "bash" and tool_use.payload["evaluated_permission"] == "allow"
    result = events[7]
    assert result.payload == {
        "tool_use_id": tool_use.id,
        "content": [{"type": "text", "text": "bash ran: echo hi"}],
        "is_error": False,
    }
    assert gateway.runs == {tool_use.id: 1}
    assert len(gateway.provisions) == 1  # speculative, in parallel with the first model call

    # The second request carries the original tool_use id and its result.
    assert len(requests) == 2
    block = events[5].payload["assistant_message"]["content"][1]
    second = requests[1].body
    assert second["messages"][1]["content"][1] == {
        "type": "tool_use",
        "id": block["id"],
        "name": "bash",
        "input": {"command": "echo hi"},
    }
    assert second["messages"][2]["content"][0]["tool_use_id"] == block["id"]
    assert [t["name"] for t in second["tools"]] == [
        "bash",
        "edit",
        "read",
        "write",
        "glob",
        "grep",
        "lookup_ticket",
    ]
    assert second["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert second["system"][0]["cache_control"] == {"type": "ephemeral"}

    # Deltas were streamed under the ids of the stored agent.message events.
    deltas = [i.payload for i in items if isinstance(i, Delta)]
    starts = [d["event"]["id"] for d in deltas if d["type"] == "event_start"]
    assert starts == [events[3].id, events[9].id]
    streamed = "".join(
        d["delta"]["content"]["text"]
        for d in deltas
        if d["type"] == "event_delta" and d["event_id"] == events[9].id
    )
    assert streamed == "The command printed hi."
    assert events[9].payload == {"content": [{"type": "text", "text": "The command printed hi."}]}
    persisted = [i.last_seq for i in items if isinstance(i, Persisted)]
    assert persisted == sorted(persisted) and persisted[-1] == events[-1].seq

    # The session resource follows the log.
    session = await store.get_resource("session", session_id)
    assert session.body["status"] == "idle"
    assert session.body["usage"] == events[-2].payload["usage"]
    assert session.body["usage"]["output_tokens"] > 0


async def test_two_messages_back_to_back_make_two_sequential_turns(store: SqliteStore) -> None:
    in_flight = 0
    max_in_flight = 0

    async def responder(body: Any) -> Turn:
        nonlocal in_flight, max_in_flight
        in_flight += 1
        max_in_flight = max(max_in_flight, in_flight)
        await asyncio.sleep(0.15)  # a slow model: a second turn started meanwhile would overlap
        in_flight -= 1
        last = body["messages"][-1]["content"][-1]["text"]
        return Turn.text(f"answer to {last}")

    gateway, bus = FakeGateway(), EventBus()
    async with LocalModelServer(responder, chunk_delay_s=0.01) as server:
        harness, model = await run_harness(store, server, gateway, bus)
        session_id = await create_session(store)
        await send_message(store, session_id, "one")
        await harness.wake(session_id)
        await send_message(store, session_id, "two")
        await harness.wake(session_id)
        events = await wait_for_events(store, session_id, lambda es: idle_count(es) == 2)
        await harness.close()
        await model.close()
        requests = server.requests

    assert max_in_flight == 1
    assert len(requests) == 2
    assert requests[1].body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "one"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "answer to one"}]},
        {
            "role": "user",
            "content": [{"type": "text", "text": "two", "cache_control": {"type": "ephemeral"}}],
        },
    ]
    harness_events = [e for e in events if e.type not in (ev.USER_MESSAGE,)]
    assert (
        types(harness_events)
        == [
            ev.SESSION_STATUS_RUNNING,
            ev.SPAN_MODEL_REQUEST_START,
            ev.AGENT_MESSAGE,
            ev.SPAN_MODEL_REQUEST_END,
            ev.SESSION_USAGE,
            ev.SESSION_STATUS_IDLE,
        ]
        * 2
    )


async def test_custom_tool_requires_action_then_resumes(store: SqliteStore) -> None:
    script = Script([Turn([ToolUse("lookup_ticket", {"id": "7"})]), Turn.text("Ticket 7 is open.")])
    gateway, bus = FakeGateway(), EventBus()
    async with LocalModelServer(script) as server:
        harness, model = await run_harness(store, server, gateway, bus)
        session_id = await create_session(store)
        await send_message(store, session_id, "Ticket 7?")
        await harness.wake(session_id)
        events = await wait_for_events(store, session_id, lambda es: idle_count(es, "requires_action") == 1)
        custom = next(e for e in events if e.type == ev.AGENT_CUSTOM_TOOL_USE)
        assert events[-1].payload["stop_reason"] == {"type": "requires_action", "event_ids": [custom.id]}
        await settle(harness, session_id)
        assert (await store.get_resource("session", session_id)).body["status"] == "idle"
        await send(
            store,
            session_id,
            ev.USER_CUSTOM_TOOL_RESULT,
            {"custom_tool_use_id": custom.id, "content": [{"type": "text", "text": "open"}]},
        )
        await harness.wake(session_id)
        events = await wait_for_events(store, session_id, lambda es: idle_count(es) == 1)
        await harness.close()
        await model.close()
    assert gateway.runs == {}
    assert types(events)[-7:] == [
        ev.USER_CUSTOM_TOOL_RESULT,
        ev.SESSION_STATUS_RUNNING,
        ev.SPAN_MODEL_REQUEST_START,
        ev.AGENT_MESSAGE,
        ev.SPAN_MODEL_REQUEST_END,
        ev.SESSION_USAGE,
        ev.SESSION_STATUS_IDLE,
    ]


async def test_interrupt_cancels_a_slow_model_stream(store: SqliteStore) -> None:
    gateway, bus = FakeGateway(), EventBus()
    async with LocalModelServer(Script(["This would take a long time."]), ttft_s=20.0) as server:
        harness, model = await run_harness(store, server, gateway, bus)
        session_id = await create_session(store)
        await send_message(store, session_id, "Tell me a long story.")
        await harness.wake(session_id)
        await wait_for_events(store, session_id, lambda es: ev.SPAN_MODEL_REQUEST_START in types(es))
        started = time.monotonic()
        await send(store, session_id, ev.USER_INTERRUPT, {})
        await harness.wake(session_id)
        events = await wait_for_events(store, session_id, lambda es: idle_count(es) == 1)
        elapsed = time.monotonic() - started
        await harness.close()
        await model.close()
    assert elapsed < 5
    assert types(events)[-3:] == [ev.USER_INTERRUPT, ev.SPAN_MODEL_REQUEST_END, ev.SESSION_STATUS_IDLE]
    assert events[-2].payload["is_error"] is True
    assert ev.AGENT_MESSAGE not in types(events)


async def test_model_overload_is_retried_then_succeeds(store: SqliteStore) -> None:
    gateway, bus = FakeGateway(), EventBus()
    async with LocalModelServer(Script(["Recovered."])) as server:
        server.inject_errors(529, count=1)
        harness, model = await run_harness(store, server, gateway, bus)
        session_id = await create_session(store)
        await send_message(store, session_id, "hello")
        await harness.wake(session_id)
        events = await wait_for_events(store, session_id, lambda es: idle_count(es) == 1)
        await harness.close()
        await model.close()
    assert types(events) == [
        ev.USER_MESSAGE,
        ev.SESSION_STATUS_RUNNING,
        ev.SPAN_MODEL_REQUEST_START,
        ev.SPAN_MODEL_REQUEST_END,
        ev.SESSION_ERROR,
        ev.SESSION_STATUS_RESCHEDULED,
        ev.SESSION_STATUS_RUNNING,
        ev.SPAN_MODEL_REQUEST_START,
        ev.AGENT_MESSAGE,
        ev.SPAN_MODEL_REQUEST_END,
        ev.SESSION_USAGE,
        ev.SESSION_STATUS_IDLE,
    ]
    assert events[4].payload["error"]["type"] == "model_overloaded_error"
    assert events[4].payload["error"]["retry_status"] == {"type": "retrying"}


@pytest.mark.parametrize(
    ("status", "mid_stream", "error_type"),
    [
        (529, False, "model_overloaded_error"),
        (429, False, "model_rate_limited_error"),
        (500, True, "model_request_failed_error"),
    ],
)
async def test_retries_exhausted(store: SqliteStore, status: int, mid_stream: bool, error_type: str) -> None:
    gateway, bus = FakeGateway(), EventBus()
    async with LocalModelServer(Script(["never"])) as server:
        server.inject_errors(status, count=3, mid_stream=mid_stream)
        harness, model = await run_harness(store, server, gateway, bus)
        session_id = await create_session(store)
        await send_message(store, session_id, "hello")
        await harness.wake(session_id)
        events = await wait_for_events(store, session_id, lambda es: idle_count(es, "retries_exhausted") == 1)
        await settle(harness, session_id)
        await harness.close()
        await model.close()
        assert server.request_count == 3
    errors = [e.payload["error"] for e in events if e.type == ev.SESSION_ERROR]
    assert [e["retry_status"]["type"] for e in errors] == ["retrying", "retrying", "exhausted"]
    assert {e["type"] for e in errors} == {error_type}
    assert types(events).count(ev.SESSION_STATUS_RESCHEDULED) == 2
    assert (await store.get_resource("session", session_id)).body["status"] == "idle"


async def test_bad_request_terminates_the_session(store: SqliteStore) -> None:
    gateway, bus = FakeGateway(), EventBus()
    async with LocalModelServer(Script(["never"])) as server:
        server.inject_errors(400, count=1, message="bad")
        harness, model = await run_harness(store, server, gateway, bus)
        session_id = await create_session(store)
        await send_message(store, session_id, "hello")
        await harness.wake(session_id)
        events = await wait_for_events(
            store, session_id, lambda es: ev.SESSION_STATUS_TERMINATED in types(es)
        )
        await settle(harness, session_id)
        await harness.close()
        await model.close()
    error = next(e for e in events if e.type == ev.SESSION_ERROR).payload["error"]
    assert error["retry_status"] == {"type": "terminal"}
    assert error["type"] == "model_request_failed_error"
    assert (await store.get_resource("session", session_id)).body["status"] == "terminated"


@pytest.mark.parametrize("eager", [False, True])
async def test_provisioning_modes(store: SqliteStore, eager: bool) -> None:
    gateway, bus = FakeGateway(provision_delay_s=0.4), EventBus()
    config = FAST.model_copy(update={"eager_provision": eager})
    async with LocalModelServer(Script(["hi"])) as server:
        harness, model = await run_harness(store, server, gateway, bus, config)
        session_id = await create_session(store)
        await send_message(store, session_id, "hello")
        await harness.wake(session_id)
        await wait_for_events(store, session_id, lambda es: idle_count(es) == 1)
        await eventually(lambda: _provisioned(gateway), what="provisioning")
        await harness.close()
        await model.close()
        received = server.requests[0].received_at
    provision_start, provision_end = gateway.provisions[0]
    if eager:
        assert received >= provision_end  # the model waited for the sandbox
    else:
        assert received < provision_end  # the first model call never waits on a container
        assert provision_start <= received + 0.05


async def _provisioned(gateway: FakeGateway) -> bool:
    return len(gateway.provisions) == 1


async def test_session_ended_releases_and_destroys(store: SqliteStore) -> None:
    gateway, bus = FakeGateway(), EventBus()
    gateway.gate.clear()
    script = Script([Turn.tool_use("bash", {"command": "sleep 100"}), Turn.text("never")])
    async with LocalModelServer(script) as server:
        harness, model = await run_harness(store, server, gateway, bus)
        session_id = await create_session(store)
        await send_message(store, session_id, "sleep")
        await harness.wake(session_id)
        await asyncio.wait_for(gateway.in_flight.wait(), 10)
        await harness.session_ended(session_id)
        assert session_id not in harness.active_sessions()
        assert gateway.destroyed == [session_id]
        # The lease is free again: anyone can take it at once.
        lease = await store.acquire_lease(session_id, "someone-else", 10, utcnow())
        assert lease is not None
        await harness.close()
        await model.close()
    assert not gateway.runs  # the call never finished: the sandbox was destroyed under it


async def test_close_with_grace_lets_the_running_turn_finish(store: SqliteStore) -> None:
    gateway, bus = FakeGateway(), EventBus()
    async with LocalModelServer(Script(["Finished in time."]), ttft_s=0.3) as server:
        harness, model = await run_harness(store, server, gateway, bus)
        session_id = await create_session(store)
        await send_message(store, session_id, "hello")
        await harness.wake(session_id)
        await wait_for_events(store, session_id, lambda es: ev.SPAN_MODEL_REQUEST_START in types(es))
        await harness.close(grace_s=10)
        await model.close()
    events = await store.get_events(session_id)
    assert idle_count(events) == 1
    assert harness.active_sessions() == set()


async def test_a_sandbox_move_is_reported_once_and_told_to_the_model(store: SqliteStore) -> None:
    """The gateway made the session's sandbox anew on another edge: the log gets a non-fatal
    ``session.error`` naming both edges, the model reads a note ahead of the tool's output, and
    the move is not counted as a failed model request."""
    script = Script(
        [
            Turn.tool_use("bash", {"command": "ls /workspace"}),
            Turn.tool_use("bash", {"command": "pwd"}),
            Turn.text("Done."),
        ]
    )
    gateway, bus = FakeGateway(), EventBus()
    gateway.moves.append(SandboxMove("edge_a", "edge_b", "edge edge_a did not come back within 30 s"))
    async with LocalModelServer(script) as server:
        harness, model = await run_harness(store, server, gateway, bus)
        session_id = await create_session(store)
        await send_message(store, session_id, "Look around.")
        await harness.wake(session_id)
        events = await wait_for_events(store, session_id, lambda es: idle_count(es) == 1)
        await settle(harness, session_id)
        await harness.close()
        await model.close()
        requests = server.requests

    assert session_id in gateway.forgotten  # the harness re-reads the placement when it takes over
    errors = [e for e in events if e.type == ev.SESSION_ERROR]
    assert len(errors) == 1
    error = errors[0].payload["error"]
    assert error["type"] == "unknown_error" and error["retry_status"] == {"type": "retrying"}
    assert error["sandbox_moved"] == {
        "from_edge_id": "edge_a",
        "to_edge_id": "edge_b",
        "reason": "edge edge_a did not come back within 30 s",
    }
    assert "edge_a" in error["message"] and "/workspace" in error["message"]
    results = [e for e in events if e.type == ev.AGENT_TOOL_RESULT]
    first, second = results
    assert errors[0].seq == first.seq - 1  # recorded with the result it concerns
    assert first.payload["content"][0]["text"].startswith("[The sandbox was replaced")
    assert first.payload["content"][1] == {"type": "text", "text": "bash ran: ls /workspace"}
    assert len(second.payload["content"]) == 1  # reported once
    # The model saw the note; the next request is a first attempt, not a retry.
    sent = requests[1].body["messages"][-1]["content"][0]
    assert sent["type"] == "tool_result" and "sandbox was replaced" in json.dumps(sent)
    starts = [e for e in events if e.type == ev.SPAN_MODEL_REQUEST_START]
    assert len(starts) == 3 and idle_count(events) == 1
