"""The live event stream of a session (``GET /v1/sessions/{id}/events/stream``) as Server-Sent Events.

Every frame names its type on an ``event:`` line (the SDK drops frames without one)::

    id: 7                      (persisted events only: their seq in the log)
    event: agent.message
    data: {"id": "sevt_...", "type": "agent.message", "processed_at": "...", "content": [...]}

Keep-alives are ``event: ping`` / ``data: {}`` frames, which the SDK skips. A ping is pure keep-alive:
it reads nothing from the store (an idle stream costs a timer, not a query); everything a stream
sends comes from a bus notification.

Limits: :class:`StreamSlots` counts the open streams per API key and in all; past the per-key cap a
new stream is refused with 429 ``rate_limit_error``, past the process-wide cap with 503.

Delivery: the stream subscribes to the bus *before* it reads how far the log reaches, so every
event persisted after the client connected is delivered, in log order, read back from the store on
each ``Persisted`` notification (the bus carries no events, only "the log moved"), up to the seq
it names, so events and the previews published between them keep their order. ``Delta`` items
(``event_start`` / ``event_delta`` previews) are forwarded for the event types the client asked
for in ``event_deltas[]``; a delta is only forwarded after its ``event_start`` was, because the SDK
refuses a delta for a preview it has not seen start (nor is a preview started for an event already
sent). When the session is deleted the stream sends a ``session.deleted`` frame and ends; otherwise
it stays open until the client leaves.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Collection
from datetime import datetime
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from control_plane.api.errors import ApiError
from control_plane.bus import Delta, EventBus, Subscription
from control_plane.errors import NotFound
from control_plane.sessions.events import event_json, new_event_id, rfc3339
from control_plane.store.base import Event, Store

__all__ = ["PING_FRAME", "EventStream", "SseResponse", "StreamSlots", "sse_frame"]

log = logging.getLogger(__name__)

PING_FRAME = b"event: ping\ndata: {}\n\n"
_READ_BATCH = 500
#: Frames ready together are written together, up to about this many bytes per write.
_COALESCE_BYTES = 64 * 1024
_MAX_OPEN_PREVIEWS = 1024
_REPEAT_CHECK_INTERVAL_S = 5.0


def sse_frame(event_type: str, data: dict[str, Any], event_id: str | None = None) -> bytes:
    """One SSE frame; ``data`` is compact single-line JSON."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    body = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return f"{head}event: {event_type}\ndata: {body}\n\n".encode()


class StreamSlots:
    """Open event streams, per API key and in all, under their caps."""

    def __init__(self, max_per_key: int, max_total: int) -> None:
        if max_per_key < 1 or max_total < 1:
            raise ValueError("stream caps must be positive")
        self.max_per_key = max_per_key
        self.max_total = max_total
        self._by_key: dict[str, int] = {}
        self.total = 0

    def acquire(self, key_id: str) -> Callable[[], None]:
        """Take a slot for ``key_id``; returns its release (idempotent). Raises :class:`ApiError`
        429 past the key's cap, 503 past the process's."""
        held = self._by_key.get(key_id, 0)
        if held >= self.max_per_key:
            raise ApiError(
                429,
                f"too many open event streams for this API key ({held}, the limit is "
                f"{self.max_per_key}, stream_max_per_key); close one before opening another",
            )
        if self.total >= self.max_total:
            raise ApiError(
                503,
                f"this control plane holds its limit of {self.max_total} open event streams "
                "(stream_max_total); retry later",
            )
        self._by_key[key_id] = held + 1
        self.total += 1
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            self.total -= 1
            left = self._by_key[key_id] - 1
            if left:
                self._by_key[key_id] = left
            else:
                del self._by_key[key_id]

        return release

    def held_by(self, key_id: str) -> int:
        return self._by_key.get(key_id, 0)


class SseResponse(StreamingResponse):
    """A streaming response that runs ``on_close`` however it ends (even if it never starts)."""

    media_type = "text/event-stream"

    def __init__(self, content: AsyncIterator[bytes], on_close: Callable[[], None]) -> None:
        super().__init__(content, headers={"cache-control": "no-cache", "x-accel-buffering": "no"})
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()


