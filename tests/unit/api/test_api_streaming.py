"""``EventStream`` over a MemoryStore and an EventBus, without HTTP."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest

from control_plane.api.errors import ApiError
from control_plane.api.streaming import PING_FRAME, EventStream, StreamSlots, sse_frame
from control_plane.bus import Delta, EventBus, Persisted
from control_plane.sessions.events import new_event_id
from control_plane.sessions.log import append_and_publish
from control_plane.store.base import Event, NewEvent
from control_plane.store.memory import MemoryStore

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def parse(frame: bytes) -> tuple[str, dict[str, object]]:
    fields = dict(line.split(": ", 1) for line in frame.decode().strip().split("\n"))
    return fields["event"], json.loads(fields["data"])


async def split_frames(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """One SSE frame at a time from the stream's writes (a write may hold several frames)."""
    try:
        async for chunk in chunks:
            for frame in chunk.split(b"\n\n")[:-1]:
                yield frame + b"\n\n"
    finally:
        await chunks.aclose()  # type: ignore[attr-defined]


async def next_frame(frames: AsyncIterator[bytes]) -> bytes:
    return await asyncio.wait_for(anext(frames), 5)


async def open_stream(store: MemoryStore, bus: EventBus, **kwargs: object) -> EventStream:
    params: dict[str, object] = {
        "after_seq": None,
        "delta_types": (),
        "ping_interval_s": 0.05,
        "clock": lambda: NOW,
    }
    params.update(kwargs)
    return await EventStream.open(store, bus, "sesn_1", **params)


async def test_only_events_after_connecting_then_pings() -> None:
    store, bus = MemoryStore(), EventBus()
    await store.create_resource("session", "sesn_1", {}, NOW)
    await store.append("sesn_1", [NewEvent("old", "user.message", {"content": []})], NOW)
    stream = await open_stream(store, bus)
    assert bus.subscriber_count("sesn_1") == 1
    frames = split_frames(stream.frames())
    await store.append("sesn_1", [NewEvent("new", "session.status_running")], NOW)
    bus.publish_persisted("sesn_1", 2)
    assert parse(await next_frame(frames)) == (
        "session.status_running",
        {"id": "new", "type": "session.status_running", "processed_at": "2030-01-01T00:00:00Z"},
    )
    assert await next_frame(frames) == PING_FRAME
    await frames.aclose()
    stream.close()
    stream.close()
    assert bus.subscriber_count("sesn_1") == 0


async def test_resume_delta_filter_and_delete() -> None:
    store, bus = MemoryStore(), EventBus()
    await store.create_resource("session", "sesn_1", {}, NOW)
    await store.append("sesn_1", [NewEvent("e1", "session.status_running")], NOW)
    stream = await open_stream(store, bus, after_seq=0, delta_types={"agent.message"})
    frames = split_frames(stream.frames())
    assert parse(await next_frame(frames))[1]["id"] == "e1"  # backlog after after_seq

    message_id = new_event_id()
    delta = {"type": "event_delta", "event_id": message_id, "delta": {"type": "content_delta"}}
    bus.publish_delta("sesn_1", delta)  # before its start: dropped
    bus.publish_delta("sesn_1", {"type": "event_start", "event": {"type": "agent.thinking", "id": "t"}})
    bus.publish_delta("sesn_1", {"type": "event_start", "event": {"type": "agent.message", "id": message_id}})
    bus.publish_delta("sesn_1", delta)
    assert parse(await next_frame(frames))[0] == "event_start"
    assert parse(await next_frame(frames)) == ("event_delta", delta)

    await store.delete_resource("session", "sesn_1")
    bus.publish_persisted("sesn_1", 0)
    name, data = parse(await next_frame(frames))
    assert name == "session.deleted"
    assert data["type"] == "session.deleted"
    assert [f async for f in frames] == []
    stream.close()


def test_frame_format() -> None:
    assert sse_frame("ping", {}) == b"event: ping\ndata: {}\n\n"
    assert sse_frame("x", {"a": "é"}, "7") == 'id: 7\nevent: x\ndata: {"a":"é"}\n\n'.encode()


async def test_events_and_previews_keep_their_published_order() -> None:
    """The store may already hold later events when a notification is handled; the stream reads only
    up to the notified seq, so previews published in between come out in between."""
    store, bus = MemoryStore(), EventBus()
    await store.create_resource("session", "sesn_1", {}, NOW)
    stream = await open_stream(store, bus, delta_types={"agent.message"})
    frames = split_frames(stream.frames())
    await store.append("sesn_1", [NewEvent("run", "session.status_running")], NOW)
    bus.publish_persisted("sesn_1", 1)
    bus.publish_delta("sesn_1", {"type": "event_start", "event": {"type": "agent.message", "id": "msg"}})
    await store.append("sesn_1", [NewEvent("msg", "agent.message", {"content": []})], NOW)
    bus.publish_persisted("sesn_1", 2)
    # A late preview of an event already sent is dropped.
    bus.publish_delta("sesn_1", {"type": "event_start", "event": {"type": "agent.message", "id": "msg"}})
    await store.append("sesn_1", [NewEvent("idle", "session.status_idle")], NOW)
    bus.publish_persisted("sesn_1", 3)
    names = [parse(await next_frame(frames))[0] for _ in range(4)]
    assert names == ["session.status_running", "event_start", "agent.message", "session.status_idle"]
    await frames.aclose()
    stream.close()


