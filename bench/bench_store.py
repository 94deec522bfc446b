"""Benchmark of the SQLite store: durable append throughput, replay and tail reads.

Run ``python bench/bench_store.py [--dir DIR]``. The database lives in a fresh temporary directory
(under ``DIR`` if given: put it on the disk you want to measure, not on a tmpfs, or the fsyncs
are free). Every append is a durable commit (WAL, ``synchronous=FULL``).

Measures:

* append throughput, 1 writer appending batches of 1 and of 50 events;
* append throughput, 32 concurrent writers appending 1 event per call (group commit), all on one
  session and spread over 32 sessions;
* replay of a 100k-event session (``get_events`` without a limit), p50 over a few runs;
* ``get_events(after_seq=99_000, limit=100)`` latency, p50 / p95.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from control_plane.store import NewEvent, SqliteStore

PAYLOAD = {
    "content": [{"type": "text", "text": "x" * 200}],
    "usage": {"input_tokens": 1200, "output_tokens": 80},
}


def now() -> datetime:
    return datetime.now(UTC)


def events(prefix: str, count: int) -> list[NewEvent]:
    return [NewEvent(f"{prefix}-{i}", "agent.message", PAYLOAD) for i in range(count)]


async def single_writer(store: SqliteStore, batch: int, total: int) -> float:
    session = f"single-{batch}"
    started = time.perf_counter()
    for n in range(total // batch):
        await store.append(session, events(f"{session}-{n}", batch), now())
    elapsed = time.perf_counter() - started
    assert await store.last_seq(session) == total
    return total / elapsed


async def concurrent_writers(store: SqliteStore, writers: int, per_writer: int, sessions: int) -> float:
    async def writer(w: int) -> None:
        session = f"concurrent-{sessions}-{w % sessions}"
        for n in range(per_writer):
            await store.append(session, [NewEvent(f"w{w}-{n}", "agent.message", PAYLOAD)], now())

    started = time.perf_counter()
    await asyncio.gather(*(writer(w) for w in range(writers)))
    return writers * per_writer / (time.perf_counter() - started)


async def fill(store: SqliteStore, session: str, total: int) -> None:
    for start in range(0, total, 1000):
        await store.append(session, events(f"{session}-{start}", 1000), now())


def fsync_latency(directory: Path, count: int = 300) -> tuple[float, float]:
    """p50 and p95 of a small write + fsync in ``directory``: the floor under a durable commit."""
    probe = directory / "fsync-probe"
    fd = os.open(probe, os.O_CREAT | os.O_WRONLY, 0o600)
    samples = []
    try:
        for _ in range(count):
            os.write(fd, b"x" * 128)
            started = time.perf_counter()
            os.fsync(fd)
            samples.append(time.perf_counter() - started)
    finally:
        os.close(fd)
        probe.unlink()
    samples.sort()
    return samples[count // 2], samples[int(count * 0.95)]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def report(label: str, value: str) -> None:
    print(f"{label:<48} {value:>16}")


async def main(directory: Path | None) -> None:
    with tempfile.TemporaryDirectory(prefix="outpost-bench-", dir=directory) as tmp:
        path = Path(tmp) / "bench.db"
        store = SqliteStore(path)
        try:
            print(f"database: {path} (WAL, synchronous=FULL)")
            p50, p95 = fsync_latency(Path(tmp))
            report("raw fsync of this disk (the commit floor)", f"p50 {ms(p50)}, p95 {ms(p95)}")
            rate = await single_writer(store, 1, 3_000)
            report("append, 1 writer, batches of 1", f"{rate:,.0f} events/s")
            rate = await single_writer(store, 50, 50_000)
            report("append, 1 writer, batches of 50", f"{rate:,.0f} events/s")
            rate = await concurrent_writers(store, 32, 600, sessions=1)
            report("append, 32 writers x 1 event, one session", f"{rate:,.0f} events/s")
            rate = await concurrent_writers(store, 32, 600, sessions=32)
            report("append, 32 writers x 1 event, 32 sessions", f"{rate:,.0f} events/s")

            await fill(store, "replay", 100_000)
            replays = []
            for _ in range(5):
                started = time.perf_counter()
                log = await store.get_events("replay")
                replays.append(time.perf_counter() - started)
                assert len(log) == 100_000
            report("replay of 100k events (p50 of 5)", ms(statistics.median(replays)))

            tails = []
            for _ in range(300):
                started = time.perf_counter()
                tail = await store.get_events("replay", after_seq=99_000, limit=100)
                tails.append(time.perf_counter() - started)
                assert len(tail) == 100
            tails.sort()
            p50, p95 = tails[len(tails) // 2], tails[int(len(tails) * 0.95)]
            report("get_events(after_seq=99_000, limit=100)", f"p50 {ms(p50)}, p95 {ms(p95)}")
        finally:
            await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", type=Path, default=None, help="where to create the temporary database")
    asyncio.run(main(parser.parse_args().dir))
