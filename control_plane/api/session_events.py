"""``/v1/sessions/{id}/events``: list the log, send input, stream live.

* ``GET  .../events`` — a page of the log, oldest first by default, filtered by ``types[]`` and
  ``created_at[gt|gte|lt|lte]`` (compared with ``processed_at``).
* ``POST .../events`` — ``{"events": [...]}``: the whole batch is validated first (one bad event:
  400, nothing written), then appended in one call, announced on the bus, and the runner woken.
  The reply echoes the events with their server ``id`` and ``processed_at``.
* ``GET  .../events/stream`` — Server-Sent Events (see :mod:`control_plane.api.streaming`); a
  stream ends at its first frame after its API key is revoked or expires.

An environment-scoped API key gets a 404 for a session of another environment, on every route.
The rules (validation, answers, append, wake) are
:class:`~control_plane.sessions.service.SessionService`'s; this module only speaks HTTP.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from control_plane.api.auth import KeyRecheck
from control_plane.api.caller import Caller, CallerDep
from control_plane.api.models import MAX_INT, EventsSend
from control_plane.api.query import (
    check_limit,
    decode_cursor,
    encode_cursor,
    page_body,
    query_list,
    time_bounds,
)
from control_plane.api.sessions import viewer_of
from control_plane.api.streaming import EventStream, SseResponse, StreamSlots
from control_plane.bus import EventBus
from control_plane.errors import InvalidRequest
from control_plane.sessions.commands import EventQuery
from control_plane.sessions.events import DELTA_EVENT_TYPES, EVENT_TYPES, event_json
from control_plane.sessions.service import SessionService
from control_plane.store.base import Order, Store

__all__ = ["events_router"]

log = logging.getLogger(__name__)

MAX_PAGE = 1000
DEFAULT_PAGE = 100


def _after_seq(page: str | None) -> int | None:
    """The seq a page token continues after (none: from the start)."""
    if not page:
        return None
    seq = decode_cursor(page).get("s")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise InvalidRequest("page: invalid page cursor", param="page")
    return seq


class _EventRoutes:
    """The routes: one service call each; the stream route also opens the SSE stream."""

    def __init__(
        self,
        service: SessionService,
        store: Store,
        bus: EventBus,
        clock: Callable[[], datetime],
        ping_interval_s: float,
        streams: StreamSlots,
    ) -> None:
        self._service = service
        self._store = store
        self._bus = bus
        self._clock = clock
        self._ping_interval_s = ping_interval_s
        self._slots = streams
        self._recheck = KeyRecheck(store, clock)

    async def list_(
        self,
        request: Request,
        session_id: str,
        caller: CallerDep,
        limit: int = DEFAULT_PAGE,
        page: str | None = None,
        order: Literal["asc", "desc"] = "asc",
    ) -> dict[str, Any]:
        limit = check_limit(limit, MAX_PAGE)
        types = query_list(request.query_params, "types", allowed=EVENT_TYPES) or None
        bounds = time_bounds(request.query_params)
        query = EventQuery(limit, _after_seq(page), Order(order), types, bounds.after, bounds.before)
        found = await self._service.events(session_id, query, viewer_of(caller))
        next_page = encode_cursor({"s": found.events[-1].seq}) if found.more and found.events else None
        return page_body([event_json(e) for e in found.events], next_page)

    async def send(self, session_id: str, body: EventsSend, caller: CallerDep) -> dict[str, Any]:
        stored = await self._service.send_events(session_id, body.events, viewer_of(caller))
        return {"data": [event_json(e) for e in stored]}

    async def stream(
        self,
        request: Request,
        session_id: str,
        caller: CallerDep,
        after_seq: int | None = Query(None, ge=0, le=MAX_INT),
    ) -> Response:
        deltas = query_list(request.query_params, "event_deltas", allowed=DELTA_EVENT_TYPES)
        last_event_id = request.headers.get("last-event-id", "").strip()
        if after_seq is None and last_event_id.isdigit():
            after_seq = int(last_event_id)
        release = self._slots.acquire(caller.key.id)
        try:
            await self._service.session(session_id, viewer_of(caller))
            events = await EventStream.open(
                self._store,
                self._bus,
                session_id,
                after_seq=after_seq,
                delta_types=deltas,
                ping_interval_s=self._ping_interval_s,
                clock=self._clock,
            )
        except BaseException:
            release()
            raise

        def close() -> None:
            events.close()
            release()

        return SseResponse(self._while_key_holds(events, caller, session_id), on_close=close)

    async def _while_key_holds(
        self, events: EventStream, caller: Caller, session_id: str
    ) -> AsyncIterator[bytes]:
        """The stream ends at the first frame (pings included) after its key is revoked or
        expires (the key re-read at most every few seconds per key, see ``KeyRecheck``)."""
        async for frame in events.frames():
            if not await self._recheck.still_valid(caller.key.id):
                log.info("ending an event stream of session %s: its API key is no longer valid", session_id)
                return
            yield frame


def events_router(
    service: SessionService,
    store: Store,
    bus: EventBus,
    clock: Callable[[], datetime],
    *,
    ping_interval_s: float,
    streams: StreamSlots | None = None,
) -> APIRouter:
    """``store`` and ``bus`` feed the live streams; ``streams``: the caps on open event streams
    (default: 200 per key, 2,000 in all)."""
    slots = streams or StreamSlots(max_per_key=200, max_total=2000)
    routes = _EventRoutes(service, store, bus, clock, ping_interval_s, slots)
    router = APIRouter()
    router.add_api_route("/v1/sessions/{session_id}/events", routes.list_, methods=["GET"])
    router.add_api_route("/v1/sessions/{session_id}/events", routes.send, methods=["POST"])
    router.add_api_route("/v1/sessions/{session_id}/events/stream", routes.stream, methods=["GET"])
    return router
