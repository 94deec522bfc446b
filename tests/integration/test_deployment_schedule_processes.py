"""The acceptance test of scheduled deployments: TWO real control-plane processes
(``outpost-control serve``) on one SQLite store, a deployment on ``* * * * *``, and the real
wall clock for three minute ticks — exactly one run (and one session) per tick, no duplicate, no
gap. Then both processes stop cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anthropic
import pytest
import yaml

from tests.support.control_plane_process import SharedStoreControlPlane, free_port

TICKS = 3
# A scheduler checks every 2 s here (default 15 s) so a tick's run is recorded within seconds and
# the test need not wait long past its last tick; the one-run-per-tick rule does not depend on it.
CHECK_INTERVAL_S = 2.0
SETTLE_S = 20.0  # past the last tick: generous for 2 busy cores


class Scheduling(SharedStoreControlPlane):
    def __init__(self, workdir: Path, name: str, data_dir: Path) -> None:
        super().__init__(workdir, name, data_dir, f"http://127.0.0.1:{free_port()}")  # no model is called
        settings = yaml.safe_load(self.config.read_text())
        settings["deployments"] = {"check_interval_s": CHECK_INTERVAL_S}
        self.config.write_text(yaml.safe_dump(settings))


def next_minute(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0) + timedelta(minutes=1)


# Three real minutes of wall clock (the honest route: no injected clock, no finer schedule), plus
# start-up and settling on a shared 2-core machine.
@pytest.mark.timeout(480)
async def test_two_processes_fire_one_run_per_minute(tmp_path: Path) -> None:
    data_dir = tmp_path / "shared"
    planes = [Scheduling(tmp_path, name, data_dir) for name in ("cp-a", "cp-b")]
    try:
        planes[0].start()
        await planes[0].wait_up()  # the first creates the store, the CA and the admin key
        planes[1].start()
        await planes[1].wait_up()
        key = (data_dir / "admin-api-key").read_text().strip()
        async with anthropic.AsyncAnthropic(
            base_url=planes[0].url, api_key=key, max_retries=2, timeout=30
        ) as client:
            agent = await client.beta.agents.create(name="cron", model="claude-opus-4-8")
            env = await client.beta.environments.create(name="pool", config={"type": "self_hosted"})
            deployment = await client.beta.deployments.create(
                agent=agent.id,
                environment_id=env.id,
                name="every minute",
                initial_events=[{"type": "user.message", "content": [{"type": "text", "text": "tick"}]}],
                schedule={"type": "cron", "expression": "* * * * *", "timezone": "UTC"},
            )
            first = next_minute(deployment.created_at)
            last = first + timedelta(minutes=TICKS - 1)
            wait_s = (last - datetime.now(UTC)).total_seconds() + SETTLE_S
            await asyncio.sleep(max(wait_s, 0))  # the wall clock is what is under test
            runs = [r async for r in client.beta.deployment_runs.list(deployment_id=deployment.id, limit=100)]
            sessions = [s async for s in client.beta.sessions.list(deployment_id=deployment.id, limit=100)]
    finally:
        for plane in planes:
            plane.stop()
    ticks = sorted(r.trigger_context.scheduled_at for r in runs if r.trigger_context.type == "schedule")
    assert len(ticks) == len(set(ticks)), f"duplicate runs: {ticks}"
    expected = [first + timedelta(minutes=i) for i in range(len(ticks))]
    assert ticks == expected and len(ticks) >= TICKS, (ticks, first)
    assert all(r.error is None and r.session_id for r in runs), runs
    assert sorted(s.id for s in sessions) == sorted(str(r.session_id) for r in runs)
    assert [p.proc.returncode for p in planes if p.proc is not None] == [0, 0], "not a clean stop"
    logs: Any = [p.log.read_text() for p in planes]
    assert not any("Traceback" in text and "deployment" in text for text in logs), logs
