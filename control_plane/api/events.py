"""``/v1/sessions/{id}/events``: list the log, send input, stream live.

* ``GET  .../events`` — a page of the log, oldest first by default, filtered by ``types[]`` and
  ``created_at[gt|gte|lt|lte]`` (compared with ``processed_at``).
* ``POST .../events`` — ``{"events": [...]}``: the whole batch is validated first (one bad event:
  400, nothing written), then appended in one call, announced on the bus, and the runner woken.
  The reply echoes the events with their server ``id`` and ``processed_at``.
* ``GET  .../events/stream`` — Server-Sent Events (see :mod:`control_plane.api.streaming`); a
  stream ends at its first frame after its API key is revoked or expires.

An environment-scoped API key gets a 404 for a session of another environment, on every route.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from control_plane.api.auth import KeyRecheck
from control_plane.api.caller import CallerDep
from control_plane.api.models import MAX_INT, EventsSend
from control_plane.api.query import (
    TimeBounds,
    check_limit,
    decode_cursor,
    encode_cursor,
    query_list,
    time_bounds,
)
from control_plane.api.sessions import RunnerCalls
from control_plane.api.streaming import EventStream, SseResponse, StreamSlots
from control_plane.api.wire import page_body
from control_plane.bus import EventBus
from control_plane.errors import InvalidRequest
from control_plane.runner import SessionRunner
from control_plane.sessions.events import DELTA_EVENT_TYPES, EVENT_TYPES, SessionStatus, event_json
from control_plane.sessions.input_events import parse_input_events
from control_plane.sessions.log import append_and_publish, check_answers, read_status
from control_plane.store.base import Event, Order, Store

__all__ = ["events_router"]

log = logging.getLogger(__name__)

MAX_PAGE = 1000
DEFAULT_PAGE = 100
_SCAN_BATCH = 500


async def _page_of_events(
    store: Store,
    session_id: str,
    *,
    after: int | None,
    order: Order,
    limit: int,
    types: list[str] | None,
    bounds: TimeBounds,
) -> tuple[list[Event], bool]:
    """Up to ``limit`` events past the cursor position ``after`` (a seq, in ``order``), and whether
    more follow. Time bounds are applied while scanning, so a page is always full when it can be."""
    wanted = limit + 1
    batch_size = wanted if bounds.unbounded else max(wanted, _SCAN_BATCH)
    found: list[Event] = []
    position = after
    while len(found) < wanted:
        if order is Order.ASC:
            batch = await store.get_events(
                session_id, after_seq=position or 0, types=types, limit=batch_size, order=order
            )
        else:
            batch = await store.get_events(
                session_id, before_seq=position, types=types, limit=batch_size, order=order
            )
        found.extend(e for e in batch if bounds.contains(e.processed_at))
        if len(batch) < batch_size:
            break
        position = batch[-1].seq
    return found[:limit], len(found) > limit


def events_router(
    store: Store,
    bus: EventBus,
    runner: SessionRunner,
    clock: Callable[[], datetime],
    *,
    ping_interval_s: float,
    streams: StreamSlots | None = None,
) -> APIRouter:
    """``streams``: the caps on open event streams (default: 200 per key, 2,000 in all)."""
    router = APIRouter()
    slots = streams or StreamSlots(max_per_key=200, max_total=2000)
    recheck = KeyRecheck(store, clock)
    calls = RunnerCalls(runner)

    @router.get("/v1/sessions/{session_id}/events")
    async def list_(
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
        after: int | None = None
        if page:
            seq = decode_cursor(page).get("s")
            if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
                raise InvalidRequest("page: invalid page cursor", param="page")
            after = seq
        await caller.session(store, session_id)
        events, more = await _page_of_events(
            store, session_id, after=after, order=Order(order), limit=limit, types=types, bounds=bounds
        )
        next_page = encode_cursor({"s": events[-1].seq}) if more and events else None
        return page_body([event_json(e) for e in events], next_page)

    @router.post("/v1/sessions/{session_id}/events")
    async def send(session_id: str, body: EventsSend, caller: CallerDep) -> dict[str, Any]:
        session = await caller.session(store, session_id)
        if session.archived_at is not None:
            raise InvalidRequest(
                f"session {session_id!r} is archived; it takes no more events", param="session_id"
            )
        if (await read_status(store, session_id)).status is SessionStatus.TERMINATED:
            raise InvalidRequest(
                f"session {session_id!r} is terminated; it takes no more events", param="session_id"
            )
        events = parse_input_events(body.events)
        await check_answers(store, session_id, events, "events")
        stored = await append_and_publish(store, bus, session_id, events, clock())
        await calls.wake(session_id)
        return {"data": [event_json(e) for e in stored]}

    @router.get("/v1/sessions/{session_id}/events/stream")
    async def stream(
        request: Request,
        session_id: str,
        caller: CallerDep,
        after_seq: int | None = Query(None, ge=0, le=MAX_INT),
    ) -> Response:
        deltas = query_list(request.query_params, "event_deltas", allowed=DELTA_EVENT_TYPES)
        last_event_id = request.headers.get("last-event-id", "").strip()
        if after_seq is None and last_event_id.isdigit():
            after_seq = int(last_event_id)
        release = slots.acquire(caller.key.id)
        try:
            await caller.session(store, session_id)
            events = await EventStream.open(
                store,
                bus,
                session_id,
                after_seq=after_seq,
                delta_types=deltas,
                ping_interval_s=ping_interval_s,
                clock=clock,
            )
        except BaseException:
            release()
            raise

        def close() -> None:
            events.close()
            release()

        async def while_key_holds() -> AsyncIterator[bytes]:
            """The stream ends at the first frame (pings included) after its key is revoked or
            expires (the key re-read at most every few seconds per key, see ``KeyRecheck``)."""
            async for frame in events.frames():
                if not await recheck.still_valid(caller.key.id):
                    log.info(
                        "ending an event stream of session %s: its API key is no longer valid", session_id
                    )
                    return
                yield frame

        return SseResponse(while_key_holds(), on_close=close)

    return router
