"""Benchmark: what keyless oversized bodies cost a control plane on its default settings.

Run ``python bench/bench_keyless_body.py [--mb 30] [--concurrent 4] [--rounds 3]``. It starts
``outpost-control serve`` (defaults; data in a temporary directory; loopback only), then sends
``--concurrent`` POSTs of ``--mb`` MB of ``[{},{},...`` to ``/v1/environments`` without an API key,
``--rounds`` times, and prints the status codes, each request's time to its answer (p50 / p95), the
server's RSS before and after (from /proc), and how long an authenticated GET takes meanwhile.
The server must answer 401 without reading the bodies: its RSS should not move by more than a few MB.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
from bench_limits import SERVE, free_port, pct  # type: ignore[import-not-found]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def body(mb: int) -> AsyncIterator[bytes]:
    chunk = b"{}," * (64 * 1024 // 3)
    for _ in range(mb * 1024 * 1024 // len(chunk)):
        yield chunk


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        proc = await asyncio.create_subprocess_exec(
            str(SERVE), "serve", "--data-dir", tmp, "--http", f"127.0.0.1:{port}",
            "--tunnel", f"127.0.0.1:{free_port()}",
            env=dict(os.environ, ANTHROPIC_API_KEY="unused"),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        try:
            await measure(args, port, Path(tmp), proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 60)
            if proc.returncode is None:
                proc.kill()


async def measure(args: argparse.Namespace, port: int, data_dir: Path, pid: int) -> None:
    url = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient(base_url=url, timeout=120) as anonymous:
        for _ in range(200):
            with contextlib.suppress(httpx.HTTPError):
                if (await anonymous.get("/healthz")).status_code == 200:
                    break
            await asyncio.sleep(0.1)
        key = (data_dir / "admin-api-key").read_text().strip()
        async with httpx.AsyncClient(base_url=url, timeout=30, headers={"x-api-key": key}) as authed:
            await authed.get("/v1/environments")
            before = rss_mb(pid)
            statuses: collections.Counter[int] = collections.Counter()
            answer_ms: list[float] = []
            authed_ms: list[float] = []

            async def keyless() -> None:
                """Headers that declare the whole body, then the body, as a client would send it;
                the status line is read as soon as the server answers."""
                start = time.perf_counter()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                size = args.mb * 1024 * 1024
                writer.write(
                    b"POST /v1/environments HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n"
                    + f"content-length: {size}\r\n\r\n".encode()
                )

                async def send_body() -> None:
                    with contextlib.suppress(ConnectionError):
                        async for chunk in body(args.mb):
                            writer.write(chunk)
                            await writer.drain()

                sending = asyncio.create_task(send_body())
                try:
                    status_line = await reader.readline()
                except ConnectionError:  # answered and closed with the body unread: reset, broken pipe
                    status_line = b""
                answer_ms.append((time.perf_counter() - start) * 1000)
                statuses[int(status_line.split()[1]) if status_line else 0] += 1
                sending.cancel()
                writer.close()

            async def meanwhile(stop: asyncio.Event) -> None:
                while not stop.is_set():
                    start = time.perf_counter()
                    try:
                        await authed.get("/v1/environments")
                    except httpx.TransportError:  # a kept-alive connection the server had just closed
                        continue
                    authed_ms.append((time.perf_counter() - start) * 1000)
                    await asyncio.sleep(0.01)

            peak = before
            for _ in range(args.rounds):
                stop = asyncio.Event()
                side = asyncio.create_task(meanwhile(stop))
                await asyncio.gather(*(keyless() for _ in range(args.concurrent)))
                peak = max(peak, rss_mb(pid))
                stop.set()
                await side
            after = rss_mb(pid)
    print(f"keyless POSTs of {args.mb} MB x {args.concurrent} concurrent x {args.rounds} rounds")
    print(f"  answers: {dict(statuses)} (0: reset, the body unread, before the status line)")
    print(f"  time to the answer: p50 {pct(answer_ms, 0.5):.1f} ms, p95 {pct(answer_ms, 0.95):.1f} ms")
    print(f"  control plane RSS: before {before:.1f} MB, peak {peak:.1f} MB, after {after:.1f} MB "
          f"(+{peak - before:.1f} MB at peak)")  # fmt: skip
    print(f"  authenticated GET meanwhile: p50 {pct(authed_ms, 0.5):.1f} ms, "
          f"p95 {pct(authed_ms, 0.95):.1f} ms over {len(authed_ms)} requests")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=30)
    parser.add_argument("--concurrent", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    sys.path.insert(0, str(Path(__file__).parent))
    asyncio.run(main(parser.parse_args()))
