"""The feed of appends on PostgreSQL: ``LISTEN`` on a dedicated connection.

Every append that writes something runs ``pg_notify(channel, '<session_id>:<last_seq>')`` in its
own transaction (``outpost_append``), so the notice is delivered at commit, to every listening
process, in commit order. Each follower holds one connection of its own (never a pooled one: the
pool's reset runs ``UNLISTEN *``, and LISTEN does not survive a transaction-pooling proxy) in
autocommit, idle but for a health check.

PostgreSQL forgets a session's LISTEN when the connection ends, and whatever was notified while no
listener was connected is never delivered. So when the connection is lost the follower reconnects
with backoff, listens again and only then says ``notify(None, 0)``: its listener re-reads the
heads of the logs it follows (``last_seqs``), which covers every notice it missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from control_plane.store.base import AppendListener

__all__ = ["PostgresFeed"]

log = logging.getLogger(__name__)

_CHECK_EVERY_S = 5.0  # an idle listener is checked this often (a half-open connection says nothing)
_CHECK_TIMEOUT_S = 5.0
_BACKOFF_FIRST_S = 0.1
_BACKOFF_MAX_S = 5.0

Connect = Callable[[], Awaitable[Any]]  # opens an asyncpg connection

_CONNECTION_ERRORS = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    OSError,
    TimeoutError,
)


class PostgresFeed:
    def __init__(self, connect: Connect, channel: str, notify: AppendListener, where: str) -> None:
        self._connect = connect
        self._channel = channel
        self._notify = notify
        self._where = where  # the masked URL, for logs
        self._conn: Any = None  # asyncpg.Connection
        self._lost = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    @classmethod
    async def start(cls, connect: Connect, channel: str, notify: AppendListener, where: str) -> PostgresFeed:
        """Listen before returning: every append committed after this returns is heard."""
        feed = cls(connect, channel, notify, where)
        await feed._listen()
        feed._task = asyncio.create_task(feed._run(), name="postgres-log-feed")
        return feed

    async def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._drop()

    async def _listen(self) -> None:
        conn = await self._connect()
        try:
            conn.add_termination_listener(self._on_terminated)
            await conn.add_listener(self._channel, self._on_notice)
        except BaseException:
            conn.terminate()
            raise
        self._lost.clear()
        self._conn = conn

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            conn.remove_termination_listener(self._on_terminated)
            try:
                async with asyncio.timeout(_CHECK_TIMEOUT_S):
                    await conn.close()
            except _CONNECTION_ERRORS:
                conn.terminate()

    def _on_notice(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        session_id, _, last_seq = payload.rpartition(":")
        try:
            seq = int(last_seq)
        except ValueError:
            log.warning("log feed: ignoring a malformed notice %r", payload[:100])
            return
        self._notify(session_id, seq)

    def _on_terminated(self, _conn: object) -> None:
        self._lost.set()

    async def _run(self) -> None:
        # asyncio.timeout, not wait_for: Python 3.11's wait_for may swallow a cancellation that
        # arrives as the event is set; the _closed checks end the loop even then.
        while not self._closed:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_CHECK_EVERY_S):
                    await self._lost.wait()
            if self._closed or (not self._lost.is_set() and await self._healthy()):
                continue
            log.warning("log feed: lost the LISTEN connection to %s; reconnecting", self._where)
            await self._drop()
            await self._reconnect()
            self._notify(None, 0)  # notices sent while no one listened are lost: re-read

    async def _healthy(self) -> bool:
        conn = self._conn
        if conn is None or conn.is_closed():
            return False
        try:
            await conn.fetchval("SELECT 1", timeout=_CHECK_TIMEOUT_S)
        except _CONNECTION_ERRORS:
            return False
        return True

    async def _reconnect(self) -> None:
        delay = _BACKOFF_FIRST_S
        while not self._closed:
            try:
                await self._listen()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning(
                    "log feed: cannot listen on %s yet (%s); retrying in %.1f s", self._where, exc, delay
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, _BACKOFF_MAX_S)
            else:
                log.info("log feed: listening on %s again", self._where)
                return
