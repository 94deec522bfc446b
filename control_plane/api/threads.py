"""``/v1/sessions/{id}/threads``: a session's threads, read from its log.

* ``GET  .../threads`` — a page of ``session_thread`` (primary first, then subagent threads in
  creation order), filtered by ``statuses[]``;
* ``GET  .../threads/{thread_id}`` — one thread; ``POST .../threads/{thread_id}/archive``;
* ``GET  .../threads/{thread_id}/events`` — a page of the thread's events (oldest first);
* ``GET  .../threads/{thread_id}/stream`` — Server-Sent Events like the session stream, of the
  thread's events only (the primary thread's: the whole log and every preview; a subagent
  thread's: its own events and previews).

The rules are :class:`~control_plane.sessions.thread_views.ThreadViews`'; this module speaks HTTP.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from control_plane.api.auth import KeyRecheck
from control_plane.api.caller import Caller, CallerDep
from control_plane.api.query import check_limit, decode_cursor, encode_cursor, page_body, query_list
from control_plane.api.sessions import viewer_of
from control_plane.api.streaming import EventStream, SseResponse, StreamSlots
from control_plane.bus import EventBus
from control_plane.errors import InvalidRequest
from control_plane.sessions.events import DELTA_EVENT_TYPES, event_json
from control_plane.sessions.service import SessionService
from control_plane.sessions.thread_views import (
    THREAD_STATUSES,
    ThreadViews,
    primary_thread_id,
    thread_event_filter,
)
from control_plane.store.base import Store

__all__ = ["threads_router"]

MAX_THREADS_PAGE = 1000
MAX_EVENTS_PAGE = 1000


def _cursor(page: str | None, key: str) -> int:
    if not page:
        return 0
    value = decode_cursor(page).get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidRequest("page: invalid page cursor", param="page")
    return value


class _ThreadRoutes:
    def __init__(
        self,
        views: ThreadViews,
        sessions: SessionService,
        store: Store,
        bus: EventBus,
        clock: Callable[[], datetime],
        ping_interval_s: float,
        slots: StreamSlots,
    ) -> None:
        self._views, self._sessions, self._store, self._bus = views, sessions, store, bus
        self._clock, self._ping_s, self._slots = clock, ping_interval_s, slots
        self._recheck = KeyRecheck(store, clock)

    async def list_(
        self, request: Request, session_id: str, caller: CallerDep, limit: int = 1000, page: str | None = None
    ) -> dict[str, Any]:
        limit = check_limit(limit, MAX_THREADS_PAGE)
        statuses = query_list(request.query_params, "statuses", allowed=THREAD_STATUSES)
        found = await self._views.list_threads(
            session_id, viewer_of(caller), statuses=statuses, limit=limit, offset=_cursor(page, "o")
        )
        next_page = encode_cursor({"o": found.next_offset}) if found.next_offset is not None else None
        return page_body(found.threads, next_page)

    async def get(self, session_id: str, thread_id: str, caller: CallerDep) -> dict[str, Any]:
        return await self._views.get(session_id, thread_id, viewer_of(caller))

    async def archive(self, session_id: str, thread_id: str, caller: CallerDep) -> dict[str, Any]:
        return await self._views.archive(session_id, thread_id, viewer_of(caller))

    async def events(
        self, session_id: str, thread_id: str, caller: CallerDep, limit: int = 100, page: str | None = None
    ) -> dict[str, Any]:
        limit = check_limit(limit, MAX_EVENTS_PAGE)
        events, more = await self._views.events(
            session_id, thread_id, viewer_of(caller), limit=limit, after_seq=_cursor(page, "s")
        )
        next_page = encode_cursor({"s": events[-1].seq}) if more and events else None
        return page_body([event_json(e) for e in events], next_page)

    async def stream(self, request: Request, session_id: str, thread_id: str, caller: CallerDep) -> Response:
        deltas = query_list(request.query_params, "event_deltas", allowed=DELTA_EVENT_TYPES)
        subagent = thread_id if thread_id != primary_thread_id(session_id) else None
        release = self._slots.acquire(caller.key.id)
        try:
            await self._views.get(session_id, thread_id, viewer_of(caller))
            events = await EventStream.open(
                self._store,
                self._bus,
                session_id,
                after_seq=None,
                delta_types=deltas,
                ping_interval_s=self._ping_s,
                clock=self._clock,
                keep=thread_event_filter(session_id, thread_id),
                thread_id=subagent,  # a subagent's stream: its previews only; the primary's: all
            )
        except BaseException:
            release()
            raise

        def close() -> None:
            events.close()
            release()

        return SseResponse(self._frames(events, caller), on_close=close)

    async def _frames(self, events: EventStream, caller: Caller) -> AsyncIterator[bytes]:
        """As the session stream: it ends at the first frame after its key stops being valid."""
        async for frame in events.frames():
            if not await self._recheck.still_valid(caller.key.id):
                return
            if frame:
                yield frame


def threads_router(
    sessions: SessionService,
    store: Store,
    bus: EventBus,
    clock: Callable[[], datetime],
    *,
    ping_interval_s: float,
    streams: StreamSlots,
) -> APIRouter:
    views = ThreadViews(store, sessions.session, clock)
    routes = _ThreadRoutes(views, sessions, store, bus, clock, ping_interval_s, streams)
    router = APIRouter()
    base = "/v1/sessions/{session_id}/threads"
    router.add_api_route(base, routes.list_, methods=["GET"])
    router.add_api_route(base + "/{thread_id}", routes.get, methods=["GET"])
    router.add_api_route(base + "/{thread_id}/archive", routes.archive, methods=["POST"])
    router.add_api_route(base + "/{thread_id}/events", routes.events, methods=["GET"])
    router.add_api_route(base + "/{thread_id}/stream", routes.stream, methods=["GET"])
    return router
