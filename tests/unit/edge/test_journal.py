from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from edge_agent.journal import JournalState, ResultJournal


async def test_start_finish_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "state" / "journal.db"
    async with ResultJournal(path, retention_s=3600) as journal:
        assert await journal.start("k1", "s1") is None
        again = await journal.start("k1", "s1")
        assert again is not None and again.state is JournalState.STARTED
        await journal.finish("k1", "s1", b"outcome")
        assert await journal.start("k2", "s1") is None  # started, never finished (crash)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    async with ResultJournal(path, retention_s=3600) as journal:
        done = await journal.get("k1", "s1")
        assert done is not None and done.state is JournalState.FINISHED and done.outcome == b"outcome"
        interrupted = await journal.get("k2", "s1")
        assert interrupted is not None and interrupted.state is JournalState.STARTED
        assert await journal.get("k3", "s1") is None


async def test_a_key_from_another_session_is_another_call(tmp_path: Path) -> None:
    """Keys are unique within a session only: session B repeating session A's key runs its own
    call and never sees A's stored result."""
    async with ResultJournal(tmp_path / "j.db", retention_s=3600) as journal:
        assert await journal.start("toolu_1", "sesn_a") is None
        await journal.finish("toolu_1", "sesn_a", b"a's secret result")
        assert await journal.start("toolu_1", "sesn_b") is None  # not joined to a's entry
        assert await journal.get("toolu_1", "sesn_b") is not None
        await journal.finish("toolu_1", "sesn_b", b"b's result")
        a = await journal.get("toolu_1", "sesn_a")
        b = await journal.get("toolu_1", "sesn_b")
        assert a is not None and a.outcome == b"a's secret result"
        assert b is not None and b.outcome == b"b's result"


async def test_a_journal_keyed_by_key_alone_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    old = sqlite3.connect(path)
    old.executescript(
        "CREATE TABLE calls (key TEXT PRIMARY KEY, session_id TEXT NOT NULL, state TEXT NOT NULL, "
        "outcome BLOB, started_at REAL NOT NULL, finished_at REAL);"
        "CREATE INDEX calls_finished ON calls(finished_at);"
        "INSERT INTO calls VALUES ('k1', 's1', 'finished', x'6f6b', 1e12, 1e12);"
    )
    old.close()
    async with ResultJournal(path, retention_s=3600) as journal:
        kept = await journal.get("k1", "s1")
        assert kept is not None and kept.state is JournalState.FINISHED and kept.outcome == b"ok"
        assert await journal.start("k1", "s2") is None  # the new key shape is in force
    async with ResultJournal(path, retention_s=3600) as journal:  # and reopening does not migrate again
        assert await journal.get("k1", "s2") is not None


async def test_prune_removes_entries_past_retention(tmp_path: Path) -> None:
    async with ResultJournal(tmp_path / "j.db", retention_s=0.0001) as journal:
        await journal.start("old", "s")
        await journal.finish("old", "s", b"x")
        await asyncio.sleep(0.01)  # real time past the retention: the journal reads the wall clock
        assert await journal.prune() == 1
        assert await journal.get("old", "s") is None
