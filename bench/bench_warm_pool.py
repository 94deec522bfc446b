"""A new session's first turn with and without the edge's warm pool, against a warm session's turn.

    python bench/bench_warm_pool.py [--sessions 30] [--pool-size 1] [--ttft-ms 0]

Whole-turn figure: ``user.message`` sent → ``session.status_idle`` seen on the session's SSE stream
(the official SDK), for a turn of one ``bash`` call (``echo hi``) and a short answer from the local
scripted Messages-API server. Three rows:

* **new session, pool off** (``sandbox.warm_pool_size: 0``): the first tool call (or the
  control plane's speculative provision, started with the first model call) starts a container;
* **new session, pool on**: it claims a paused pool member and resumes it;
* **warm session**: the same turn again in a session whose sandbox is running.

Sessions come one at a time; before each new session the bench waits until the edge reports its
pool full (``outpost_edge_sandboxes_pooled`` on its metrics endpoint), so the figure is the claim,
not a burst larger than the pool (which finds it empty and starts cold). Each mode runs a real
control plane (SQLite, harness, gRPC tunnel) and a real edge in its own process with Docker
sandboxes, all on loopback. Everything it creates is removed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anthropic
import httpx
import yaml

from control_plane.config import ControlPlaneConfig
from control_plane.server import ControlPlane
from edge_agent.enroll import register
from scripted_model import LocalModelServer, Turn
from scripted_model.responders import tool_results_since_prompt


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def reply(request: Mapping[str, Any]) -> Turn:
    if not tool_results_since_prompt(request):
        return Turn.tool_use("bash", {"command": "echo hi"})
    return Turn.text("Done.")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def pooled(metrics_url: str) -> int:
    async with httpx.AsyncClient() as http:
        text = (await http.get(metrics_url)).text
    for line in text.splitlines():
        if line.startswith("outpost_edge_sandboxes_pooled "):
            return int(float(line.split()[1]))
    return 0


async def wait_pool(metrics_url: str, size: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while await pooled(metrics_url) < size:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the edge's pool did not reach {size} within {timeout_s:g}s")
        await asyncio.sleep(0.05)


async def report_provisioning(metrics_url: str, tag: str) -> None:
    """The edge's own account: mean time to make a sandbox ready, by kind (cold, claim)."""
    async with httpx.AsyncClient() as http:
        text = (await http.get(metrics_url)).text
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    name = "outpost_edge_sandbox_provision_duration_seconds"
    for line in text.splitlines():
        for suffix, into in (("_sum", sums), ("_count", counts)):
            if line.startswith(f"{name}{suffix}{{"):
                kind = line.split('kind="', 1)[1].split('"', 1)[0]
                into[kind] = float(line.split()[-1])
    parts = [f"{kind} {1000 * sums[kind] / n:.1f} ms x{n:g}" for kind, n in sorted(counts.items()) if n]
    print(f"[{tag}] edge: mean time to a ready sandbox: {', '.join(parts) or 'none'}")


async def turn(client: anthropic.AsyncAnthropic, session_id: str, text: str) -> float:
    """One user.message → session.status_idle, in ms (the stream is open before it is sent)."""
    opened = asyncio.Event()
    idle = asyncio.Event()

    async def watch() -> None:
        stream = await client.beta.sessions.events.stream(session_id)
        opened.set()
        async for event in stream:
            if event.type == "session.status_idle" and sent_at:
                idle.set()
                break

    sent_at: list[float] = []
    watcher = asyncio.create_task(watch())
    await asyncio.wait_for(opened.wait(), 30)
    await asyncio.sleep(0.05)  # the stream's subscription is live before the message goes in
    t0 = time.perf_counter()
    sent_at.append(t0)
    await client.beta.sessions.events.send(
        session_id, events=[{"type": "user.message", "content": [{"type": "text", "text": text}]}]
    )
    await asyncio.wait_for(idle.wait(), 60)
    elapsed = (time.perf_counter() - t0) * 1000
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await watcher
    return elapsed


