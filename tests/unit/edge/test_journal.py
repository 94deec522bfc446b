from __future__ import annotations

from pathlib import Path

from edge_agent.journal import JournalState, ResultJournal


async def test_start_finish_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "state" / "journal.db"
    async with ResultJournal(path, retention_s=3600) as journal:
        assert await journal.start("k1", "s1") is None
        again = await journal.start("k1", "s1")
        assert again is not None and again.state is JournalState.STARTED
        await journal.finish("k1", b"outcome")
        assert await journal.start("k2", "s1") is None  # started, never finished (crash)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    async with ResultJournal(path, retention_s=3600) as journal:
        done = await journal.get("k1")
        assert done is not None and done.state is JournalState.FINISHED and done.outcome == b"outcome"
        interrupted = await journal.get("k2")
        assert interrupted is not None and interrupted.state is JournalState.STARTED
        assert await journal.get("k3") is None


async def test_prune_removes_entries_past_retention(tmp_path: Path) -> None:
    async with ResultJournal(tmp_path / "j.db", retention_s=0.0001) as journal:
        await journal.start("old", "s")
        await journal.finish("old", b"x")
        import asyncio

        await asyncio.sleep(0.01)
        assert await journal.prune() == 1
        assert await journal.get("old") is None
