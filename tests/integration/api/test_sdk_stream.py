"""``client.beta.sessions.events.stream``: the test plays the harness (``store.append`` +
``bus.publish_persisted``, ``bus.publish_delta`` for previews) and checks what the SDK yields."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import anthropic
import pytest

from control_plane.sessions.events import new_event_id
from control_plane.store.base import NewEvent
from tests.support import eventually
from tests.support.api_app import Api, assert_valid

TIMEOUT_S = 10


async def harness_append(api: Api, session_id: str, *events: NewEvent) -> None:
    stored = await api.store.append(session_id, list(events), datetime.now(UTC))
    api.bus.publish_persisted(session_id, stored[-1].seq)


def agent_turn(message_id: str) -> list[Any]:
    """One turn as the harness produces it: previews first, then the stored events."""
    return [
        NewEvent(new_event_id(), "session.status_running"),
        {"type": "event_start", "event": {"type": "agent.thinking", "id": "sevt_thinking"}},
        {"type": "event_start", "event": {"type": "agent.message", "id": message_id}},
        {
            "type": "event_delta",
            "event_id": message_id,
            "delta": {"type": "content_delta", "index": 0, "content": {"type": "text", "text": "Hel"}},
        },
        {
            "type": "event_delta",
            "event_id": message_id,
            "delta": {"type": "content_delta", "index": 0, "content": {"type": "text", "text": "lo"}},
        },
        NewEvent(message_id, "agent.message", {"content": [{"type": "text", "text": "Hello"}]}),
        NewEvent(new_event_id(), "session.status_idle", {"stop_reason": {"type": "end_turn"}}),
    ]


async def play(api: Api, session_id: str, steps: list[Any]) -> None:
    for step in steps:
        if isinstance(step, NewEvent):
            await harness_append(api, session_id, step)
        else:
            api.bus.publish_delta(session_id, step)


async def collect_until(stream: AsyncIterator[Any], last_type: str) -> list[Any]:
    seen = []
    async with asyncio.timeout(TIMEOUT_S):
        async for event in stream:
            seen.append(event)
            if event.type == last_type:
                return seen
    raise AssertionError(f"stream ended before {last_type}: {[e.type for e in seen]}")


async def test_stream_yields_events_and_requested_deltas(api: Api) -> None:
    session = await api.session()
    stream = await api.client.beta.sessions.events.stream(session.id, event_deltas=["agent.message"])
    async with stream:
        sent = await api.client.beta.sessions.events.send(
            session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "hi"}]}]
        )
        assert sent.data is not None
        message_id = new_event_id()
        await play(api, session.id, agent_turn(message_id))
        seen = await collect_until(stream, "session.status_idle")
        assert api.bus.subscriber_count(session.id) == 1
    await eventually(lambda: api.bus.subscriber_count(session.id) == 0)  # closing unsubscribes

    assert [e.type for e in seen] == [
        "user.message",
        "session.status_running",
        "event_start",
        "event_delta",
        "event_delta",
        "agent.message",
        "session.status_idle",
    ]
    for event in seen:
        assert_valid(event)
    assert seen[0].id == sent.data[0].id
    assert seen[2].event.id == message_id
    assert "".join(e.delta.content.text for e in seen[3:5]) == "Hello"
    assert seen[5].id == message_id
    assert seen[5].content[0].text == "Hello"
    assert seen[6].stop_reason.type == "end_turn"
    # Every event persisted after connecting was delivered, in log order.
    listed = [e.id async for e in api.client.beta.sessions.events.list(session.id)]
    assert [e.id for e in seen if e.type not in ("event_start", "event_delta")] == listed


async def test_stream_without_deltas_gets_only_events(api: Api) -> None:
    session = await api.session()
    stream = await api.client.beta.sessions.events.stream(session.id)
    async with stream:
        await play(api, session.id, agent_turn(new_event_id()))
        seen = await collect_until(stream, "session.status_idle")
    assert [e.type for e in seen] == ["session.status_running", "agent.message", "session.status_idle"]


async def test_thinking_preview_and_late_deltas(api: Api) -> None:
    session = await api.session()
    stream = await api.client.beta.sessions.events.stream(session.id, event_deltas=["agent.thinking"])
    async with stream:
        # A delta whose start this stream never saw is not forwarded (the SDK would refuse it).
        orphan = {
            "type": "event_delta",
            "event_id": "sevt_unseen",
            "delta": {"type": "content_delta", "index": 0, "content": {"type": "text", "text": "x"}},
        }
        api.bus.publish_delta(session.id, orphan)
        await play(api, session.id, agent_turn(new_event_id()))
        seen = await collect_until(stream, "session.status_idle")
    assert [e.type for e in seen] == [
        "session.status_running",
        "event_start",
        "agent.message",
        "session.status_idle",
    ]
    assert seen[1].event.type == "agent.thinking"


async def test_stream_ends_when_the_session_is_deleted(api: Api) -> None:
    session = await api.session()
    stream = await api.client.beta.sessions.events.stream(session.id)
    async with stream:
        await api.client.beta.sessions.delete(session.id)
        seen = await collect_until(stream, "session.deleted")
        assert_valid(seen[-1])
        async with asyncio.timeout(TIMEOUT_S):
            rest = [e async for e in stream]
    assert rest == []
    with pytest.raises(anthropic.NotFoundError):
        await api.client.beta.sessions.events.stream(session.id)


async def test_raw_frames_pings_and_resume(api: Api) -> None:
    """On the wire: ``event:`` on every frame, pings while idle, ``id:`` = seq, and a reconnect
    with ``after_seq`` (or ``Last-Event-ID``) replays what was missed."""
    session = await api.session()
    first = NewEvent(new_event_id(), "session.status_running")
    await harness_append(api, session.id, first)
    frames: list[tuple[str | None, str, dict[str, Any]]] = []
    url = f"/v1/sessions/{session.id}/events/stream"
    async with api.http.stream(
        "GET", url, params={"after_seq": 0}, headers={"accept": "application/json"}
    ) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["request-id"]
        pending: dict[str, str] = {}
        async with asyncio.timeout(TIMEOUT_S):
            async for line in r.aiter_lines():
                if line:
                    name, _, value = line.partition(": ")
                    pending[name] = value
                    continue
                frames.append((pending.get("id"), pending["event"], json.loads(pending["data"])))
                pending = {}
                if sum(1 for f in frames if f[1] == "ping") >= 2:
                    break
    assert frames[0] == ("1", "session.status_running", frames[0][2])
    assert frames[0][2]["id"] == first.id
    assert frames[1][1:] == ("ping", {})

    second = NewEvent(new_event_id(), "session.status_idle", {"stop_reason": {"type": "end_turn"}})
    await harness_append(api, session.id, second)
    async with api.http.stream("GET", url, headers={"last-event-id": "1"}) as r:
        async with asyncio.timeout(TIMEOUT_S):
            lines = r.aiter_lines()
            assert await anext(lines) == "id: 2"
            assert await anext(lines) == "event: session.status_idle"
            assert json.loads((await anext(lines)).removeprefix("data: "))["id"] == second.id
