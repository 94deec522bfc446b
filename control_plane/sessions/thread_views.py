"""A session's threads as the API shows them, read from the log (the log is the truth).

Every session has a primary thread (its id derived from the session id; its agent is the session's
agent; its status the session's). A multiagent session gets a subagent thread per delegation: a
``session.thread_created`` names it and the roster agent it runs; its status is the last
``session.thread_status_*`` of it (``running`` until the first); its usage the sum of the
``span.model_request_end`` events carrying its ``session_thread_id``.

Thread events: a subagent thread's are the events carrying its ``session_thread_id``; the primary
thread's are the whole log (its own events and every subagent event, cross-posted with
``session_thread_id`` set).

Archiving (``POST .../threads/{id}/archive``) records an ``session_thread_archive`` resource (id:
the thread id; ``create_resource`` makes it once across processes). Only a subagent thread at rest
(idle or terminated) can be archived; the primary thread is archived with its session.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from control_plane.environments.commands import Viewer
from control_plane.errors import Conflict, InvalidRequest, NotFound
from control_plane.sessions.events import STATUS_BY_EVENT_TYPE, rfc3339
from control_plane.store.base import Event, EventLog, NewEvent, Resource, Resources, Store

__all__ = [
    "ARCHIVE_KIND",
    "THREAD_STATUSES",
    "ThreadPage",
    "ThreadViews",
    "check_thread_ids",
    "primary_thread_id",
    "sandbox_owner",
    "thread_event_filter",
    "thread_sandbox_key",
]

ARCHIVE_KIND = "session_thread_archive"
THREAD_STATUSES = ("running", "idle", "rescheduling", "terminated")
_STATUS_BY_TYPE = {
    "session.thread_status_running": "running",
    "session.thread_status_idle": "idle",
    "session.thread_status_rescheduled": "rescheduling",
    "session.thread_status_terminated": "terminated",
}
_THREAD_TYPES = ("session.thread_created", *_STATUS_BY_TYPE, "span.model_request_end", *STATUS_BY_EVENT_TYPE)
_USAGE_KEYS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
_SCAN = 500


def primary_thread_id(session_id: str) -> str:
    """The id of a session's primary thread (derived: the same on every process)."""
    return "sthr_" + hashlib.sha256(f"primary\x00{session_id}".encode()).hexdigest()[:24]


def thread_sandbox_key(session_id: str, thread_id: str) -> str:
    """The sandbox key of a thread with a sandbox of its own (the edge keys sandboxes by it)."""
    return f"{session_id}.{thread_id}"


def sandbox_owner(key: str) -> str:
    """The session a sandbox key belongs to: the key itself, or a thread's own sandbox's session."""
    return key.split(".", 1)[0]


def thread_event_filter(session_id: str, thread_id: str) -> Any:
    """Whether a stored event belongs on thread ``thread_id``'s stream (the primary's: all)."""
    if thread_id == primary_thread_id(session_id):
        return lambda event: True
    return lambda event: event.payload.get("session_thread_id") == thread_id


class _ThreadStore(Resources, EventLog, Protocol):
    """The store roles :func:`check_thread_ids` reads."""


async def check_thread_ids(
    store: _ThreadStore, session_id: str, events: Sequence[NewEvent], param: str
) -> None:
    """``InvalidRequest`` naming the field (nothing is written) if an event of the batch names a
    ``session_thread_id`` the session does not have, or interrupts an archived thread."""
    named = [(i, e) for i, e in enumerate(events) if isinstance(e.payload.get("session_thread_id"), str)]
    if not named:
        return
    created = await store.get_events(session_id, types=("session.thread_created",))
    known = {primary_thread_id(session_id), *(str(e.payload.get("session_thread_id")) for e in created)}
    for index, event in named:
        tid = str(event.payload["session_thread_id"])
        where = f"{param}[{index}].session_thread_id"
        if tid not in known:
            raise InvalidRequest(f"{where}: session {session_id} has no thread {tid!r}", param=where)
        if event.type == "user.interrupt" and tid != primary_thread_id(session_id):
            with contextlib.suppress(NotFound):
                await store.get_resource(ARCHIVE_KIND, tid)
                raise InvalidRequest(f"{where}: thread {tid!r} is archived", param=where)


@dataclass(frozen=True, slots=True)
class ThreadPage:
    threads: list[dict[str, Any]]
    next_offset: int | None


@dataclass
class _Seen:
    id: str
    agent_name: str
    created_at: Any
    updated_at: Any
    status: str = "running"
    usage: dict[str, int] | None = None


