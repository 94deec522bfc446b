"""The feed of appends on SQLite: every append writes a ``log_feed`` row in its own transaction;
each follower polls the rows past its position every ``FEED_DELAY_S``.

SQLite has one writer, so ``pos`` (AUTOINCREMENT) grows in commit order and a follower that reads
``pos > cursor`` misses nothing. Rows older than ``KEEP_S`` are pruned by the followers; a follower
that fell further behind than that (a process frozen for a minute) finds its next row missing and
says so (``notify(None, 0)``), and its listener re-reads what it follows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time

from control_plane.store._sqlite_engine import SqliteEngine
from control_plane.store.base import FEED_DELAY_S, AppendListener

__all__ = ["KEEP_S", "SqliteFeed"]

log = logging.getLogger(__name__)

KEEP_S = 60.0  # how long feed rows are kept
_PRUNE_EVERY_S = 10.0
_BATCH = 1000


class SqliteFeed:
    def __init__(self, engine: SqliteEngine, notify: AppendListener, cursor: int) -> None:
        self._engine = engine
        self._notify = notify
        self._cursor = cursor
        self._pruned_at = time.monotonic()
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def start(cls, engine: SqliteEngine, notify: AppendListener) -> SqliteFeed:
        def head(conn: sqlite3.Connection) -> int:
            # The last position given out, even if its row was pruned since.
            row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'log_feed'").fetchone()
            return int(row[0]) if row is not None else 0

        feed = cls(engine, notify, await engine.read(head))
        feed._task = asyncio.create_task(feed._run(), name="sqlite-log-feed")
        return feed

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        failing = False
        while True:
            await asyncio.sleep(FEED_DELAY_S)
            try:
                await self.poll()
                if time.monotonic() - self._pruned_at >= _PRUNE_EVERY_S:
                    await self._prune()
                failing = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the store closed under us, or a transient error: keep going
                if not failing:
                    log.warning("log feed: could not read the store: %s", exc)
                failing = True

    async def poll(self) -> None:
        """Deliver the notices past the cursor (all of them, in batches)."""
        while True:
            cursor = self._cursor

            def read(conn: sqlite3.Connection, cursor: int = cursor) -> list[tuple[int, str, int]]:
                rows: list[tuple[int, str, int]] = conn.execute(
                    "SELECT pos, session_id, last_seq FROM log_feed WHERE pos > ? ORDER BY pos LIMIT ?",
                    (cursor, _BATCH),
                ).fetchall()
                return rows

            rows = await self._engine.read(read)
            # Positions are given out one by one (AUTOINCREMENT, one writer; a rolled-back write
            # takes its number back), so a gap right after the cursor means rows this follower
            # never read were pruned.
            gap = bool(rows) and rows[0][0] != cursor + 1
            if gap:
                log.warning("log feed: fell more than %g s behind; followers re-read their sessions", KEEP_S)
                self._notify(None, 0)
            for pos, session_id, last_seq in rows:
                self._cursor = pos
                self._notify(session_id, last_seq)
            if len(rows) < _BATCH:
                return

    async def _prune(self) -> None:
        self._pruned_at = time.monotonic()
        horizon = time.time_ns() // 1000 - int(KEEP_S * 1_000_000)

        def run(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM log_feed WHERE at < ?", (horizon,))

        await self._engine.write(run)