class _CountingStore(MemoryStore):
    """Counts the reads an idle stream makes."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    async def get_resource(self, kind: str, resource_id: str):  # type: ignore[no-untyped-def]
        self.reads += 1
        return await super().get_resource(kind, resource_id)

    async def get_events(self, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        self.reads += 1
        return await super().get_events(*args, **kwargs)  # type: ignore[arg-type]


async def test_pings_read_nothing_from_the_store() -> None:
    store, bus = _CountingStore(), EventBus()
    await store.create_resource("session", "sesn_1", {}, NOW)
    stream = await open_stream(store, bus)
    frames = split_frames(stream.frames())
    store.reads = 0
    for _ in range(5):
        assert await next_frame(frames) == PING_FRAME
    assert store.reads == 0
    await frames.aclose()
    stream.close()


def test_stream_slots_cap_per_key_then_in_all() -> None:
    slots = StreamSlots(max_per_key=2, max_total=3)
    a1, a2 = slots.acquire("key_a"), slots.acquire("key_a")
    with pytest.raises(ApiError) as per_key:
        slots.acquire("key_a")
    assert per_key.value.status == 429 and per_key.value.error_type == "rate_limit_error"
    assert "stream_max_per_key" in per_key.value.message
    b1 = slots.acquire("key_b")
    with pytest.raises(ApiError) as total:
        slots.acquire("key_c")
    assert total.value.status == 503 and "stream_max_total" in total.value.message
    a1()
    a1()  # idempotent: releases one slot only
    assert slots.total == 2 and slots.held_by("key_a") == 1
    slots.acquire("key_c")
    a2()
    b1()
    assert slots.held_by("key_a") == slots.held_by("key_b") == 0
    with pytest.raises(ValueError):
        StreamSlots(max_per_key=0, max_total=1)


class CountingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.event_reads = 0

    async def get_events(self, session_id: str, **kwargs: Any) -> list[Event]:  # type: ignore[override]
        self.event_reads += 1
        return await super().get_events(session_id, **kwargs)


async def test_events_carried_by_this_process_notices_are_sent_without_reading_the_store() -> None:
    store, bus = CountingStore(), EventBus()
    await store.create_resource("session", "sesn_1", {}, NOW)
    stream = await open_stream(store, bus)
    frames = split_frames(stream.frames())
    first = [NewEvent("a", "session.status_running"), NewEvent("b", "agent.message", {"content": []})]
    await append_and_publish(store, bus, "sesn_1", first, NOW)
    assert [parse(await next_frame(frames))[1]["id"] for _ in first] == ["a", "b"]
    assert store.event_reads == 0
    # An append this stream did not hear about (another process's, its notice lost) leaves a gap:
    # the next carried notice does not follow the last event sent, so the stream reads the store.
    await store.append("sesn_1", [NewEvent("c", "agent.message", {"content": []})], NOW)
    await append_and_publish(store, bus, "sesn_1", [NewEvent("d", "session.status_idle")], NOW)
    assert [parse(await next_frame(frames))[1]["id"] for _ in "cd"] == ["c", "d"]
    assert store.event_reads == 1
    await frames.aclose()
    stream.close()


async def test_what_is_ready_together_goes_out_in_one_write() -> None:
    """An append's events, and the notices and deltas queued before the stream woke, make one write."""
    store, bus = MemoryStore(), EventBus()
    await store.create_resource("session", "sesn_1", {}, NOW)
    stream = await open_stream(store, bus, delta_types={"agent.message"})
    writes = stream.frames()
    stored = await append_and_publish(
        store,
        bus,
        "sesn_1",
        [NewEvent(i, t) for i, t in (("a", "session.status_running"), ("b", "span.model_request_start"))],
        NOW,
    )
    assert [e.seq for e in stored] == [1, 2]
    bus.publish_delta("sesn_1", {"type": "event_start", "event": {"type": "agent.message", "id": "m"}})
    bus.publish_delta("sesn_1", {"type": "event_delta", "event_id": "m", "delta": {"type": "content_delta"}})
    chunk = await next_frame(writes)
    names = [parse(frame + b"\n\n")[0] for frame in chunk.split(b"\n\n")[:-1]]
    assert names == ["session.status_running", "span.model_request_start", "event_start", "event_delta"]
    await writes.aclose()
    stream.close()


async def test_deltas_reach_only_subscribers_that_asked_for_them() -> None:
    bus = EventBus()
    assert not bus.wants_deltas("sesn_1")
    with bus.subscribe("sesn_1", deltas=False) as plain:
        bus.publish_delta("sesn_1", {"type": "event_start", "event": {"type": "agent.message", "id": "m"}})
        assert not bus.wants_deltas("sesn_1") and plain.get_nowait() is None
        with bus.subscribe("sesn_1") as previews, bus.subscribe("sesn_1") as more:
            assert bus.wants_deltas("sesn_1")
            start = {"type": "event_start", "event": {"type": "agent.message", "id": "n"}}
            bus.publish_delta("sesn_1", start)
            bus.publish_persisted("sesn_1", 3)
            assert plain.get_nowait() == Persisted("sesn_1", 3)
            for sub in (previews, more):
                assert isinstance(sub.get_nowait(), Delta)
                assert sub.get_nowait() == Persisted("sesn_1", 3)
        assert not bus.wants_deltas("sesn_1")
    assert bus.subscriber_count("sesn_1") == 0
