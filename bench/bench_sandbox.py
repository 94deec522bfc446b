"""Sandbox latency benchmark: held channel vs docker exec, cold provision, resume after pause.

    python bench/bench_sandbox.py [--calls 300] [--cold 30] [--resume 40]     (the project's venv python)

Needs a Docker engine and the sandbox image (built by packaging/sandbox/build.sh if missing).
Everything it creates carries a bench edge id and is removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import docker

from edge_agent.sandbox import DockerRuntime, SandboxLimits, SandboxManager, ToolCall

REPO = Path(__file__).resolve().parents[1]
IMAGE = "outpost-sandbox:1"
LIMITS = SandboxLimits(image=IMAGE, cpus=1.0, memory_bytes=512 * 1024 * 1024, pids=256)
TRUE = {"command": "true"}


def bash_true(session_id: str) -> ToolCall:
    """``bash true`` for the session, checked as the dispatcher checks an Execute."""
    return ToolCall.of(session_id, "bash", TRUE, now=asyncio.get_running_loop().time())


def percentiles(samples_s: list[float]) -> tuple[float, float, float]:
    cuts = statistics.quantiles(samples_s, n=100, method="inclusive")
    return cuts[49] * 1000, cuts[94] * 1000, cuts[98] * 1000


def row(name: str, samples_s: list[float]) -> tuple[float, float, float]:
    p50, p95, p99 = percentiles(samples_s)
    print(f"{name:<48} {len(samples_s):>5} {p50:>9.2f} {p95:>9.2f} {p99:>9.2f}")
    return p50, p95, p99


async def timed(call: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


async def wait_paused(api: Any, container_id: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if api.inspect_container(container_id)["State"]["Status"] == "paused":
            return
        await asyncio.sleep(0.01)
    raise RuntimeError("the sandbox was not paused in time")


async def main(calls: int, cold: int, resume: int) -> int:
    subprocess.run(["bash", str(REPO / "packaging/sandbox/build.sh"), IMAGE], check=True)
    client = docker.from_env()
    runtime = DockerRuntime.from_env()
    edge_id = f"bench-{uuid.uuid4().hex[:8]}"
    warm = SandboxManager(
        runtime, edge_id=edge_id, default_limits=LIMITS, idle_pause_s=3600, max_sandboxes=64
    )
    pausing = SandboxManager(runtime, edge_id=edge_id, default_limits=LIMITS, idle_pause_s=0.05)
    await warm.start()
    await pausing.start()
    try:
        print(f"{'latency (ms)':<48} {'n':>5} {'p50':>9} {'p95':>9} {'p99':>9}")

        # 1 + 2: the same trivial command, held channel vs a docker exec per call.
        sid = "bench-warm"
        info = await warm.provision(sid, LIMITS)
        for _ in range(20):
            await warm.execute(bash_true(sid), LIMITS)
        held = [await timed(lambda: warm.execute(bash_true(sid), LIMITS)) for _ in range(calls)]
        container = client.containers.get(info.sandbox_id)

        def exec_true() -> None:
            code, _ = container.exec_run(["bash", "-c", "true"], user="1000:1000")
            assert code == 0

        plain: list[float] = []
        for _ in range(calls):
            started = time.perf_counter()
            exec_true()
            plain.append(time.perf_counter() - started)
        held_p50, *_ = row("1. bash true, SandboxManager.execute (warm)", held)
        plain_p50, *_ = row("2. bash true, docker SDK exec_run", plain)
        print(f"   held channel is {plain_p50 / held_p50:.0f}x faster than docker exec at p50")

        # 3: cold provision + first call, a new session each time (image cached).
        cold_samples: list[float] = []
        for i in range(cold):
            cold_sid = f"bench-cold-{i}"
            cold_samples.append(
                await timed(lambda: warm.execute(bash_true(cold_sid), LIMITS))  # noqa: B023
            )
            await warm.destroy(cold_sid)
        row("3. cold provision + first call", cold_samples)

        # 4: first call after an idle pause (unpause + call through the held channel).
        psid = "bench-pause"
        pinfo = await pausing.provision(psid, LIMITS)
        resumed: list[float] = []
        for _ in range(resume):
            await wait_paused(client.api, pinfo.sandbox_id)
            resumed.append(await timed(lambda: pausing.execute(bash_true(psid), LIMITS)))
        row("4. first call after pause", resumed)
    finally:
        await pausing.close()
        for session in ("bench-warm", "bench-pause"):  # the cold ones are destroyed as they go
            await warm.destroy(session)  # any session of this edge id, by its labels
        await warm.close()
        await runtime.close()
        leftovers = client.containers.list(all=True, filters={"label": f"outpost.edge_id={edge_id}"})
        client.close()
    if leftovers:
        print(f"left behind: {[c.name for c in leftovers]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=300, help="samples for 1 and 2 (>= 200)")
    parser.add_argument("--cold", type=int, default=30, help="samples for 3")
    parser.add_argument("--resume", type=int, default=40, help="samples for 4")
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.calls, args.cold, args.resume)))
