"""SQLite-only properties behind the contract: the file, its modes, migrations, crash safety,
and ``open_store`` URL handling (plus the pinned public exports of ``control_plane.store``)."""

from __future__ import annotations

import asyncio
import os
import select
import signal
import sqlite3
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import control_plane.store
from control_plane.errors import ControlPlaneError, InvalidRequest
from control_plane.store import MemoryStore, SqliteStore, open_store
from control_plane.store._sqlite_schema import MIGRATIONS, SCHEMA_VERSION
from tests.support.store_contract import at, new_events


async def test_file_layout_and_modes(tmp_path: Path) -> None:
    path = tmp_path / "state" / "deep" / "outpost.db"
    mode_before = stat.S_IMODE(tmp_path.stat().st_mode)
    store = SqliteStore(path)
    try:
        await store.append("s1", new_events("a", 1), at(0))
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert conn.execute("SELECT max(version) FROM schema_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        await store.close()
    assert stat.S_IMODE(tmp_path.stat().st_mode) == mode_before  # an existing directory is left alone


async def test_reopen_does_not_migrate_again(tmp_path: Path) -> None:
    path = tmp_path / "outpost.db"
    for _ in range(3):
        await SqliteStore(path).close()
    with sqlite3.connect(path) as conn:
        versions = [row[0] for row in conn.execute("SELECT version FROM schema_version ORDER BY version")]
    assert versions == list(range(1, SCHEMA_VERSION + 1))


async def test_a_version_1_database_is_migrated_in_place(tmp_path: Path) -> None:
    """A database made by the first release keeps its data and gains the later tables."""
    path = tmp_path / "outpost.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY)")
        for statement in MIGRATIONS[0]:
            conn.execute(statement)
        conn.execute("INSERT INTO schema_version VALUES (1)")
        conn.execute("INSERT INTO resources VALUES ('session', 's1', 1, '{}', 0, 0, NULL)")
    store = SqliteStore(path)
    try:
        assert (await store.get_resource("session", "s1")).id == "s1"
        await store.set_sandbox_edge("s1", "edge_a")
        assert await store.get_sandbox_edge("s1") == "edge_a"
    finally:
        await store.close()


async def test_edges_of_a_version_2_database_are_migrated_for_renewal(tmp_path: Path) -> None:
    """Edges enrolled before certificate renewal existed keep their certificate, with no previous one."""
    path = tmp_path / "outpost.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY)")
        for migration in MIGRATIONS[:2]:
            for statement in migration:
                conn.execute(statement)
        conn.execute("INSERT INTO schema_version VALUES (1), (2)")
        conn.execute(
            "INSERT INTO edges VALUES ('e1', 'env_1', 'old', '0a', ?, 0, 1000000, NULL)", ("f" * 64,)
        )
    store = SqliteStore(path)
    try:
        edge = await store.get_edge("e1")
        assert (edge.cert_fingerprint, edge.previous_cert_fingerprint, edge.previous_cert_not_after) == (
            "f" * 64,
            None,
            None,
        )
        renewed = await store.renew_edge_certificate(
            "e1", "0b", "e" * 64, edge.cert_not_after, edge.created_at, renewed_from="f" * 64
        )
        assert renewed.previous_cert_fingerprint == "f" * 64
    finally:
        await store.close()


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "outpost.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY)")
        conn.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION + 1,))
    with pytest.raises(ControlPlaneError, match="newer"):
        SqliteStore(path)


def test_an_unopenable_path_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(ControlPlaneError, match="cannot open"):
        SqliteStore(tmp_path / "file" / "outpost.db")


async def test_two_stores_on_one_file_share_the_log(tmp_path: Path) -> None:
    """Two control-plane processes on one file: BEGIN IMMEDIATE + busy_timeout serialize them."""
    a, b = SqliteStore(tmp_path / "x.db"), SqliteStore(tmp_path / "x.db")
    try:
        await asyncio.gather(
            *(
                s.append("s1", new_events(f"{n}{i}", 3), at(0))
                for i in range(20)
                for n, s in (("a", a), ("b", b))
            )
        )
        assert [e.seq for e in await b.get_events("s1")] == list(range(1, 121))
    finally:
        await a.close()
        await b.close()


_WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from datetime import UTC, datetime
    from control_plane.store import NewEvent, SqliteStore

    async def writer(store, w):
        for n in range(1_000_000):
            batch = [NewEvent(f"w{w}-{n}-{j}", "t", {"j": j, "pad": "x" * 300}) for j in range(10)]
            await store.append("s1", batch, datetime.now(UTC))
            print(f"w{w}-{n}", flush=True)

    async def main():
        store = SqliteStore(sys.argv[1])
        await asyncio.gather(*(writer(store, w) for w in range(8)))

    asyncio.run(main())
    """
)


def test_kill_9_mid_group_commit_loses_no_acknowledged_batch_and_tears_none(tmp_path: Path) -> None:
    path = tmp_path / "crash.db"
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    acked: set[str] = set()
    deadline = time.monotonic() + 60
    try:
        assert proc.stdout is not None
        while len(acked) < 400:
            remaining = deadline - time.monotonic()
            assert remaining > 0, "the writer did not make progress"
            ready, _, _ = select.select([proc.stdout], [], [], remaining)
            if ready:
                line = proc.stdout.readline()
                assert line, f"the writer exited early with {proc.poll()}"
                acked.add(line.strip())
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    async def check() -> None:
        store = SqliteStore(path)
        try:
            log = await store.get_events("s1")
        finally:
            await store.close()
        assert [e.seq for e in log] == list(range(1, len(log) + 1))
        batches: dict[str, list[int]] = {}
        for event in log:
            batch, j = event.id.rsplit("-", 1)
            assert event.payload["j"] == int(j)
            batches.setdefault(batch, []).append(event.seq)
        for seqs in batches.values():  # every batch is whole and contiguous
            assert len(seqs) == 10
            assert seqs == list(range(seqs[0], seqs[0] + 10))
        assert acked <= set(batches)  # every acknowledged batch is there

    asyncio.run(check())


# -- open_store and exports ---------------------------------------------------------------------


async def test_open_store_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    memory = open_store("memory://")
    assert isinstance(memory, MemoryStore)
    await memory.close()

    absolute = open_store(f"sqlite:///{tmp_path / 'abs.db'}")  # sqlite:////tmp/... : an absolute path
    assert isinstance(absolute, SqliteStore)
    assert absolute.path == tmp_path / "abs.db"
    await absolute.close()

    monkeypatch.chdir(tmp_path)
    relative = open_store("sqlite:///rel/dir/x.db")
    assert isinstance(relative, SqliteStore)
    await relative.close()
    assert (tmp_path / "rel" / "dir" / "x.db").exists()


@pytest.mark.parametrize(
    "url",
    [
        "",
        "sqlite://",
        "sqlite:///",
        "postgresql+asyncpg://db/x",
        "memory:",
        "sqlite:///x.db?mode=ro",
        "file.db",
    ],
)
def test_open_store_refuses_unknown_urls(url: str) -> None:
    with pytest.raises(InvalidRequest):
        open_store(url)


def test_public_exports_are_pinned() -> None:
    assert sorted(control_plane.store.__all__) == [
        "ApiKeyRecord",
        "EdgeRecord",
        "EnrollmentTokenRecord",
        "Event",
        "Lease",
        "MemoryStore",
        "NewEvent",
        "Order",
        "Page",
        "Resource",
        "SqliteConfig",
        "SqliteStore",
        "Store",
        "StoreOptions",
        "mask_url",
        "open_store",
        "postgres_config",
    ]
    for name in control_plane.store.__all__:
        assert hasattr(control_plane.store, name)


async def test_a_failing_write_group_fails_its_callers_and_the_writer_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from control_plane.store import _sqlite_engine

    store = SqliteStore(tmp_path / "x.db")
    try:
        real = _sqlite_engine.SqliteEngine._run_batch
        calls = 0

        def broken(conn: sqlite3.Connection, batch: list[object]) -> object:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise RuntimeError("boom")
            return real(conn, batch)  # type: ignore[arg-type]

        monkeypatch.setattr(_sqlite_engine.SqliteEngine, "_run_batch", staticmethod(broken))
        with pytest.raises(RuntimeError, match="boom"):
            await store.append("s1", new_events("a", 1), at(0))
        assert [e.seq for e in await store.append("s1", new_events("b", 1), at(0))] == [1]
    finally:
        await store.close()


async def test_a_feed_that_fell_behind_pruned_rows_says_notices_were_lost(tmp_path: Path) -> None:
    from control_plane.store._sqlite_feed import SqliteFeed

    store = SqliteStore(tmp_path / "outpost.db")
    heard: list[tuple[str | None, int]] = []
    try:
        feed = await SqliteFeed.start(store._engine, lambda sid, seq: heard.append((sid, seq)))
        await feed.close()  # polled by hand below
        for i in range(3):
            await store.append(f"s{i}", new_events("a", 1), at(i))
        await feed.poll()
        assert heard == [("s0", 1), ("s1", 1), ("s2", 1)]
        for i in range(3, 6):
            await store.append(f"s{i}", new_events("a", 1), at(i))
        with sqlite3.connect(tmp_path / "outpost.db") as conn:  # pruned before this follower read it
            conn.execute("DELETE FROM log_feed WHERE session_id = 's3'")
        heard.clear()
        await feed.poll()
        assert heard == [(None, 0), ("s4", 1), ("s5", 1)]
    finally:
        await store.close()
