"""Time to first token for a new session: Outpost's lazy provisioning against eager provisioning.

    python bench/bench_session.py [--sessions 50] [--ttft-ms 300]

For each mode, over N new sessions (model server at a fixed time to first token):

* time from ``user.message`` sent to the first ``event_delta`` at an SSE client (the official SDK's
  ``sessions.events.stream``), for (a) lazy + speculative provisioning (the default: the sandbox is
  warmed in parallel with the first model call) and (b) eager provisioning (the container is
  created before the first model call, as a design that couples brain and hands would do);
* harness overhead: ``user.message`` persisted (the API's durable append returned) → the model
  server receives the request (same process, same monotonic clock).

Runs a real control plane (SQLite, harness, gRPC tunnel), a real edge with Docker sandboxes and the
local Messages-API server, all on loopback. Everything it creates is removed.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anthropic
import yaml

from control_plane.config import ControlPlaneConfig
from control_plane.harness import HarnessConfig
from control_plane.server import ControlPlane
from edge_agent.enroll import register
from scripted_model import LocalModelServer, Turn


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def reply(_request: Any) -> Turn:
    return Turn.text("Hello from the model. This is the first token of a short answer.")


async def run_mode(mode: str, sessions: int, ttft_s: float, work: Path) -> tuple[list[float], list[float]]:
    harness = HarnessConfig(eager_provision=mode == "eager", speculative_provision=mode == "lazy")
    async with LocalModelServer(reply, ttft_s=ttft_s) as model:
        config = ControlPlaneConfig(
            data_dir=work / f"cp-{mode}",
            http_port=0,
            tunnel_port=0,
            model_base_url=model.base_url,
            harness=harness,
        )
        async with ControlPlane(config) as cp:
            assert cp.enrollment is not None
            client = anthropic.AsyncAnthropic(base_url=cp.http_url, api_key=cp.admin_key(), max_retries=0)
            # "Persisted" = the moment the API's append of the user.message returned (it then
            # publishes it on the bus); recorded on the same monotonic clock as the model server.
            persisted_at: dict[str, float] = {}
            publish = cp.bus.publish_persisted

            def record(session_id: str, last_seq: int) -> None:
                persisted_at.setdefault(session_id, time.monotonic())
                publish(session_id, last_seq)

            cp.bus.publish_persisted = record  # type: ignore[method-assign]
            env = await client.beta.environments.create(name=f"bench-{mode}", config={"type": "self_hosted"})
            token = await cp.enrollment.create_token(env.id)
            identity = await register(
                cp.http_url,
                token.token,
                work / f"edge-{mode}",
                name="bench",
                ca_fingerprint=token.ca_fingerprint,
            )
            # The edge runs in its own process, as it would on its own host.
            edge_config = work / f"edge-{mode}" / "config.yaml"
            edge_config.write_text(
                yaml.safe_dump(
                    {
                        "state_dir": str(work / f"edge-{mode}"),
                        "control_plane": {"tunnel_address": cp.tunnel_address},
                        "sandbox": {"name_prefix": "outpost-bench"},
                        "policy": {"max_sandboxes": 16},
                        "logging": {"level": "WARNING"},
                    }
                )
            )
            edge = subprocess.Popen(
                [sys.executable, "-m", "edge_agent.cli", "run", "--config", str(edge_config)]
            )
            try:
                while not cp.registry.for_environment(env.id):
                    await asyncio.sleep(0.05)
                agent = await client.beta.agents.create(
                    name="bench", model="claude-sonnet-5-5", tools=[{"type": "agent_toolset_20260401"}]
                )
                ttfts: list[float] = []
                overheads: list[float] = []
                for i in range(sessions):
                    session = await client.beta.sessions.create(agent=agent.id, environment_id=env.id)
                    first_delta = asyncio.get_running_loop().create_future()
                    idle = asyncio.Event()

                    async def watch(
                        session_id: str = session.id,
                        fut: asyncio.Future[float] = first_delta,
                        done: asyncio.Event = idle,
                    ) -> None:
                        stream = await client.beta.sessions.events.stream(
                            session_id, event_deltas=["agent.message"]
                        )
                        async for event in stream:
                            if event.type == "event_delta" and not fut.done():
                                fut.set_result(time.perf_counter())
                            if event.type == "session.status_idle":
                                done.set()
                                break

                    watcher = asyncio.create_task(watch())
                    await asyncio.sleep(0.05)  # the stream is open before the message goes in
                    requests_before = model.request_count
                    t0 = time.perf_counter()
                    sent = await client.beta.sessions.events.send(
                        session.id,
                        events=[{"type": "user.message", "content": [{"type": "text", "text": f"hi {i}"}]}],
                    )
                    ttfts.append((await asyncio.wait_for(first_delta, 30) - t0) * 1000)
                    await asyncio.wait_for(idle.wait(), 30)
                    await watcher
                    assert sent.data[0].type == "user.message"
                    received = model.requests[requests_before].received_at
                    overheads.append((received - persisted_at[session.id]) * 1000)
                    await client.beta.sessions.delete(session.id)
                await client.close()
            finally:
                edge.send_signal(signal.SIGTERM)
                edge.wait(60)
                del identity
    return ttfts, overheads


async def main(sessions: int, ttft_ms: float) -> None:
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("ANTHROPIC_API_KEY", "local-model-server")
    work = Path(tempfile.mkdtemp(prefix="outpost-bench-session-"))
    lazy, lazy_overhead = await run_mode("lazy", sessions, ttft_ms / 1000, work)
    eager, _ = await run_mode("eager", sessions, ttft_ms / 1000, work)
    print(
        f"\nTime from user.message sent to first event_delta "
        f"({sessions} new sessions, model TTFT {ttft_ms:g} ms)"
    )
    print(f"{'mode':44} {'p50':>10} {'p95':>10}")
    print(
        f"{'(a) Outpost: lazy + speculative provisioning':44} {pct(lazy, 50):8.1f}ms {pct(lazy, 95):8.1f}ms"
    )
    print(f"{'(b) eager provisioning (coupled design)':44} {pct(eager, 50):8.1f}ms {pct(eager, 95):8.1f}ms")
    for p in (50, 95):
        reduction = 100 * (1 - pct(lazy, p) / pct(eager, p))
        print(f"reduction at p{p}: {reduction:.0f}%")
    print(
        f"\nharness overhead (user.message persisted -> model request received): "
        f"p50 {pct(lazy_overhead, 50):.2f} ms, p95 {pct(lazy_overhead, 95):.2f} ms (target p50 <= 5 ms)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--ttft-ms", type=float, default=300)
    args = parser.parse_args()
    asyncio.run(main(args.sessions, args.ttft_ms))
