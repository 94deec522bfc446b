"""The edge's durable record of tool calls, keyed by (session, idempotency key).

Every execute carries an idempotency key (the control plane uses the ``agent.tool_use`` event id;
``exec`` takes the caller's). Keys are only unique within a session: the same key from another
session is another call, and never gets this session's stored result.
Before a call runs, the journal records that it *started*; when it finishes, the encoded outcome.
So after a restart of the edge (even ``kill -9``):

* a repeated key whose call finished returns the stored outcome and does not run again;
* a repeated key whose call started but never finished is *not* run again either: the edge cannot
  know whether it had its effect, so it answers with a tool error saying so (at most once);
* a key never seen runs.

Duplicates that arrive while the first call is still running are joined in memory by the
dispatcher, not here. Finished entries are pruned after ``retention_s``.

SQLite (stdlib) in WAL mode with ``synchronous=NORMAL``: a commit survives a crash of the edge
process; a power loss may lose the last few. All calls run on one dedicated thread, so the event
loop never blocks on the database.
"""

from __future__ import annotations

import asyncio
import enum
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["JournalEntry", "JournalState", "ResultJournal"]

_T = TypeVar("_T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    session_id TEXT NOT NULL,
    key TEXT NOT NULL,
    state TEXT NOT NULL,
    outcome BLOB,
    started_at REAL NOT NULL,
    finished_at REAL,
    PRIMARY KEY (session_id, key)
);
CREATE INDEX IF NOT EXISTS calls_started ON calls(started_at);
"""

# Journals written before keys were per session had ``key TEXT PRIMARY KEY``: copied over once,
# in one transaction (_MIGRATE_BEFORE, _SCHEMA, _MIGRATE_AFTER).
_MIGRATE_BEFORE = """
BEGIN IMMEDIATE;
ALTER TABLE calls RENAME TO calls_by_key;
DROP INDEX IF EXISTS calls_finished;
"""
_MIGRATE_AFTER = """
INSERT INTO calls(session_id, key, state, outcome, started_at, finished_at)
    SELECT session_id, key, state, outcome, started_at, finished_at FROM calls_by_key;
DROP TABLE calls_by_key;
COMMIT;
"""


class JournalState(enum.Enum):
    STARTED = "started"
    FINISHED = "finished"


@dataclass(frozen=True, slots=True)
class JournalEntry:
    key: str
    session_id: str
    state: JournalState
    outcome: bytes | None


class ResultJournal:
    """Durable idempotency records. Use as ``async with ResultJournal.open(path) as journal``."""

    def __init__(self, path: Path, retention_s: float) -> None:
        self._path = path
        self._retention_s = retention_s
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="journal")
        self._db: sqlite3.Connection | None = None
        self._closed = False

    async def __aenter__(self) -> ResultJournal:
        await self._run(self._open)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _open(self) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        db = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        primary = [r[1] for r in db.execute("PRAGMA table_info(calls)") if r[5]]
        if primary == ["key"]:
            db.executescript(_MIGRATE_BEFORE + _SCHEMA + _MIGRATE_AFTER)
        else:
            db.executescript(_SCHEMA)
        self._path.chmod(0o600)
        self._db = db

    async def _run(self, fn: Callable[..., _T], *args: Any) -> _T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn, *args)

    @property
    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError("journal is not open")
        return self._db

    async def get(self, key: str, session_id: str) -> JournalEntry | None:
        return await self._run(self._get, key, session_id)

    def _get(self, key: str, session_id: str) -> JournalEntry | None:
        row = self._conn.execute(
            "SELECT key, session_id, state, outcome FROM calls WHERE session_id = ? AND key = ?",
            (session_id, key),
        ).fetchone()
        if row is None:
            return None
        return JournalEntry(key=row[0], session_id=row[1], state=JournalState(row[2]), outcome=row[3])

    async def start(self, key: str, session_id: str) -> JournalEntry | None:
        """Record that ``key`` is starting. Returns the existing entry instead if there is one
        (the caller must then not run the call)."""
        return await self._run(self._start, key, session_id)

    def _start(self, key: str, session_id: str) -> JournalEntry | None:
        cur = self._conn.execute(
            "INSERT INTO calls(session_id, key, state, started_at) VALUES (?, ?, 'started', ?) "
            "ON CONFLICT(session_id, key) DO NOTHING",
            (session_id, key, time.time()),
        )
        if cur.rowcount == 1:
            return None
        return self._get(key, session_id)

    async def finish(self, key: str, session_id: str, outcome: bytes) -> None:
        await self._run(self._finish, key, session_id, outcome)

    def _finish(self, key: str, session_id: str, outcome: bytes) -> None:
        self._conn.execute(
            "UPDATE calls SET state = 'finished', outcome = ?, finished_at = ? "
            "WHERE session_id = ? AND key = ?",
            (outcome, time.time(), session_id, key),
        )

    async def prune(self) -> int:
        """Delete entries older than the retention window; returns how many."""
        return await self._run(self._prune)

    def _prune(self) -> int:
        cutoff = time.time() - self._retention_s
        cur = self._conn.execute("DELETE FROM calls WHERE started_at < ?", (cutoff,))
        return cur.rowcount

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._db is not None:
            await self._run(self._db.close)
        self._executor.shutdown(wait=True)
