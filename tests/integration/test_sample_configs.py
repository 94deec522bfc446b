"""The shipped sample configs (packaging/config/*.yaml, comments only) and an empty file are valid
configs for both daemons, through their real command lines: ``outpost-control serve --config``
starts and serves, ``outpost-edge check-config --config`` accepts them."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]


def _config(kind: str, name: str, tmp_path: Path) -> Path:
    if kind == "sample":
        return REPO / "packaging/config" / name
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    return empty


@pytest.mark.parametrize("kind", ["sample", "empty"])
async def test_control_plane_serves_on_a_comments_only_or_empty_config(kind: str, tmp_path: Path) -> None:
    config = _config(kind, "control.yaml", tmp_path)
    no_key = tmp_path / "model-key"
    no_key.write_text("")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "control_plane.cli",
        "serve",
        "--config",
        str(config),
        "--data-dir",
        str(tmp_path / "data"),
        "--http",
        "127.0.0.1:0",
        "--tunnel",
        "127.0.0.1:0",
        "--model-api-key-file",
        str(no_key),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stdout is not None
    seen: list[str] = []
    try:
        url = None
        async with asyncio.timeout(60):  # a generous bound for a loaded 2-core machine
            while url is None:
                line = (await proc.stdout.readline()).decode()
                assert line, f"serve exited {await proc.wait()}:\n{''.join(seen)}"
                seen.append(line)
                found = re.search(r"http://127\.0\.0\.1:\d+", line)
                url = found[0] if found else None
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"{url}/healthz")).status_code == 200
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        rest, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, "".join(seen) + rest.decode()


@pytest.mark.parametrize("kind", ["sample", "empty"])
async def test_edge_accepts_a_comments_only_or_empty_config(kind: str, tmp_path: Path) -> None:
    config = _config(kind, "edge.yaml", tmp_path)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "edge_agent.cli",
        "check-config",
        "--config",
        str(config),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        cwd=REPO,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, out.decode()
