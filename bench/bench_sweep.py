"""Benchmark: the harness's status sweep and retention, with many archived sessions in the store.

Run ``python bench/bench_sweep.py [--dir DIR] [--sizes 1000,10000,100000]``.

For each size N, a fresh SQLite store holds N archived sessions (bodies of ~2 KB, like a session's
agent snapshot) and 100 live ones (10 ``running``, 90 ``idle``). Printed side by side per size:

* ``json scan``: the sweep's query as it was before migration 9 (``json_extract`` on every
  session's body, archived ones included), raw SQL, p50;
* ``indexed``: the same query on the indexed ``status`` column, raw SQL, p50;
* ``sweep``: the harness's actual calls (``list_resources`` of ``running`` and of
  ``rescheduling`` sessions through the store), p50.

Then retention: N archived sessions with 20 events each are pruned (``Pruner.run_once``, default
batches) while another task appends an event every 10 ms; printed: the time it took, the
latency of those appends during pruning (p50, max: how long pruning holds the writer), and the
pages in use before and after (the file keeps its size; freed pages are reused).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from control_plane.retention import Pruner, RetentionConfig
from control_plane.store import NewEvent, SqliteStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)
LIVE = 100
RUNNING = 10
EVENTS_PER_SESSION = 20
_US = 1_000_000

_BODY = {
    "agent": {"name": "coder", "system": "You are a careful engineer. " * 20, "tools": [{"n": "x" * 900}]},
    "environment_id": "env_1",
    "usage": {"input_tokens": 1200, "output_tokens": 80},
    "metadata": {},
}

OLD_QUERY = (
    "SELECT id, version, body, created_at, updated_at, archived_at FROM resources"
    " WHERE kind = 'session' AND archived_at IS NULL"
    " AND json_type(body, '$.\"status\"') = 'text' AND json_extract(body, '$.\"status\"') = ?"
    " ORDER BY created_at DESC, id DESC LIMIT 101"
)
NEW_QUERY = (
    "SELECT id, version, body, created_at, updated_at, archived_at FROM resources"
    " WHERE kind = 'session' AND archived_at IS NULL AND status = ?"
    " ORDER BY created_at DESC, id DESC LIMIT 101"
)


def _body(status: str) -> str:
    return json.dumps({**_BODY, "status": status})


def populate(path: Path, archived: int, *, events: int = 0) -> None:
    """Insert straight into the file (the store made the schema): fast enough for 100k sessions."""
    t0 = int(T0.timestamp() * _US)
    terminated = _body("terminated")
    payload = json.dumps({"content": [{"type": "text", "text": "x" * 200}]})
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO resources (kind, id, version, body, created_at, updated_at, archived_at)"
            " VALUES ('session', ?, 2, ?, ?, ?, ?)",
            ((f"sesn_a{i:07d}", terminated, t0 + i, t0 + i, t0 + _US + i) for i in range(archived)),
        )
        conn.executemany(
            "INSERT INTO resources (kind, id, version, body, created_at, updated_at, archived_at)"
            " VALUES ('session', ?, 1, ?, ?, ?, NULL)",
            (
                (f"sesn_l{i:07d}", _body("running" if i < RUNNING else "idle"), t0 + i, t0 + i)
                for i in range(LIVE)
            ),
        )
        if events:
            conn.executemany(
                "INSERT INTO events (session_id, seq, id, type, payload, processed_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (
                    (f"sesn_a{i:07d}", seq, f"e{i}-{seq}", "agent.message", payload, t0)
                    for i in range(archived)
                    for seq in range(1, events + 1)
                ),
            )
        conn.execute("COMMIT")
    finally:
        conn.close()


def p50_ms(fn: Callable[[], Any], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


async def sweep_p50_ms(store: SqliteStore, runs: int) -> float:
    times = []
    await store.list_resources("session", filters={"status": "running"}, limit=100)  # warm the readers
    for _ in range(runs):
        started = time.perf_counter()
        for status in ("running", "rescheduling"):
            page = await store.list_resources("session", filters={"status": status}, limit=100)
            assert status != "running" or len(page.items) == RUNNING
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


async def sweep_row(root: Path, size: int, runs: int) -> tuple[float, float, float]:
    path = root / f"sweep-{size}.db"
    await SqliteStore(path).close()  # the schema
    populate(path, size)
    conn = sqlite3.connect(path)
    try:
        assert len(conn.execute(NEW_QUERY, ("running",)).fetchall()) == RUNNING
        old = p50_ms(lambda: conn.execute(OLD_QUERY, ("running",)).fetchall(), runs)
        new = p50_ms(lambda: conn.execute(NEW_QUERY, ("running",)).fetchall(), runs)
    finally:
        conn.close()
    store = SqliteStore(path)
    try:
        sweep = await sweep_p50_ms(store, runs)
    finally:
        await store.close()
    return old, new, sweep


def pages_in_use(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        total: int = conn.execute("PRAGMA page_count").fetchone()[0]
        free: int = conn.execute("PRAGMA freelist_count").fetchone()[0]
    return total - free


def _p(latencies: list[float], q: float) -> float:
    return sorted(latencies)[min(len(latencies) - 1, int(q * len(latencies)))] * 1000


async def retention_row(root: Path, size: int) -> tuple[float, list[float], list[float], int, int]:
    """Prune while another task appends one event every 10 ms to a live session (and, before,
    the same appends for 3 s without pruning): pruning must not hold the writer long, so the
    append latency during pruning, next to the one without, is the figure that matters."""
    path = root / f"retention-{size}.db"
    await SqliteStore(path).close()
    populate(path, size, events=EVENTS_PER_SESSION)
    before = pages_in_use(path)
    store = SqliteStore(path)
    config = RetentionConfig(archived_sessions_days=1, enrollment_tokens_days=None)
    baseline: list[float] = []
    during: list[float] = []
    sink = baseline
    done = asyncio.Event()

    async def writer() -> None:
        n = 0
        while not done.is_set():
            started = time.perf_counter()
            await store.append("sesn_l0000000", [NewEvent(f"w{n}", "agent.message", {"n": n})], T0)
            sink.append(time.perf_counter() - started)
            n += 1
            await asyncio.sleep(0.01)

    try:
        task = asyncio.create_task(writer())
        await asyncio.sleep(3)
        sink = during
        started = time.perf_counter()
        report = await Pruner(store, config, clock=lambda: T0 + timedelta(days=30)).run_once()
        elapsed = time.perf_counter() - started
        done.set()
        await task
        assert report.sessions == size, report
    finally:
        await store.close()
    return elapsed, baseline, during, before, pages_in_use(path)


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", type=Path, default=None, help="where the temporary databases go")
    parser.add_argument("--sizes", default="1000,10000,100000", help="archived sessions, comma-separated")
    parser.add_argument("--runs", type=int, default=50, help="queries timed per size")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        print(f"status sweep, {LIVE} live sessions ({RUNNING} running) + N archived, p50 of {args.runs}")
        print(f"{'archived N':>12} {'json scan ms':>13} {'indexed ms':>11} {'sweep ms':>9}")
        for size in sizes:
            old, new, sweep = await sweep_row(root, size, args.runs)
            print(f"{size:>12,} {old:>13.3f} {new:>11.3f} {sweep:>9.3f}", flush=True)
        print(f"\nretention: prune N archived sessions of {EVENTS_PER_SESSION} events each")
        print("append latency ms (p50 / p99 / max): alone for 3 s, then while pruning")
        header = (
            "archived N",
            "total s",
            "sessions/s",
            "appends alone",
            "while pruning",
            "pages before",
            "after",
        )
        print("{:>12} {:>8} {:>11} {:>19} {:>19} {:>13} {:>7}".format(*header))
        for size in sizes:
            elapsed, alone, during, before, after = await retention_row(root, size)
            figures = [f"{_p(x, 0.5):.1f} / {_p(x, 0.99):.1f} / {max(x) * 1000:.0f}" for x in (alone, during)]
            print(
                f"{size:>12,} {elapsed:>8.2f} {size / elapsed:>11,.0f} {figures[0]:>19} {figures[1]:>19}"
                f" {before:>13,} {after:>7,}",
                flush=True,
            )


if __name__ == "__main__":
    asyncio.run(main())
