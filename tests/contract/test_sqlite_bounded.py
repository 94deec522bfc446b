"""SQLite-only: the store stays bounded (the WAL file is cut back, the sweep's query uses an index,
migration 9 applies to a database holding sessions)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from control_plane.store import NewEvent, SqliteConfig, SqliteStore
from control_plane.store._sqlite_schema import MIGRATIONS, migrate
from tests.support import eventually
from tests.support.store_contract import at


def _wal(path: Path) -> Path:
    return path.with_name(path.name + "-wal")


async def test_wal_stays_bounded_under_many_writes_and_is_truncated_when_idle(tmp_path: Path) -> None:
    path = tmp_path / "outpost.db"
    limit = 1024 * 1024
    # A small journal limit so that a few MiB of writes cross it many times; the idle delay is the
    # default's order of magnitude.
    store = SqliteStore(path, SqliteConfig(journal_size_limit_bytes=limit, wal_truncate_idle_s=0.2))
    payload = {"text": "x" * 4000}
    largest = 0
    try:
        for batch in range(200):  # ~8 MB of events, many transactions and automatic checkpoints
            events = [NewEvent(f"e{batch}-{i}", "agent.message", payload) for i in range(10)]
            await store.append(f"s{batch % 7}", events, at(batch))
            largest = max(largest, _wal(path).stat().st_size)
        # Between checkpoints the WAL grows to about the auto-checkpoint size (1,000 pages) plus
        # one transaction; a checkpoint that resets it cuts the file back to ``limit``.
        assert largest < 8 * 1024 * 1024
        assert _wal(path).stat().st_size < 4 * 1024 * 1024 + limit
        # Idle: the writer truncates the WAL to nothing.
        await eventually(lambda: _wal(path).stat().st_size == 0, 30, "the WAL to be truncated")
        assert len(await store.get_events("s0")) == 29 * 10  # batches 0, 7, ... 196
        await store.append("s0", [NewEvent("after", "agent.message", payload)], at(1000))
        await eventually(lambda: _wal(path).stat().st_size == 0, 30, "the WAL to be truncated again")
    finally:
        await store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 2001


async def test_sweep_query_uses_the_status_index(tmp_path: Path) -> None:
    path = tmp_path / "outpost.db"
    await SqliteStore(path).close()
    with sqlite3.connect(path) as conn:
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM resources WHERE kind = ? AND archived_at IS NULL"
            " AND status = ? ORDER BY created_at DESC, id DESC LIMIT 101",
            ("session", "running"),
        ).fetchall()
    details = " ".join(str(row[-1]) for row in plan)
    assert "resources_by_status" in details, details
    assert "TEMP B-TREE" not in details, details  # the index gives the order too


def test_migration_9_indexes_existing_sessions(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "old.db", isolation_level=None)
    try:
        conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY)")
        for version, statements in enumerate(MIGRATIONS[:8], start=1):
            for statement in statements:
                conn.execute(statement)
            conn.execute("INSERT INTO schema_version VALUES (?)", (version,))
        rows = [
            ("session", "a", '{"status": "running"}', None),
            ("session", "b", '{"status": "running"}', 5),
            ("session", "c", '{"status": 3}', None),
            ("agent", "d", '{"status": "running"}', None),
        ]
        for kind, id, body, archived in rows:
            conn.execute(
                "INSERT INTO resources (kind, id, version, body, created_at, updated_at, archived_at)"
                " VALUES (?, ?, 1, ?, 0, 0, ?)",
                (kind, id, body, archived),
            )
        migrate(conn)
        found = conn.execute(
            "SELECT id FROM resources INDEXED BY resources_by_status"
            " WHERE kind = 'session' AND archived_at IS NULL AND status = 'running'"
        ).fetchall()
        assert found == [("a",)]
        assert conn.execute("SELECT status FROM resources WHERE id = 'c'").fetchone() == (None,)
    finally:
        conn.close()