async def run_mode(
    pool_size: int, sessions: int, warm_turns: int, ttft_s: float, work: Path
) -> tuple[list[float], list[float]]:
    """(new-session turns, warm-session turns) in ms."""
    tag = f"pool{pool_size}"
    async with LocalModelServer(reply, ttft_s=ttft_s) as model:
        config = ControlPlaneConfig(
            data_dir=work / f"cp-{tag}", http_port=0, tunnel_port=0, model_base_url=model.base_url
        )
        async with ControlPlane(config) as cp:
            assert cp.enrollment is not None
            client = anthropic.AsyncAnthropic(base_url=cp.http_url, api_key=cp.admin_key(), max_retries=0)
            env = await client.beta.environments.create(name=f"bench-{tag}", config={"type": "self_hosted"})
            token = await cp.enrollment.create_token(env.id)
            state_dir = work / f"edge-{tag}"
            await register(
                cp.http_url, token.token, state_dir, name="bench", ca_fingerprint=token.ca_fingerprint
            )
            metrics_port = free_port()
            edge_config = state_dir / "config.yaml"
            edge_config.write_text(
                yaml.safe_dump(
                    {
                        "state_dir": str(state_dir),
                        "control_plane": {"tunnel_address": cp.tunnel_address},
                        "sandbox": {
                            "name_prefix": "outpost-bench",
                            "warm_pool_size": pool_size,
                            "idle_pause_s": 3600,  # the warm session stays unpaused
                        },
                        "policy": {"max_sandboxes": 16},
                        "observability": {"listen": f"127.0.0.1:{metrics_port}"},
                        "logging": {"level": "WARNING"},
                    }
                )
            )
            metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
            edge = subprocess.Popen(
                [sys.executable, "-m", "edge_agent.cli", "run", "--config", str(edge_config)]
            )
            try:
                while not cp.registry.for_environment(env.id):
                    await asyncio.sleep(0.05)
                agent = await client.beta.agents.create(
                    name="bench", model="claude-sonnet-5-5", tools=[{"type": "agent_toolset_20260401"}]
                )
                new: list[float] = []
                for i in range(sessions + 2):  # the first two warm the processes up, not counted
                    await wait_pool(metrics_url, pool_size)
                    session = await client.beta.sessions.create(agent=agent.id, environment_id=env.id)
                    elapsed = await turn(client, session.id, f"run it {i}")
                    if i >= 2:
                        new.append(elapsed)
                    if i < sessions + 1:
                        await client.beta.sessions.delete(session.id)
                warm = [await turn(client, session.id, f"again {i}") for i in range(warm_turns + 2)][2:]
                await report_provisioning(metrics_url, tag)
                await client.beta.sessions.delete(session.id)
                await client.close()
            finally:
                edge.send_signal(signal.SIGTERM)
                edge.wait(60)
    return new, warm


async def main(sessions: int, pool_size: int, ttft_ms: float) -> None:
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("ANTHROPIC_API_KEY", "local-model-server")
    work = Path(tempfile.mkdtemp(prefix="outpost-bench-pool-"))
    cold, warm_off = await run_mode(0, sessions, sessions, ttft_ms / 1000, work)
    claimed, warm_on = await run_mode(pool_size, sessions, sessions, ttft_ms / 1000, work)
    warm = warm_off + warm_on
    base = pct(warm, 50)
    print(
        f"\nOne-bash-call turn, user.message sent -> session.status_idle "
        f"({sessions} samples each, model TTFT {ttft_ms:g} ms, warm_pool_size {pool_size})"
    )
    print(f"{'':34} {'p50':>9} {'p95':>9} {'p50 / warm p50':>15} {'p95 / warm p95':>15}")
    for name, samples in (
        ("new session, pool off", cold),
        ("new session, pool on", claimed),
        ("warm session", warm),
    ):
        print(
            f"{name:34} {pct(samples, 50):7.1f}ms {pct(samples, 95):7.1f}ms "
            f"{pct(samples, 50) / base:14.2f}x {pct(samples, 95) / pct(warm, 95):14.2f}x"
        )
    ratio = pct(claimed, 50) / base
    print(f"target: a new session's turn with the pool <= 1.5x a warm session's (p50): {ratio:.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=30)
    parser.add_argument("--pool-size", type=int, default=1)
    parser.add_argument("--ttft-ms", type=float, default=0)
    args = parser.parse_args()
    asyncio.run(main(args.sessions, args.pool_size, args.ttft_ms))
