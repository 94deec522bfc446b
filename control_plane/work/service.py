"""The work queue of worker-run environments: the rules, whoever asks (the HTTP API today).

A work item (kind ``work``, one per stretch of a session's life that a worker serves) moves
``queued → starting → active → stopping → stopped``:

* **queued** when a session of a worker-run environment is created, or gets input while none of its
  items is live (queued, starting or active). Its id is derived from the session and a generation
  number, so two processes that queue it at once make one item (the second ``create`` conflicts).
* **poll** hands out the oldest queued item no poll holds (one polled longer than
  ``reclaim_older_than_ms`` ago and never acked is handed out again), with a freshly minted sessions
  token in ``secret`` (the previous one dies). Every change is a compare-and-set on the item's
  version: a poll that loses the race to another process tries the next item, so one item never
  goes to two workers.
* **ack** → ``starting``; the lease runs from now for the item's TTL.
* **heartbeat** with ``expected_last_heartbeat`` (``NO_HEARTBEAT`` to claim) → ``active``, the
  lease extended by the TTL; a mismatch is :class:`HeartbeatPreconditionFailed` (412). On a
  ``stopping`` or ``stopped`` item the value is not compared and the lease not extended: that is how
  the worker learns to stop.
* **lease expiry**: an item ``starting`` or ``active`` whose lease ran out is queued again (its
  token dies, its heartbeat is cleared); one ``stopping`` is stopped. Checked by every poll and
  every stats read of the environment (no background loop: nothing waits on an expired lease but
  the next poll).
* **stop**: ``{}`` → ``stopping`` (a queued item, which nobody holds, is stopped at once); ``force``
  → ``stopped``. Stopping a stopped item answers it as it is (200: the SDK's worker treats a 409
  as "already stopped" only after retrying it).

Long polls read the store every :data:`POLL_INTERVAL_S` until ``block_ms`` ran out; an item queued
by this process wakes its waiting polls at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from control_plane.environments.tool_runner import WORKER
from control_plane.errors import Conflict, ControlPlaneError, InvalidRequest, NotFound, VersionConflict
from control_plane.metadata import apply_metadata_patch
from control_plane.store.base import Order, Resource, Resources
from control_plane.timestamps import timestamp
from control_plane.work.sessions_tokens import WORK_KIND, mint_sessions_token, work_secret

__all__ = [
    "DEFAULT_LEASE_TTL_S",
    "NO_HEARTBEAT",
    "POLL_INTERVAL_S",
    "HeartbeatPreconditionFailed",
    "Polled",
    "WorkQueue",
    "WorkQueueConfig",
]

log = logging.getLogger(__name__)

NO_HEARTBEAT = "NO_HEARTBEAT"
DEFAULT_LEASE_TTL_S = 300  # what the SDK's worker assumes (SEND_RETRY_WINDOW, CLAIM_TIMEOUT)
MAX_LEASE_TTL_S = 3600
POLL_INTERVAL_S = 0.2
POLLERS_WINDOW = timedelta(seconds=30)
_POLLER_KIND = "work_poller"
_POLLER_WRITE_EVERY = timedelta(seconds=10)
_LIVE = ("queued", "starting", "active")
_HELD = ("starting", "active", "stopping")
_ATTEMPTS = 8
_SCAN = 100


@dataclass(frozen=True, slots=True)
class WorkQueueConfig:
    lease_ttl_s: int = DEFAULT_LEASE_TTL_S  # an item's lease when its worker asks for none


class HeartbeatPreconditionFailed(ControlPlaneError):
    """``expected_last_heartbeat`` is not the stored one: another worker may hold the lease."""

    error_code = "heartbeat_precondition_failed"

    def __init__(self, current_state: dict[str, Any]) -> None:
        super().__init__("expected_last_heartbeat does not match the stored heartbeat")
        self.current_state = current_state


@dataclass(frozen=True, slots=True)
class Polled:
    item: Resource
    secret: str


def _parse(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) and value else None


def _work_id(session_id: str, generation: int) -> str:
    return "work_" + hashlib.sha256(f"{session_id}:{generation}".encode()).hexdigest()[:24]


class WorkQueue:
    def __init__(
        self, store: Resources, clock: Callable[[], datetime], config: WorkQueueConfig | None = None
    ) -> None:
        self._store = store
        self._clock = clock
        self._config = config or WorkQueueConfig()
        self._queued: dict[str, asyncio.Event] = {}  # environment id -> set when this process queues
        self._pollers_written: dict[str, datetime] = {}

    @property
    def lease_ttl_s(self) -> int:
        return self._config.lease_ttl_s

    # -- queueing (the session service) -----------------------------------------------------
    async def session_input(self, session_id: str) -> Resource | None:
        """Queue an item for the session if its environment is worker-run and none of its items
        is live; the item queued (``None``: none needed)."""
        try:
            session = await self._store.get_resource("session", session_id)
        except NotFound:
            return None
        if session.body.get("tool_runner") != WORKER or session.archived_at is not None:
            return None
        items = await self._session_items(session_id)
        if any(i.body.get("state") in _LIVE for i in items):
            return None
        generation = max((int(i.body.get("generation", 0)) for i in items), default=0) + 1
        environment_id = str(session.body["environment_id"])
        body = {
            "environment_id": environment_id,
            "session_id": session_id,
            "generation": generation,
            "state": "queued",
            "metadata": {},
            "ttl_seconds": self._config.lease_ttl_s,
        }
        try:
            item = await self._store.create_resource(
                WORK_KIND, _work_id(session_id, generation), body, self._clock()
            )
        except Conflict:
            return None  # another process queued it
        self._queued.setdefault(environment_id, asyncio.Event()).set()
        log.info("session %s: work item %s queued", session_id, item.id)
        return item

    async def session_ended(self, session_id: str) -> None:
        """The session was archived or deleted: its live items are asked to stop."""
        for item in await self._session_items(session_id):
            if item.body.get("state") in _LIVE:
                await self.stop(item.body["environment_id"], item.id, force=False)

    async def _session_items(self, session_id: str) -> list[Resource]:
        page = await self._store.list_resources(WORK_KIND, filters={"session_id": session_id}, limit=_SCAN)
        return page.items

    # -- the worker's calls -----------------------------------------------------------------
    async def poll(
        self, environment_id: str, *, block_ms: int | None, reclaim_older_than_ms: int, worker_id: str | None
    ) -> Polled | None:
        """An item for the worker, or ``None`` once ``block_ms`` ran out (at once without it)."""
        if worker_id:
            await self._record_poller(environment_id, worker_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (block_ms or 0) / 1000
        event = self._queued.setdefault(environment_id, asyncio.Event())
        while True:
            event.clear()
            polled = await self._claim(environment_id, reclaim_older_than_ms, worker_id)
            remaining = deadline - loop.time()
            if polled is not None or remaining <= 0:
                return polled
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), min(POLL_INTERVAL_S, remaining))

    async def _claim(self, environment_id: str, reclaim_ms: int, worker_id: str | None) -> Polled | None:
        now = self._clock()
        await self._expire_leases(environment_id, now)
        page = await self._store.list_resources(
            WORK_KIND,
            filters={"environment_id": environment_id, "state": "queued"},
            limit=_SCAN,
            order=Order.ASC,
        )
        for item in page.items:
            polled_at = _parse(item.body.get("polled_at"))
            if polled_at is not None and now - polled_at < timedelta(milliseconds=reclaim_ms):
                continue  # handed out, not acked yet, not old enough to hand out again
            token, token_hash = mint_sessions_token(item.id)
            body = {
                **item.body,
                "polled_at": timestamp(now),
                "worker_id": worker_id,
                "token_hash": token_hash,
            }
            try:
                claimed = await self._store.update_resource(
                    WORK_KIND, item.id, body, now, expected_version=item.version
                )
            except (VersionConflict, NotFound):
                continue  # another poll (perhaps another process) took it: try the next
            return Polled(claimed, work_secret(token))
        return None

    async def _expire_leases(self, environment_id: str, now: datetime) -> None:
        page = await self._store.list_resources(
            WORK_KIND,
            filters={"environment_id": environment_id, "state": _HELD},
            limit=_SCAN,
            order=Order.ASC,
        )
        for item in page.items:
            expires = _parse(item.body.get("lease_expires_at"))
            if expires is None or expires > now:
                continue
            if item.body["state"] == "stopping":
                body = _stopped(item.body, now)
            else:
                body = {
                    **item.body,
                    "state": "queued",
                    "polled_at": None,
                    "token_hash": None,
                    "last_heartbeat": None,
                    "lease_expires_at": None,
                }
            try:
                await self._store.update_resource(
                    WORK_KIND, item.id, body, now, expected_version=item.version
                )
            except (VersionConflict, NotFound):
                continue  # heartbeat or another process changed it meanwhile
            log.warning(
                "work item %s: lease expired (%s); now %s", item.id, item.body["state"], body["state"]
            )

    async def ack(self, environment_id: str, work_id: str) -> Resource:
        async def change(item: Resource, now: datetime) -> dict[str, Any] | None:
            if item.body.get("state") != "queued" or not item.body.get("polled_at"):
                raise Conflict(f"work item {work_id!r} is {item.body.get('state')}, not polled and queued")
            ttl = int(item.body.get("ttl_seconds") or self._config.lease_ttl_s)
            return {
                **item.body,
                "state": "starting",
                "acknowledged_at": timestamp(now),
                "lease_expires_at": timestamp(now + timedelta(seconds=ttl)),
            }

        return await self._change(environment_id, work_id, change)

    async def heartbeat(
        self, environment_id: str, work_id: str, expected: str | None, desired_ttl_s: int | None
    ) -> dict[str, Any]:
        """The ``work_heartbeat`` answer; :class:`HeartbeatPreconditionFailed` on a mismatch."""
        if desired_ttl_s is not None and not 1 <= desired_ttl_s <= MAX_LEASE_TTL_S:
            raise InvalidRequest(
                f"desired_ttl_seconds must be 1-{MAX_LEASE_TTL_S}", param="desired_ttl_seconds"
            )
        for _ in range(_ATTEMPTS):
            item = await self.get(environment_id, work_id)
            body, now = item.body, self._clock()
            state = str(body.get("state"))
            ttl = int(body.get("ttl_seconds") or self._config.lease_ttl_s)
            stored = body.get("last_heartbeat")
            if state in ("stopping", "stopped"):
                return _heartbeat_json(stored or "", False, state, ttl)
            if state == "queued" or (expected or NO_HEARTBEAT) != (stored or NO_HEARTBEAT):
                current = {
                    "last_heartbeat": stored,
                    "lease_extended": False,
                    "state": state,
                    "ttl_seconds": ttl,
                }
                raise HeartbeatPreconditionFailed(current)
            ttl = desired_ttl_s or ttl
            beat = timestamp(now)
            if beat == stored:  # two beats in one microsecond: keep them distinct
                beat = timestamp(now + timedelta(microseconds=1))
            new = {
                **body,
                "state": "active",
                "started_at": body.get("started_at") or beat,
                "latest_heartbeat_at": beat,
                "last_heartbeat": beat,
                "ttl_seconds": ttl,
                "lease_expires_at": timestamp(now + timedelta(seconds=ttl)),
            }
            try:
                await self._store.update_resource(WORK_KIND, work_id, new, now, expected_version=item.version)
            except VersionConflict:
                continue  # a metadata update or a stop meanwhile: judge again
            return _heartbeat_json(beat, True, "active", ttl)
        raise Conflict(f"work item {work_id!r} kept changing; retry the heartbeat")

    async def stop(self, environment_id: str, work_id: str, *, force: bool) -> Resource:
        async def change(item: Resource, now: datetime) -> dict[str, Any] | None:
            state = item.body.get("state")
            if state == "stopped" or (state == "stopping" and not force):
                return None
            if force or state == "queued":
                return _stopped(item.body, now)
            return {**item.body, "state": "stopping", "stop_requested_at": timestamp(now)}

        return await self._change(environment_id, work_id, change)

    # -- reading and metadata (API keys; list: the environment key) --------------------------
    async def get(self, environment_id: str, work_id: str) -> Resource:
        try:
            item = await self._store.get_resource(WORK_KIND, work_id)
        except NotFound:
            raise NotFound("work item", work_id) from None
        if item.body.get("environment_id") != environment_id:
            raise NotFound("work item", work_id)
        return item

    async def list_items(
        self, environment_id: str, limit: int, cursor: str | None
    ) -> tuple[list[Resource], str | None]:
        page = await self._store.list_resources(
            WORK_KIND, filters={"environment_id": environment_id}, limit=limit, cursor=cursor
        )
        return page.items, page.next_cursor

    async def update_metadata(
        self, environment_id: str, work_id: str, patch: Mapping[str, str | None]
    ) -> Resource:
        async def change(item: Resource, now: datetime) -> dict[str, Any] | None:
            metadata = apply_metadata_patch(dict(item.body.get("metadata") or {}), dict(patch))
            return None if metadata == item.body.get("metadata") else {**item.body, "metadata": metadata}

        return await self._change(environment_id, work_id, change)

    async def stats(self, environment_id: str) -> dict[str, Any]:
        now = self._clock()
        await self._expire_leases(environment_id, now)
        depth = pending = 0
        oldest: datetime | None = None
        cursor: str | None = None
        while True:
            page = await self._store.list_resources(
                WORK_KIND,
                filters={"environment_id": environment_id, "state": "queued"},
                limit=_SCAN,
                cursor=cursor,
            )
            for item in page.items:
                if item.body.get("polled_at"):
                    pending += 1
                else:
                    depth += 1
                oldest = item.created_at if oldest is None else min(oldest, item.created_at)
            cursor = page.next_cursor
            if cursor is None:
                break
        pollers = await self._store.list_resources(
            _POLLER_KIND, filters={"environment_id": environment_id}, limit=_SCAN
        )
        polling = sum(1 for p in pollers.items if now - p.updated_at <= POLLERS_WINDOW)
        return {
            "type": "work_queue_stats",
            "depth": depth,
            "pending": pending,
            "oldest_queued_at": timestamp(oldest) if oldest is not None else None,
            "workers_polling": polling,
        }

    # -- helpers -----------------------------------------------------------------------------
    async def _change(
        self,
        environment_id: str,
        work_id: str,
        change: Callable[[Resource, datetime], Any],
    ) -> Resource:
        """Compare-and-set ``change(item, now)`` (its new body, or ``None``: unchanged)."""
        for _ in range(_ATTEMPTS):
            item = await self.get(environment_id, work_id)
            now = self._clock()
            body = await change(item, now)
            if body is None:
                return item
            try:
                return await self._store.update_resource(
                    WORK_KIND, work_id, body, now, expected_version=item.version
                )
            except VersionConflict:
                continue
        raise Conflict(f"work item {work_id!r} kept changing; retry")

    async def _record_poller(self, environment_id: str, worker_id: str) -> None:
        """For ``workers_polling``: one record per worker id, written at most every few seconds
        per process."""
        now = self._clock()
        key = f"{environment_id}:{worker_id}"
        last = self._pollers_written.get(key)
        if last is not None and now - last < _POLLER_WRITE_EVERY:
            return
        if len(self._pollers_written) > 10_000:
            self._pollers_written.clear()
        self._pollers_written[key] = now
        poller_id = "wpoll_" + hashlib.sha256(key.encode()).hexdigest()[:24]
        body = {"environment_id": environment_id, "worker_id": worker_id[:200]}
        try:
            await self._store.create_resource(_POLLER_KIND, poller_id, body, now)
        except Conflict:
            try:
                await self._store.update_resource(_POLLER_KIND, poller_id, body, now)
            except ControlPlaneError as exc:  # bookkeeping only
                log.debug("could not record poller %s: %s", poller_id, exc)


def _stopped(body: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    return {
        **body,
        "state": "stopped",
        "stopped_at": timestamp(now),
        "stop_requested_at": body.get("stop_requested_at") or timestamp(now),
        "token_hash": None,  # the sessions token dies with the item
        "lease_expires_at": None,
    }


def _heartbeat_json(last: str, extended: bool, state: str, ttl: int) -> dict[str, Any]:
    return {
        "type": "work_heartbeat",
        "last_heartbeat": last,
        "lease_extended": extended,
        "state": state,
        "ttl_seconds": ttl,
    }


def work_json(item: Resource, secret: str | None = None) -> dict[str, Any]:
    """A work item as the SDK's ``BetaSelfHostedWork`` (``secret`` only on the poll's answer)."""
    body = item.body
    return {
        "type": "work",
        "id": item.id,
        "environment_id": body["environment_id"],
        "state": body["state"],
        "data": {"type": "session", "id": body["session_id"]},
        "metadata": body.get("metadata") or {},
        "secret": secret,
        "created_at": timestamp(item.created_at),
        "acknowledged_at": body.get("acknowledged_at"),
        "started_at": body.get("started_at"),
        "latest_heartbeat_at": body.get("latest_heartbeat_at"),
        "stop_requested_at": body.get("stop_requested_at"),
        "stopped_at": body.get("stopped_at"),
    }
