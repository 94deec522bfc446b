"""A one-minute smoke of ``bench/soak.py``: a control plane and two edges on their shipped defaults,
tool calls through cut links and an edge restart, lose no call, run none twice, and reconnect only
when a link was cut or an edge restarted. The counts are asserted, never the timings (the bench
prints those)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import docker
import pytest

from tests.support import REPO

pytestmark = pytest.mark.docker


# A minute of soak plus its set-up; above the 900 s the test gives bench/soak.py, so that its own
# message (with the bench's output) is the one a hang shows.
@pytest.mark.timeout(960)
async def test_one_minute_soak_loses_nothing_and_reconnects_only_when_cut(
    tmp_path: Path,
    docker_client: docker.DockerClient,  # the sandbox image is there
) -> None:
    figures_path = tmp_path / "figures.json"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(REPO / "bench" / "soak.py"),
        "--minutes",
        "1",
        "--seed",
        "20261203",
        "--json",
        str(figures_path),
        cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 900)
    print(out.decode(errors="replace"))
    assert figures_path.exists(), out.decode(errors="replace")[-4000:]
    figures = json.loads(figures_path.read_text())
    assert figures["lost"] == 0, figures["lost_calls"]
    assert figures["executed_twice"] == 0, figures["doubled_calls"]
    assert figures["unexpected_reconnects"] == 0, figures["handshakes"]
    assert proc.returncode == 0
    # Not vacuous: calls were made on every path, and an edge was restarted.
    assert all(figures["calls"].get(kind, {}).get("made", 0) > 0 for kind in ("cli", "http", "sdk"))
    assert sum(h["restarts"] for h in figures["handshakes"].values()) == 1
