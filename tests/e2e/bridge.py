"""Helpers for the packaging e2e tests (systemd and container installs): a control plane bound to the
Docker bridge gateway (reachable from containers we start, not from other hosts), a wheelhouse of
the project, and an async ``docker``/shell runner that never blocks the event loop the control
plane runs on."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from control_plane.config import ControlPlaneConfig
from control_plane.server import ControlPlane
from tests.support import REPO
from tests.support.e2e import Api

NAME_PREFIX = "outpost-e2e"  # sandboxes: the e2e leak check removes and reports these
EDGE_CONFIG = {
    "state_dir": "/var/lib/outpost-edge",
    "sandbox": {"name_prefix": NAME_PREFIX, "docker_url": "unix:///var/run/docker.sock"},
    "connection": {"backoff_initial_s": 0.2, "backoff_max_s": 1.0, "drain_grace_s": 10.0},
    "observability": {"listen": None},
}


async def run(
    *argv: str,
    input: bytes | None = None,
    check: bool = True,
    timeout_s: float = 300,
    env_extra: dict[str, str] | None = None,
) -> str:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env={**os.environ, **(env_extra or {})},
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(input), timeout_s)
    text = out.decode(errors="replace")
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {proc.returncode}:\n{text}")
    return text


def bridge_gateway() -> str:
    """The default bridge's gateway address (from IPAM, else the subnet's first host)."""
    out = subprocess.run(
        ["docker", "network", "inspect", "bridge"], check=True, capture_output=True, text=True
    ).stdout
    ipam = json.loads(out)[0]["IPAM"]["Config"][0]
    if ipam.get("Gateway"):
        return str(ipam["Gateway"])
    return str(next(ipaddress.ip_network(ipam["Subnet"]).hosts()))


def wheelhouse(dest: Path) -> Path:
    """Wheels of the project and its ``edge`` extra, made with the host's pip (its index and CA)."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", f"{REPO}[edge]", "-w", str(dest)],
        check=True,
        capture_output=True,
    )
    return dest


@asynccontextmanager
async def bridge_control_plane(data_dir: Path) -> AsyncIterator[tuple[ControlPlane, Api, str]]:
    """A control plane listening only on the bridge gateway; yields it, an admin client and an
    environment id."""
    gw = bridge_gateway()
    config = ControlPlaneConfig(
        data_dir=data_dir,
        http_host=gw,
        http_port=0,
        tunnel_host=gw,
        tunnel_port=0,
        tls_ips=(gw, "127.0.0.1"),
        heartbeat_interval_s=1.0,
        heartbeat_timeout_s=5.0,
        drain_grace_s=2.0,
        edge_wait_s=20.0,
    )
    async with (
        ControlPlane(config) as cp,
        httpx.AsyncClient(
            base_url=cp.http_url, headers={"authorization": f"Bearer {cp.admin_key()}"}, timeout=120
        ) as client,
    ):
        api = Api(client)
        env = await api.post("/v1/environments", {"name": "packaging", "config": {"type": "self_hosted"}})
        yield cp, api, str(env["id"])


async def enrollment_token(api: Api, environment: str) -> dict[str, Any]:
    token: dict[str, Any] = await api.post(
        f"/v1/environments/{environment}/enrollment_tokens", {"ttl_seconds": 600}
    )
    return token


async def connected_edge_ids(api: Api) -> set[str]:
    body = await api.get("/v1/connected_edges")
    items = body["data"] if isinstance(body, dict) else body
    return {str(e.get("edge_id") or e.get("id")) for e in items}