class EventStream:
    """The frames of one stream connection. Create it with :meth:`open`, which subscribes and
    reads the starting point; iterate :meth:`frames`; :meth:`close` unsubscribes (idempotent)."""

    def __init__(
        self,
        store: Store,
        session_id: str,
        subscription: contextlib.AbstractContextManager[Subscription],
        sub: Subscription,
        *,
        last_seq: int,
        backlog_to: int,
        delta_types: Collection[str],
        ping_interval_s: float,
        clock: Callable[[], datetime],
        keep: Callable[[Event], bool] | None = None,
        thread_id: str | None = None,
    ) -> None:
        self._store = store
        self._keep = keep  # a thread's stream: the events of that thread only
        self._thread_id = thread_id  # a subagent thread's stream: its previews only
        self._session_id = session_id
        self._subscription = subscription
        self._sub = sub
        self._last_seq = last_seq
        self._repeat_checked_at = -math.inf  # see _gone
        self._backlog_to = backlog_to  # the log's end when the stream opened
        self._delta_types = frozenset(delta_types)
        self._ping_interval_s = ping_interval_s
        self._clock = clock
        self._previews: dict[str, None] = {}  # ids of previews whose event_start was sent
        self._delivered: dict[str, None] = {}  # ids of the events sent lately (no preview after)
        self._closed = False

    @classmethod
    async def open(
        cls,
        store: Store,
        bus: EventBus,
        session_id: str,
        *,
        after_seq: int | None,
        delta_types: Collection[str],
        ping_interval_s: float,
        clock: Callable[[], datetime],
        keep: Callable[[Event], bool] | None = None,
        thread_id: str | None = None,
    ) -> EventStream:
        """``keep``: the events to send (all by default); ``thread_id``: send only the previews of
        that subagent thread (``None``: every preview, the subagents' cross-posted)."""
        subscription = bus.subscribe(session_id, deltas=bool(delta_types))
        sub = subscription.__enter__()
        try:
            end = await store.last_seq(session_id)
        except BaseException:
            subscription.__exit__(None, None, None)
            raise
        return cls(
            store,
            session_id,
            subscription,
            sub,
            last_seq=end if after_seq is None else min(after_seq, end),
            backlog_to=end,
            delta_types=delta_types,
            ping_interval_s=ping_interval_s,
            clock=clock,
            keep=keep,
            thread_id=thread_id,
        )

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._subscription.__exit__(None, None, None)

    async def frames(self) -> AsyncIterator[bytes]:
        """Backlog first (only when resuming from ``after_seq``), then live frames until the
        session is deleted. What is ready at once goes out in one write: the frames of the items
        queued together (an append's events, a run of deltas), up to ``_COALESCE_BYTES``."""
        async for chunk in self._read_new(up_to=self._backlog_to):
            yield chunk
        while True:
            item = await self._sub.get(self._ping_interval_s)
            if item is None:
                yield PING_FRAME  # keep-alive only: no store read (a deletion comes on the bus)
                continue
            out: list[bytes] = []
            size = 0
            while item is not None:
                if isinstance(item, Delta):
                    preview = self._delta_frame(item)
                    if preview is not None:
                        out.append(preview)
                        size += len(preview)
                else:
                    delivered = False
                    carried = self._take_carried(item.events)
                    if carried:
                        out.append(carried)
                        size += len(carried)
                        delivered = True
                    async for chunk in self._read_new(up_to=item.last_seq):
                        out.append(chunk)
                        size += len(chunk)
                        delivered = True
                    if not delivered and await self._gone(item.last_seq):
                        out.append(self._deleted_frame())
                        yield b"".join(out)
                        return
                if size >= _COALESCE_BYTES:
                    break
                item = self._sub.get_nowait()
            if out:
                yield b"".join(out)

    def _take_carried(self, events: tuple[Event, ...]) -> bytes:
        """The frames of the events a notice carries (this process's own append), if they follow
        the last one sent: no store read. Otherwise nothing (``_read_new`` reads what is missing)."""
        fresh = [e for e in events if e.seq > self._last_seq]
        if not fresh or fresh[0].seq != self._last_seq + 1:
            return b""
        for event in fresh:
            self._sent(event)
        return b"".join(self._event_frame(event) for event in fresh)

    def _sent(self, event: Event) -> None:
        self._last_seq = event.seq
        self._previews.pop(event.id, None)
        self._delivered[event.id] = None
        if len(self._delivered) > _MAX_OPEN_PREVIEWS:
            self._delivered.pop(next(iter(self._delivered)))

    async def _read_new(self, up_to: int) -> AsyncIterator[bytes]:
        """The frames of the events after the last one sent, up to seq ``up_to``, one chunk per
        store read: reading no further than the notification says keeps events and the deltas
        published between them in their order."""
        while self._last_seq < up_to:
            batch = await self._store.get_events(
                self._session_id, after_seq=self._last_seq, before_seq=up_to + 1, limit=_READ_BATCH
            )
            for event in batch:
                self._sent(event)
            if batch:
                yield b"".join(self._event_frame(event) for event in batch)
            if len(batch) < _READ_BATCH:
                return

    def _event_frame(self, event: Event) -> bytes:
        if self._keep is not None and not self._keep(event):
            return b""
        return sse_frame(event.type, event_json(event), str(event.seq))

    def _delta_frame(self, item: Delta) -> bytes | None:
        payload = item.payload
        kind = payload.get("type")
        if kind == "event_start":
            preview = payload.get("event")
            if not isinstance(preview, dict) or preview.get("type") not in self._delta_types:
                return None
            if self._thread_id is not None and item.thread_id != self._thread_id:
                return None  # another thread's
            preview_id = str(preview.get("id"))
            if preview_id in self._delivered:  # the event itself went out already
                return None
            if len(self._previews) >= _MAX_OPEN_PREVIEWS:  # previews closed without an event
                self._previews.pop(next(iter(self._previews)))
            self._previews[preview_id] = None
            return sse_frame("event_start", payload)
        if kind == "event_delta" and str(payload.get("event_id")) in self._previews:
            return sse_frame("event_delta", payload)
        return None

    async def _gone(self, last_seq: int) -> bool:
        """A notice brought no event: was the session deleted? A deletion here says so with seq 0
        (checked every time); a repeat notice of events already sent (the same append noticed by
        the API or harness and by the store's feed) is checked at most every
        ``_REPEAT_CHECK_INTERVAL_S`` (a deletion by another process is seen within it), not once
        per event."""
        if 0 < last_seq <= self._last_seq:
            now = time.monotonic()
            if now - self._repeat_checked_at < _REPEAT_CHECK_INTERVAL_S:
                return False
            self._repeat_checked_at = now
        return not await self._session_exists()

    async def _session_exists(self) -> bool:
        try:
            await self._store.get_resource("session", self._session_id)
        except NotFound:
            return False
        return True

    def _deleted_frame(self) -> bytes:
        data = {"id": new_event_id(), "type": "session.deleted", "processed_at": rfc3339(self._clock())}
        return sse_frame("session.deleted", data)
