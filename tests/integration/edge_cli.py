"""``outpost-edge`` as a subprocess, and the enrollment tokens its commands need."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import httpx

from tests.support import REPO
from tests.support.edge_link import PROXY_VARS

__all__ = ["edge_cli", "new_token"]


async def edge_cli(*argv: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run ``outpost-edge ARGV`` (as ``python -m edge_agent.cli``) in ``cwd``: (code, stdout, stderr)."""
    base = {k: v for k, v in os.environ.items() if k not in PROXY_VARS and not k.startswith("OUTPOST_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "edge_agent.cli",
        *argv,
        cwd=cwd,
        env={**base, "PYTHONPATH": str(REPO), **(env or {})},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def new_token(api: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    """A new environment's enrollment token (``body``: its settings, e.g. ``ttl_seconds``)."""
    r = await api.post("/v1/environments", json={"name": "cli", "config": {"type": "self_hosted"}})
    assert r.status_code == 200, r.text
    r = await api.post(f"/v1/environments/{r.json()['id']}/enrollment_tokens", json=body or {})
    assert r.status_code == 200, r.text
    token: dict[str, Any] = r.json()
    return token
