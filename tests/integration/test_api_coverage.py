"""``scripts/api_coverage.py`` against a control plane of its own (``outpost-control serve`` on
127.0.0.1 with the local scripted model): every Managed Agents method of the installed SDK is
checked, none is an error (a 5xx or a reply the SDK's model rejects), and the number served does
not drop below what Outpost served when this test was last raised."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "api_coverage.py"

#: Methods served as of this test's last change (anthropic 2.16: 38 of 105 before issue 14). Raise it
#: when Outpost serves more; the test fails when it serves fewer.
SERVED_FLOOR = 96  # + tunnels, deployments, dreams, threads (issue 15)

SUMMARY = re.compile(
    r"served (?P<served>\d+) of (?P<total>\d+) .*· refused (?P<refused>\d+) · "
    r"not routed (?P<not_routed>\d+) · error (?P<error>\d+) · unplanned (?P<unplanned>\d+)"
)


def test_the_coverage_check_finds_no_error_and_no_fewer_served_methods() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], cwd=REPO, capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [summary] = [m for line in done.stdout.splitlines() if (m := SUMMARY.search(line))]
    counts = {name: int(value) for name, value in summary.groupdict().items()}
    assert counts["served"] >= SERVED_FLOOR, done.stdout
    assert counts["error"] == 0, done.stdout
    assert counts["unplanned"] == 0, done.stdout  # every API method of the SDK has a planned call
    assert counts["total"] == sum(v for k, v in counts.items() if k != "total")
    rows = [line.split() for line in done.stdout.splitlines() if re.match(r"^[a-z_]+\.[a-z_.]+\s", line)]
    assert len(rows) == counts["total"]
    assert not [row for row in rows if row[1] == "error"], done.stdout
    # the methods every release has served stay served
    served = {row[0] for row in rows if row[1] == "served"}
    assert {"agents.create", "sessions.events.stream", "sessions.events.list", "vaults.create"} <= served


def test_a_base_url_needs_a_key_file() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--base-url", "http://127.0.0.1:9"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "--api-key-file" in done.stderr