class ThreadViews:
    """Reads of a session's threads; ``session_of(session_id, viewer)`` checks the caller sees it."""

    def __init__(self, store: Store, session_of: Any, clock: Any) -> None:
        self._store = store
        self._session_of = session_of
        self._clock = clock

    async def list_threads(
        self, session_id: str, viewer: Viewer, *, statuses: Sequence[str], limit: int, offset: int
    ) -> ThreadPage:
        session = await self._session_of(session_id, viewer)
        threads = [t for t in await self._all(session) if not statuses or t["status"] in statuses]
        page = threads[offset : offset + limit]
        more = offset + limit < len(threads)
        return ThreadPage(page, offset + limit if more else None)

    async def get(self, session_id: str, thread_id: str, viewer: Viewer) -> dict[str, Any]:
        session = await self._session_of(session_id, viewer)
        for thread in await self._all(session):
            if thread["id"] == thread_id:
                return thread
        raise NotFound("session_thread", thread_id)

    async def archive(self, session_id: str, thread_id: str, viewer: Viewer) -> dict[str, Any]:
        thread = await self.get(session_id, thread_id, viewer)
        if thread["parent_thread_id"] is None:
            raise InvalidRequest("the primary thread is archived with its session", param="thread_id")
        if thread["archived_at"] is not None:
            return thread
        if thread["status"] not in ("idle", "terminated"):
            raise Conflict(f"session_thread {thread_id!r} is {thread['status']}: interrupt it first")
        body = {"session_id": session_id, "archived_at": rfc3339(self._clock())}
        with contextlib.suppress(Conflict):  # archived meanwhile (by another request or process)
            await self._store.create_resource(ARCHIVE_KIND, thread_id, body, self._clock())
        return await self.get(session_id, thread_id, viewer)

    async def events(
        self, session_id: str, thread_id: str, viewer: Viewer, *, limit: int, after_seq: int
    ) -> tuple[list[Event], bool]:
        """A page of the thread's events (oldest first) and whether more follow."""
        await self.get(session_id, thread_id, viewer)
        keep = thread_event_filter(session_id, thread_id)
        found: list[Event] = []
        position = after_seq
        while len(found) <= limit:
            batch = await self._store.get_events(session_id, after_seq=position, limit=_SCAN)
            found.extend(e for e in batch if keep(e))
            if len(batch) < _SCAN:
                break
            position = batch[-1].seq
        return found[:limit], len(found) > limit

    async def _all(self, session: Resource) -> list[dict[str, Any]]:
        events = await self._store.get_events(session.id, types=_THREAD_TYPES)
        seen: dict[str, _Seen] = {}
        status = "idle"  # the primary's: the session's, as its log says
        for event in events:
            tid = event.payload.get("session_thread_id")
            if event.type in STATUS_BY_EVENT_TYPE:
                status = str(STATUS_BY_EVENT_TYPE[event.type])
            if event.type == "session.thread_created" and isinstance(tid, str) and tid not in seen:
                name = str(event.payload.get("agent_name"))
                seen[tid] = _Seen(tid, name, event.processed_at, event.processed_at)
            elif isinstance(tid, str) and tid in seen:
                thread = seen[tid]
                thread.updated_at = event.processed_at
                if event.type in _STATUS_BY_TYPE:
                    thread.status = _STATUS_BY_TYPE[event.type]
                usage = event.payload.get("model_usage")
                if event.type == "span.model_request_end" and isinstance(usage, Mapping):
                    thread.usage = thread.usage or dict.fromkeys(_USAGE_KEYS, 0)
                    for key in _USAGE_KEYS:
                        thread.usage[key] += int(usage.get(key) or 0)
        agent = session.body.get("agent") or {}
        primary = _primary(session, agent, status)
        return [primary, *[await self._json(session, agent, t, primary["id"]) for t in seen.values()]]

    async def _json(
        self, session: Resource, agent: Mapping[str, Any], seen: _Seen, parent: str
    ) -> dict[str, Any]:
        try:
            archive = await self._store.get_resource(ARCHIVE_KIND, seen.id)
            archived_at = archive.body.get("archived_at")
        except NotFound:
            archived_at = None
        return {
            "type": "session_thread",
            "id": seen.id,
            "session_id": session.id,
            "agent": _roster_agent(agent, seen.agent_name),
            "parent_thread_id": parent,
            "status": seen.status,
            "created_at": rfc3339(seen.created_at),
            "updated_at": rfc3339(seen.updated_at),
            "archived_at": archived_at,
            "stats": None,
            "usage": seen.usage,
            "workflow_run_id": None,
        }


def _primary(session: Resource, agent: Mapping[str, Any], status: str) -> dict[str, Any]:
    return {
        "type": "session_thread",
        "id": primary_thread_id(session.id),
        "session_id": session.id,
        "agent": {k: v for k, v in agent.items() if k != "multiagent"},
        "parent_thread_id": None,
        "status": status,
        "created_at": rfc3339(session.created_at),
        "updated_at": rfc3339(session.updated_at),
        "archived_at": rfc3339(session.archived_at) if session.archived_at is not None else None,
        "stats": None,
        "usage": None,
        "workflow_run_id": None,
    }


def _roster_agent(agent: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The roster entry (the session's copy) a thread runs, by the name it was created with."""
    multiagent = agent.get("multiagent") or {}
    entries = multiagent.get("agents")
    if entries is None:
        subagents = multiagent.get("subagents") or {}
        entries = list(subagents.get("predefined_agents") or [])
        advisor = multiagent.get("advisor") or {}
        if advisor.get("type") == "enabled":
            entries.append({"type": "advisor", "model": advisor.get("model")})
    for entry in entries or ():
        if entry.get("type") == "advisor" and name == "advisor":
            return {"type": "advisor", "model": entry.get("model")}
        if entry.get("name") == name:
            return dict(entry)
    return {"type": "advisor", "model": "unknown"}  # not reached: threads are created from the roster
