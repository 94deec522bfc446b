"""A tiny run of ``bench/bench_scale.py`` (4 sessions, 3 light edges, 2 replicas on one SQLite
store), so the bench keeps working: it must exit 0 (no failed turn, tool error, missed event or
dropped edge) and print every figure's line. The values are the bench's to print, not asserted."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from tests.support import REPO

# The bench needs no Docker (its edges keep sandboxes in memory), but this directory's autouse
# `no_leaks` fixture asks the engine, like every e2e test.
pytestmark = pytest.mark.docker

FIGURE_LINES = (
    "turns/s",
    "CPU per turn",
    "send→idle",
    "RSS per replica",
    "stream delay (load)",
    "stream delay (rest)",
    "sandboxes per edge",
    "/healthz latency",
    "heartbeat cost",
    "problems",
)


# Starts real control planes and edges; above the 600 s the test gives the bench's process.
@pytest.mark.timeout(660)
async def test_bench_scale_runs_at_a_tiny_size_and_prints_every_figure(tmp_path: Path) -> None:
    figures_path = tmp_path / "figures.json"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(REPO / "bench" / "bench_scale.py"),
        *("--sessions", "4", "--edges", "3", "--replicas", "2", "--turns", "2"),
        *("--idle-window-s", "1", "--json", str(figures_path)),
        cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out_bytes, _ = await asyncio.wait_for(proc.communicate(), 600)
    out = out_bytes.decode(errors="replace")
    print(out)
    assert proc.returncode == 0, out[-4000:]
    for label in FIGURE_LINES:
        assert any(line.strip().startswith(label) for line in out.splitlines()), f"no {label!r} line"
    figures = json.loads(figures_path.read_text())
    # Not vacuous: both kinds of turn ran, a second stream on the other replica saw events, and the
    # light edges made sandboxes.
    assert figures["turns"] == 8
    assert figures["cross_stream_events"] > 0
    assert figures["sandboxes_total"] >= 4
