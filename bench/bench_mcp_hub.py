"""Latency of McpHub.call on a warm hub, against the bare mcp SDK client, in one run.

    python bench/bench_mcp_hub.py [--samples 500] [--concurrency 50]

(a) `echo` on the stdio test server through ``McpHub.call`` (policy check, argument check, the
    shared ClientSession, content mapping, logging);
(b) the same call through a bare ``mcp.Client`` to a second copy of the server, for the hub's
    own overhead;
(c) ``--concurrency`` calls at once through the hub (per-call latency and throughput).

Prints p50/p95/p99. The lead's end-to-end bench adds the tunnel on top of (a).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import time
from pathlib import Path

from mcp import Client, StdioServerParameters

from edge_agent.mcp import McpHub, McpPolicy, McpServerConfig

SERVER = Path(__file__).resolve().parents[1] / "tests/support/mcp_servers/stdio_server.py"


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def line(name: str, samples_ms: list[float]) -> str:
    return (
        f"{name:44} n={len(samples_ms):4}  p50 {pct(samples_ms, 50):7.3f} ms  "
        f"p95 {pct(samples_ms, 95):7.3f} ms  p99 {pct(samples_ms, 99):7.3f} ms"
    )


async def bench_hub(samples: int, concurrency: int) -> tuple[list[float], list[float], float]:
    config = McpServerConfig.model_validate(
        {"name": "bench", "stdio": {"command": sys.executable, "args": [str(SERVER)]}}
    )
    async with McpHub([config], McpPolicy.model_validate({"servers": {"bench": {}}})) as hub:
        for i in range(50):  # warm up: validators compiled, caches hot
            await hub.call("bench", "echo", {"text": f"warm {i}"})
        sequential = []
        for i in range(samples):
            started = time.perf_counter()
            await hub.call("bench", "echo", {"text": f"hello {i}"})
            sequential.append((time.perf_counter() - started) * 1000)
        concurrent: list[float] = []
        started = time.perf_counter()
        for round_ in range(max(1, samples // concurrency)):
            results = await asyncio.gather(
                *(hub.call("bench", "echo", {"text": f"c{round_}-{i}"}) for i in range(concurrency))
            )
            concurrent.extend(r.latency_ms for r in results)
        throughput = len(concurrent) / (time.perf_counter() - started)
    return sequential, concurrent, throughput


async def bench_bare(samples: int) -> list[float]:
    params = StdioServerParameters(command=sys.executable, args=[str(SERVER)])
    async with Client(params, cache=None) as client:
        await client.list_tools()
        for i in range(50):
            await client.call_tool("echo", {"text": f"warm {i}"})
        out = []
        for i in range(samples):
            started = time.perf_counter()
            await client.call_tool("echo", {"text": f"hello {i}"})
            out.append((time.perf_counter() - started) * 1000)
    return out


async def main(samples: int, concurrency: int) -> None:
    logging.basicConfig(level=logging.WARNING)
    sequential, concurrent, throughput = await bench_hub(samples, concurrency)
    bare = await bench_bare(samples)
    print(line("(a) hub.call echo, stdio, sequential", sequential))
    print(line("(b) bare mcp.Client call_tool echo, stdio", bare))
    print(line(f"(c) hub.call echo, {concurrency} concurrent", concurrent))
    overhead = statistics.median(sequential) - statistics.median(bare)
    print(f"hub overhead at p50: {overhead:+.3f} ms; concurrent throughput {throughput:,.0f} calls/s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=50)
    args = parser.parse_args()
    if args.samples < 200:
        parser.error("--samples must be at least 200")
    asyncio.run(main(args.samples, args.concurrency))
