"""In-process fan-out of session activity to live subscribers (SSE streams).

Two kinds of item flow through the bus:

* :class:`Persisted` — "the log of session S now reaches seq N". Subscribers read the new events
  from the store (``get_events(after_seq=...)``), so the store stays the single source of truth and
  a slow subscriber never misses an event: it just reads a longer slice.
* :class:`Delta` — stream-only, ephemeral items (``event_start`` / ``event_delta`` while the model
  is still streaming). Never stored; a subscriber that falls behind may drop them. Only
  subscribers that asked for them get them (``subscribe(deltas=True)``), and the harness builds
  none for a session no subscriber asked for (:meth:`EventBus.wants_deltas`): a model's answer
  may stream hundreds of deltas.

With several control-plane processes on one store, ``Persisted`` also arrives for appends made by
other processes (``control_plane.log_follower``, fed by the store's feed of appends).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from control_plane.store.base import Event

__all__ = ["Delta", "EventBus", "Persisted", "Subscription"]

_QUEUE_LIMIT = 1024


@dataclass(frozen=True, slots=True)
class Persisted:
    session_id: str
    last_seq: int
    # The append's events themselves, when this process made it (consecutive seqs ending at
    # ``last_seq``): a stream that has sent everything before them sends these without reading
    # the store. Empty for notices from the store's feed.
    events: tuple[Event, ...] = ()


@dataclass(frozen=True, slots=True)
class Delta:
    session_id: str
    payload: dict[str, Any]  # the JSON of an event_start / event_delta frame
    thread_id: str | None = None  # a subagent thread's preview (None: the primary thread's)


class Subscription:
    def __init__(self, session_id: str, *, deltas: bool = True) -> None:
        self.session_id = session_id
        self.deltas = deltas
        self._queue: asyncio.Queue[Persisted | Delta] = asyncio.Queue(_QUEUE_LIMIT)
        self.dropped_deltas = 0

    def _offer(self, item: Persisted | Delta) -> None:
        try:
            self._queue.put_nowait(item)
        except asyncio.QueueFull:
            if isinstance(item, Delta):
                self.dropped_deltas += 1
                return
            # Make room for the notification: a delta or an older notification can go.
            with contextlib.suppress(asyncio.QueueEmpty):
                self._queue.get_nowait()
            self._queue.put_nowait(item)

    async def get(self, timeout_s: float | None = None) -> Persisted | Delta | None:
        """The next item, or ``None`` after ``timeout_s`` (so callers can send keep-alive pings)."""
        if not self._queue.empty():  # no timer to arm when an item waits already
            return self._queue.get_nowait()
        try:
            return await asyncio.wait_for(self._queue.get(), timeout_s)
        except TimeoutError:
            return None

    def get_nowait(self) -> Persisted | Delta | None:
        """The next item if one is queued, else ``None``."""
        return None if self._queue.empty() else self._queue.get_nowait()

    def __aiter__(self) -> AsyncIterator[Persisted | Delta]:
        return self

    async def __anext__(self) -> Persisted | Delta:
        return await self._queue.get()


class EventBus:
    def __init__(self) -> None:
        self._subs: dict[str, set[Subscription]] = {}
        self._delta_subs: dict[str, int] = {}  # session id -> subscribers that want deltas

    def publish_persisted(self, session_id: str, last_seq: int, events: Sequence[Event] = ()) -> None:
        subs = self._subs.get(session_id)
        if not subs:
            return
        item = Persisted(session_id, last_seq, tuple(events))
        for sub in subs:
            sub._offer(item)

    def publish_delta(
        self, session_id: str, payload: dict[str, Any], *, thread_id: str | None = None
    ) -> None:
        if not self._delta_subs.get(session_id):
            return
        item = Delta(session_id, payload, thread_id)
        for sub in self._subs.get(session_id, ()):
            if sub.deltas:
                sub._offer(item)

    def wants_deltas(self, session_id: str) -> bool:
        """Whether a subscriber of the session takes deltas (else publishing them is wasted)."""
        return bool(self._delta_subs.get(session_id))

    @contextlib.contextmanager
    def subscribe(self, session_id: str, *, deltas: bool = True) -> Iterator[Subscription]:
        """Subscribe to a session's notices, and to its deltas if ``deltas``."""
        sub = Subscription(session_id, deltas=deltas)
        self._subs.setdefault(session_id, set()).add(sub)
        if deltas:
            self._delta_subs[session_id] = self._delta_subs.get(session_id, 0) + 1
        try:
            yield sub
        finally:
            subs = self._subs.get(session_id)
            if subs is not None and sub in subs:
                subs.discard(sub)
                if not subs:
                    del self._subs[session_id]
                if deltas:
                    left = self._delta_subs.pop(session_id, 1) - 1
                    if left > 0:
                        self._delta_subs[session_id] = left

    def subscribed_sessions(self) -> list[str]:
        """Every session with at least one subscriber in this process."""
        return list(self._subs)

    def subscriber_count(self, session_id: str) -> int:
        return len(self._subs.get(session_id, ()))
