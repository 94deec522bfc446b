"""MCP tool-call round trip through the tunnel, on a warm session.

    python bench/bench_mcp.py [--samples 300]

control plane (EdgeGateway.mcp_call) → gRPC mTLS tunnel → edge (journal, policy) → McpHub →
stdio MCP server (built with the mcp SDK) → back. Side by side: the same call on the edge's hub
directly (no tunnel), to show what the tunnel adds. Target: p50 ≤ 10 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from control_plane.config import ControlPlaneConfig
from control_plane.server import ControlPlane
from edge_agent.config import EdgeConfig
from edge_agent.daemon import EdgeAgent
from edge_agent.enroll import register

SERVER = Path(__file__).resolve().parents[1] / "tests" / "integration" / "mcp" / "servers" / "stdio_server.py"


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def line(name: str, samples: list[float]) -> str:
    figures = "  ".join(f"p{p} {pct(samples, p):7.2f} ms" for p in (50, 95, 99))
    return f"{name:46} n={len(samples):4}  {figures}"


async def main(samples: int) -> None:
    logging.basicConfig(level=logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="outpost-bench-mcp-"))
    async with ControlPlane(ControlPlaneConfig(data_dir=work / "cp", http_port=0, tunnel_port=0)) as cp:
        assert cp.store is not None and cp.enrollment is not None
        await cp.store.create_resource("environment", "env_mcp", {"name": "mcp"}, datetime.now(UTC))
        token = await cp.enrollment.create_token("env_mcp")
        identity = await register(
            cp.http_url, token.token, work / "edge", name="bench", ca_fingerprint=token.ca_fingerprint
        )
        config = EdgeConfig.model_validate(
            {
                "state_dir": str(work / "edge"),
                "control_plane": {"tunnel_address": cp.tunnel_address},
                "mcp_servers": [
                    {"name": "tools", "stdio": {"command": sys.executable, "args": [str(SERVER)]}}
                ],
                "policy": {"mcp": {"servers": {"tools": {"tools": ["echo"]}}}},
                "logging": {"level": "WARNING"},
            }
        )
        async with EdgeAgent(config, identity=identity) as edge:
            assert await edge.wait_connected(20) and edge.mcp is not None
            while cp.gateway.mcp_catalog("env_mcp").get("tools", {}).get("status") != "up":
                await asyncio.sleep(0.05)
            tunnel: list[float] = []
            direct: list[float] = []
            for i in range(samples + 20):
                t0 = time.perf_counter()
                result = await cp.gateway.mcp_call(
                    "bench", "env_mcp", "tools", "echo", {"text": "hi"}, idempotency_key=f"k{i}"
                )
                if i >= 20:
                    tunnel.append((time.perf_counter() - t0) * 1000)
                assert not result.is_error
                t0 = time.perf_counter()
                await edge.mcp.call("tools", "echo", {"text": "hi"})
                if i >= 20:
                    direct.append((time.perf_counter() - t0) * 1000)
    print(f"\nMCP tool call round trip, warm ({samples} samples)")
    print(line("control plane → tunnel → edge → stdio MCP", tunnel))
    print(line("edge hub → stdio MCP (no tunnel)", direct))
    print(f"tunnel + journal overhead at p50: {pct(tunnel, 50) - pct(direct, 50):.2f} ms")
    print(f"target p50 ≤ 10 ms: {'OK' if pct(tunnel, 50) <= 10 else 'MISSED'}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=300)
    asyncio.run(main(parser.parse_args().samples))
