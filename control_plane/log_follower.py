"""Appends by any process, heard by every process's live streams.

An SSE stream is fed by the in-process :class:`~control_plane.bus.EventBus`; the harness publishes
its own appends there directly. Behind a load balancer a client's stream can land on a replica
that is not running the session, so this follower bridges the store's feed of appends
(``EventLog.follow_appends``: a 50 ms poll on SQLite, ``LISTEN``/``NOTIFY`` on PostgreSQL) to the
bus: a notice for a session that has subscribers here becomes a ``Persisted`` item, and the stream
reads the new events from the store as it always does. Notices for the process's own appends
arrive twice (bus and feed); the stream reads nothing for the second.

When the feed says notices may have been lost (``None``: a dropped database connection), every
followed session's last seq is read again in one query and published, so nothing is missed.
"""

from __future__ import annotations

import asyncio
import logging

from control_plane.bus import EventBus
from control_plane.store.base import AppendFeed, EventLog

__all__ = ["LogFollower"]

log = logging.getLogger(__name__)


class LogFollower:
    def __init__(self, log_store: EventLog, bus: EventBus) -> None:
        self._store = log_store
        self._bus = bus
        self._feed: AppendFeed | None = None
        self._resync: asyncio.Task[None] | None = None
        self.notices = 0  # notices that reached a subscriber here (for tests and metrics)

    async def start(self) -> None:
        self._feed = await self._store.follow_appends(self._on_notice)

    async def close(self) -> None:
        if self._resync is not None:
            self._resync.cancel()
        if self._feed is not None:
            await self._feed.close()
            self._feed = None

    def _on_notice(self, session_id: str | None, last_seq: int) -> None:
        if session_id is None:
            if self._resync is None or self._resync.done():
                self._resync = asyncio.get_running_loop().create_task(self._read_again())
            return
        if self._bus.subscriber_count(session_id):
            self.notices += 1
            self._bus.publish_persisted(session_id, last_seq)

    async def _read_again(self) -> None:
        followed = self._bus.subscribed_sessions()
        if not followed:
            return
        try:
            seqs = await self._store.last_seqs(followed)
        except Exception as exc:
            log.warning("could not re-read %d followed sessions after a feed gap: %s", len(followed), exc)
            return
        for session_id, last_seq in seqs.items():
            if last_seq:
                self._bus.publish_persisted(session_id, last_seq)
