"""Scheduled deployment runs with an injected clock: the real API on SQLite (SDK-driven) and
:class:`DeploymentScheduler` steps fired at chosen instants — across a DST change, after a
downtime (one run, never a burst), by two schedulers at once (one run per tick), while paused, and
until repeated failures pause the deployment (``paused_reason: error``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from control_plane.agents.service import AgentService
from control_plane.deployments import DeploymentScheduler, DeploymentsConfig, DeploymentService
from control_plane.sessions.service import SessionService
from control_plane.store.base import Resource
from tests.support.api_app import Api, assert_complete, assert_valid
from tests.support.api_server import serve_api

MESSAGE = {"type": "user.message", "content": [{"type": "text", "text": "tick"}]}


@dataclass
class Clock:
    now: datetime

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock(datetime(2026, 3, 7, 17, 0, tzinfo=UTC))  # noon in New York, the day before DST


@pytest.fixture
async def api(tmp_path: Path, clock: Clock) -> AsyncIterator[Api]:
    async with serve_api(tmp_path, clock=clock) as served:
        yield served


def scheduler(api: Api, clock: Clock, *, pause_after_failures: int = 3) -> DeploymentScheduler:
    """A scheduler of its own (as another control-plane process would have) on the API's store."""
    agents = AgentService(api.store, clock)
    sessions = SessionService(api.store, api.bus, api.runner, clock, agents=agents)
    service = DeploymentService(api.store, sessions, agents, clock)
    config = DeploymentsConfig(pause_after_failures=pause_after_failures)
    return DeploymentScheduler(service, config, clock=clock)


async def deploy(api: Api, expression: str, timezone: str = "America/New_York") -> Any:
    agent = await api.agent()
    return await api.client.beta.deployments.create(
        agent=agent.id,
        environment_id=await api.environment(),
        name="scheduled",
        initial_events=[MESSAGE],
        schedule={"type": "cron", "expression": expression, "timezone": timezone},
    )


def scheduled_at(runs: list[Resource]) -> list[str]:
    return [r.body["trigger_context"]["scheduled_at"] for r in runs]


async def test_ticks_across_spring_forward_and_downtime(api: Api, clock: Clock) -> None:
    deployment = await deploy(api, "30 2 * * *")
    one = scheduler(api, clock)
    assert await one.run_once() == []
    clock.now = datetime(2026, 3, 8, 7, 0, 20, tzinfo=UTC)  # 03:00:20 EDT: 02:30 was skipped
    runs = await one.run_once()
    assert scheduled_at(runs) == ["2026-03-08T07:00:00Z"]
    assert runs[0].body["session_id"] is not None
    assert await one.run_once() == []  # the same tick never twice
    got = await api.client.beta.deployments.retrieve(deployment.id)
    assert_complete(got)
    assert got.schedule is not None and got.schedule.last_run_at == clock.now
    assert got.schedule.upcoming_runs_at is not None
    assert got.schedule.upcoming_runs_at[0] == datetime(2026, 3, 9, 6, 30, tzinfo=UTC)
    clock.now += timedelta(days=4, hours=3)  # down for days: only the latest missed tick
    assert scheduled_at(await one.run_once()) == ["2026-03-12T06:30:00Z"]
    listed = [r async for r in api.client.beta.deployment_runs.list(trigger_type="schedule")]
    assert len(listed) == 2
    for run in listed:
        assert_complete(run)
        assert run.trigger_context.type == "schedule"
    sessions = [s async for s in api.client.beta.sessions.list(deployment_id=deployment.id)]
    assert {s.id for s in sessions} == {r.session_id for r in listed}


async def test_two_schedulers_fire_each_tick_once(api: Api, clock: Clock) -> None:
    await deploy(api, "* * * * *", "UTC")
    await deploy(api, "*/2 * * * *", "Europe/Berlin")
    first, second = scheduler(api, clock), scheduler(api, clock)
    recorded: list[Resource] = []
    for _ in range(6):
        clock.now += timedelta(seconds=60)
        for runs in await asyncio.gather(first.run_once(), second.run_once()):
            recorded.extend(runs)
    pairs = [(r.body["deployment_id"], r.body["trigger_context"]["scheduled_at"]) for r in recorded]
    assert len(pairs) == len(set(pairs)) == 6 + 3
    stored = [r async for r in api.client.beta.deployment_runs.list(limit=100)]
    assert len(stored) == 9 and all(r.session_id for r in stored)
    assert len({r.session_id for r in stored}) == 9


async def test_paused_deployments_skip_ticks_and_failures_pause(api: Api, clock: Clock) -> None:
    deployment = await deploy(api, "* * * * *", "UTC")
    one = scheduler(api, clock, pause_after_failures=2)
    await api.client.beta.deployments.pause(deployment.id)
    clock.now += timedelta(minutes=5)
    assert await one.run_once() == []
    await api.client.beta.deployments.unpause(deployment.id)
    assert await one.run_once() == []  # ticks missed while paused are not fired
    await api.client.beta.environments.archive(deployment.environment_id)
    for _ in range(2):
        clock.now += timedelta(minutes=1)
        runs = await one.run_once()
        assert [r.body["error"]["type"] for r in runs] == ["environment_archived_error"]
    got = await api.client.beta.deployments.retrieve(deployment.id)
    assert_valid(got)
    assert got.status == "paused" and got.paused_reason is not None and got.paused_reason.type == "error"
    assert got.paused_reason.error.type == "environment_archived_error"  # type: ignore[union-attr]
    clock.now += timedelta(minutes=1)
    assert await one.run_once() == []
    failed = [r async for r in api.client.beta.deployment_runs.list(has_error=True)]
    assert len(failed) == 2
    for run in failed:
        assert_complete(run)
