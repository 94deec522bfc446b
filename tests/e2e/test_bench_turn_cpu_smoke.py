"""A tiny run of ``bench/bench_turn_cpu.py`` with ``--baseline`` set to this same tree (3 sessions,
2 turns each, 2 rounds), so the bench and its side-by-side mode keep working: it must exit 0 and
print a line per measurement and the ratio line. The values are the bench's to print, not asserted."""

from __future__ import annotations

import asyncio
import os
import re
import sys

import pytest

from tests.support import REPO

# No Docker needed (text-only turns, no edge), but this directory's autouse `no_leaks` fixture asks
# the engine, like every e2e test.
pytestmark = pytest.mark.docker


# Two source trees side by side; above the 300 s the test gives the bench's process.
@pytest.mark.timeout(360)
async def test_bench_turn_cpu_compares_two_trees_at_a_tiny_size() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(REPO / "bench" / "bench_turn_cpu.py"),
        *("--sessions", "3", "--turns", "2", "--rounds", "2", "--baseline", str(REPO)),
        cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out_bytes, _ = await asyncio.wait_for(proc.communicate(), 300)
    out = out_bytes.decode(errors="replace")
    print(out)
    assert proc.returncode == 0, out[-4000:]
    lines = out.splitlines()
    measured = [line for line in lines if re.match(r"(baseline|this tree): sessions 3, turns 6 in ", line)]
    assert len(measured) == 4, out  # 2 rounds of 2 trees, every turn measured
    assert any(re.match(r"median of 2: CPU per turn [\d.]+ → [\d.]+ ms \([\d.]+x\)", line) for line in lines)
