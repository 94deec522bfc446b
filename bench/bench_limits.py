"""Benchmark of the HTTP port's limits: a control plane on DEFAULT limits under 2,000 idle
connections and 2,000 event streams, while another client keeps asking it for a session.

Run ``python bench/bench_limits.py [--idle 2000] [--streams 2000] [--hold-s 6]``. It starts
``outpost-control serve`` (defaults; data in a temporary directory; loopback only) as a separate
process, creates a session, then:

* opens ``--idle`` TCP connections that send nothing (a slowloris: the header-read deadline,
  ``http_header_timeout_s``, closes them);
* opens ``--streams`` event streams (``GET /v1/sessions/{id}/events/stream``) with the admin key
  (one key: past ``stream_max_per_key`` they are refused 429);
* meanwhile a third client sends ``GET /v1/sessions/{id}`` back to back on one connection.

Prints p50 / p95 / max of that client's requests before the load (baseline) and while it lasts,
the status codes the streams were answered with, the refusals the client saw, and how many idle
connections the server had closed after ``--hold-s`` plus the header deadline. The control plane
must stay up throughout.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import resource
import signal
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

SERVE = Path(sys.executable).with_name("outpost-control")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(name: str, latencies_ms: list[float]) -> str:
    if not latencies_ms:
        return f"{name}: no requests"
    return (
        f"{name}: n={len(latencies_ms)} p50={statistics.median(latencies_ms):.2f} ms "
        f"p95={pct(latencies_ms, 0.95):.2f} ms max={max(latencies_ms):.2f} ms"
    )


class Prober:
    """Sends GET /v1/sessions/{id} back to back on one connection, from its own thread and event
    loop (so the bench's own 4,000 connections do not delay it); records latency and status by
    phase."""

    def __init__(self, base: str, headers: dict[str, str], path: str) -> None:
        self.base = base
        self.headers = headers
        self.path = path
        self.phase = "baseline"
        self.latencies: dict[str, list[float]] = collections.defaultdict(list)
        self.statuses: collections.Counter[int | str] = collections.Counter()
        self.stop = False

    async def run(self) -> None:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        async with httpx.AsyncClient(
            base_url=self.base, headers=self.headers, timeout=30, limits=limits
        ) as client:
            while not self.stop:
                await self._one(client)

    async def _one(self, client: httpx.AsyncClient) -> None:
        started = time.perf_counter()
        try:
            r = await client.get(self.path)
            status: int | str = r.status_code
        except httpx.HTTPError as exc:
            status = type(exc).__name__
        self.latencies[self.phase].append((time.perf_counter() - started) * 1000)
        self.statuses[status] += 1
        await asyncio.sleep(0.005)


async def open_idle(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    try:
        return await asyncio.open_connection(host, port)
    except OSError:
        return None


async def open_stream(
    host: str, port: int, path: str, key: str
) -> tuple[int | str, asyncio.StreamWriter | None]:
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError as exc:
        return f"connect:{exc.errno}", None
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n\r\n".encode())
    try:
        line = await asyncio.wait_for(reader.readline(), 30)
    except (TimeoutError, OSError):
        writer.close()
        return "no answer", None
    if not line:
        writer.close()
        return "closed", None
    return int(line.split()[1]), writer


async def main(args: argparse.Namespace) -> None:
    files = raise_nofile()
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        env = dict(os.environ, ANTHROPIC_API_KEY="unused")
        proc = await asyncio.create_subprocess_exec(
            str(SERVE),
            "serve",
            "--data-dir",
            tmp,
            "--http",
            f"127.0.0.1:{port}",
            "--tunnel",
            f"127.0.0.1:{free_port()}",
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            await run_load(args, port, Path(tmp), files, proc)
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(proc.wait(), 60)
                if proc.returncode is None:
                    proc.kill()


async def run_load(
    args: argparse.Namespace, port: int, data_dir: Path, files: int, proc: asyncio.subprocess.Process
) -> None:
    host = "127.0.0.1"
    base = f"http://{host}:{port}"
    key_file = data_dir / "admin-api-key"
    deadline = time.monotonic() + 60
    while True:
        try:
            if key_file.exists():
                async with httpx.AsyncClient() as c:
                    if (await c.get(f"{base}/healthz")).status_code == 200:
                        break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or proc.returncode is not None:
            raise SystemExit("the control plane did not start")
        await asyncio.sleep(0.1)
    key = key_file.read_text().strip()
    headers = {"authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as api:
        r = await api.post("/v1/environments", json={"name": "bench", "config": {"type": "self_hosted"}})
        env_id = r.json()["id"]
        r = await api.post("/v1/agents", json={"name": "bench", "model": "claude-sonnet-5-5"})
        r = await api.post("/v1/sessions", json={"agent": r.json()["id"], "environment_id": env_id})
        session_id = r.json()["id"]

    prober = Prober(base, headers, f"/v1/sessions/{session_id}")
    probe = asyncio.create_task(asyncio.to_thread(asyncio.run, prober.run()))
    await asyncio.sleep(1.0)

    prober.phase = "load"
    started = time.monotonic()
    gate = asyncio.Semaphore(256)

    async def gated_idle() -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        async with gate:
            return await open_idle(host, port)

    async def gated_stream() -> tuple[int | str, asyncio.StreamWriter | None]:
        async with gate:
            return await open_stream(host, port, f"/v1/sessions/{session_id}/events/stream", key)

    idle_task = asyncio.gather(*(gated_idle() for _ in range(args.idle)))
    stream_task = asyncio.gather(*(gated_stream() for _ in range(args.streams)))
    idle = [pair for pair in await idle_task if pair is not None]
    streams = await stream_task
    opened_s = time.monotonic() - started
    await asyncio.sleep(args.hold_s)
    prober.stop = True
    await probe

    # How many idle connections has the server closed by now (the header deadline)?
    await asyncio.sleep(max(0.0, 11.0 - args.hold_s - opened_s))
    closed = sum(1 for reader, _ in idle if reader.at_eof())
    alive = proc.returncode is None
    codes = collections.Counter(code for code, _ in streams)
    for _, writer in streams:
        if writer is not None:
            writer.close()
    for _, writer in idle:
        writer.close()

    print(f"open-file limit of the bench process: {files}")
    print(f"opened {len(idle)} idle connections and {args.streams} stream requests in {opened_s:.1f} s")
    print(f"stream answers: {dict(sorted(codes.items(), key=str))}")
    print(summary("other client, baseline", prober.latencies["baseline"]))
    print(summary("other client, under load", prober.latencies["load"]))
    print(f"other client statuses: {dict(prober.statuses)}")
    print(f"control plane still running: {alive}")
    print(f"idle connections seen closed by the server ~11 s after opening: {closed}/{len(idle)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle", type=int, default=2000)
    parser.add_argument("--streams", type=int, default=2000)
    parser.add_argument("--hold-s", type=float, default=6.0)
    asyncio.run(main(parser.parse_args()))
