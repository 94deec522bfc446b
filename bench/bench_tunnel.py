"""Tool-call latency through the tunnel, against the alternatives, in one run.

    python bench/bench_tunnel.py [--samples 200] [--cold-samples 200]

(a) `bash true` through the tunnel (EdgeGateway.execute → gRPC mTLS → edge → held exec stream)
    to a warm sandbox;
(b) the same command by a plain `docker exec` (docker SDK exec_run) from the same process;
(c) the first call of a new session (cold provision: volume + container + daemon + call);
(d) the first call after the sandbox was paused (unpause + call).

Prints p50/p95/p99 of each and the ratio (b)/(a). Targets on a 2-core machine: (a) p50 ≤ 5 ms and
≥ 5x faster than (b); (c) p50 ≤ 400 ms; (d) p50 ≤ 30 ms. Everything it creates is removed.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import tempfile
import time
from pathlib import Path

import docker

from control_plane.config import ControlPlaneConfig
from control_plane.server import ControlPlane
from edge_agent.config import EdgeConfig
from edge_agent.daemon import EdgeAgent
from edge_agent.enroll import register

PREFIX = "outpost-bench"


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def line(name: str, samples_ms: list[float]) -> str:
    return (
        f"{name:48} n={len(samples_ms):4}  p50 {pct(samples_ms, 50):8.2f} ms  "
        f"p95 {pct(samples_ms, 95):8.2f} ms  p99 {pct(samples_ms, 99):8.2f} ms"
    )


async def main(samples: int, cold_samples: int) -> None:
    logging.basicConfig(level=logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="outpost-bench-"))
    cp_config = ControlPlaneConfig(data_dir=work / "cp", http_port=0, tunnel_port=0)
    async with ControlPlane(cp_config) as cp:
        assert cp.enrollment is not None
        env = await cp.store.create_resource(  # type: ignore[union-attr]
            "environment", "env_bench", {"name": "bench", "config": {"type": "self_hosted"}}, _now()
        )
        token = await cp.enrollment.create_token(env.id)
        identity = await register(
            cp.http_url, token.token, work / "edge", name="bench-edge", ca_fingerprint=token.ca_fingerprint
        )
        config = EdgeConfig.model_validate(
            {
                "state_dir": str(work / "edge"),
                "control_plane": {"tunnel_address": cp.tunnel_address},
                # Idle sandboxes pause after 0.2 s: calls in (a) come back to back and never
                # see a pause; (d) waits for the pause before each call.
                "sandbox": {"name_prefix": PREFIX, "idle_pause_s": 0.2},
            }
        )
        async with EdgeAgent(config, identity=identity) as edge:
            assert await edge.wait_connected(20)
            gw = cp.gateway

            async def call(session: str, key: str) -> float:
                t0 = time.perf_counter()
                result = await gw.execute(session, env.id, "bash", {"command": "true"}, idempotency_key=key)
                elapsed = (time.perf_counter() - t0) * 1000
                assert not result.is_error, result
                return elapsed

            # (a) warm sandbox through the tunnel
            for i in range(20):
                await call("warm", f"warmup-{i}")
            warm = [await call("warm", f"a-{i}") for i in range(samples)]

            # (d) first call after the sandbox was paused by the idle timer
            client = docker.from_env()
            [container] = client.containers.list(
                filters={"label": [f"outpost.edge_id={edge.edge_id}", "outpost.session_id=warm"]}
            )
            paused = []
            for i in range(samples):
                await _wait_paused(container)
                paused.append(await call("warm", f"d-{i}"))

            # (b) plain docker exec, same image, a container of its own (the sandbox pauses when idle)
            plain_container = client.containers.run(
                "outpost-sandbox:1",
                ["sleep", "infinity"],
                detach=True,
                name=f"{PREFIX}-plain-exec",
                labels={"outpost.bench": "1"},
                network_mode="none",
                user="1000:1000",
            )
            plain = []
            try:
                for _ in range(samples):
                    t0 = time.perf_counter()
                    await asyncio.to_thread(
                        plain_container.exec_run, ["bash", "-c", "true"], user="1000:1000"
                    )
                    plain.append((time.perf_counter() - t0) * 1000)
            finally:
                plain_container.remove(force=True)

            # (c) first call of a new session: cold provision
            cold = []
            for i in range(cold_samples):
                session = f"cold-{i}"
                cold.append(await call(session, f"c-{i}"))
                await gw.destroy(session, env.id)

            await gw.destroy("warm", env.id)
            client.close()

    print(f"\nOutpost tunnel benchmark ({samples} samples; cold {cold_samples})")
    print(line("(a) bash true via tunnel, warm sandbox", warm))
    print(line("(b) bash true via plain docker exec", plain))
    print(line("(c) first call of a new session (cold)", cold))
    print(line("(d) first call after pause", paused))
    ratio = statistics.median(plain) / statistics.median(warm)
    print(f"\n(b)/(a) p50 ratio: {ratio:.1f}x  (target ≥ 5x)")
    print(
        f"targets: (a) p50 ≤ 5 ms: {'OK' if pct(warm, 50) <= 5 else 'MISSED'};"
        f" (c) p50 ≤ 400 ms: {'OK' if pct(cold, 50) <= 400 else 'MISSED'};"
        f" (d) p50 ≤ 30 ms: {'OK' if pct(paused, 50) <= 30 else 'MISSED'}"
    )


async def _wait_paused(container: docker.models.containers.Container) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        await asyncio.to_thread(container.reload)
        if container.status == "paused":
            return
        await asyncio.sleep(0.02)
    raise RuntimeError("sandbox did not pause")


def _now():  # type: ignore[no-untyped-def]
    from datetime import UTC, datetime

    return datetime.now(UTC)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--cold-samples", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(main(args.samples, args.cold_samples))
