"""``client.beta.deployments`` and ``client.beta.deployment_runs`` end to end: all 10 methods through
the official SDK against the real API on SQLite, every reply parsed strictly into the SDK's models;
manual runs creating real sessions (``deployment_id`` stamped, listed by it), runs that cannot
start recording the SDK's typed error, hostile input (bad cron, bad zones, 6 fields, too many
initial events, unknown agents and environments) and scoped keys."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest
from anthropic.types.beta import BetaManagedAgentsDeployment, BetaManagedAgentsDeploymentRun

from tests.support.api_app import Api, assert_complete, assert_valid

MESSAGE = {"type": "user.message", "content": [{"type": "text", "text": "nightly report"}]}
SYSTEM = {"type": "system.message", "content": [{"type": "text", "text": "be brief"}]}
OUTCOME = {
    "type": "user.define_outcome",
    "description": "a report",
    "rubric": {"type": "text", "content": "ok"},
}


def deployments(api: Api) -> Any:
    return api.client.beta.deployments


async def make(api: Api, **overrides: Any) -> BetaManagedAgentsDeployment:
    params: dict[str, Any] = {"name": "nightly", "initial_events": [MESSAGE, SYSTEM]}
    if "agent" not in overrides:
        params["agent"] = (await api.agent()).id
    if "environment_id" not in overrides:
        params["environment_id"] = await api.environment()
    params.update(overrides)
    created: BetaManagedAgentsDeployment = await deployments(api).create(**params)
    assert_valid(created)
    return created


async def collect(pager: Any) -> list[Any]:
    return [item async for item in pager]


async def test_deployment_lifecycle(api: Api) -> None:
    agent = await api.agent()
    env = await api.environment()
    schedule = {"type": "cron", "expression": "0 9 * * 1-5", "timezone": "America/Los_Angeles"}
    created = await make(
        api,
        agent=agent.id,
        environment_id=env,
        schedule=schedule,
        description="weekday mornings",
        metadata={"team": "a"},
        budget={"type": "limit", "max_list_cost": {"amount": "500", "currency": "USD"}},
    )
    assert_complete(created)
    assert created.id.startswith("depl_") and created.status == "active" and created.paused_reason is None
    assert (created.agent.id, created.agent.version) == (agent.id, agent.version)
    assert created.schedule is not None and created.schedule.last_run_at is None
    fires = created.schedule.upcoming_runs_at or []
    assert len(fires) == 5 and fires == sorted(fires)
    assert all(f.weekday() < 5 and f.astimezone().utcoffset() is not None for f in fires)
    got = await deployments(api).retrieve(created.id)
    assert_complete(got)
    assert got.model_dump() == created.model_dump()

    updated = await deployments(api).update(
        created.id, name="renamed", metadata={"team": None, "k": "v"}, schedule=None, description=None
    )
    assert_valid(updated)
    assert (updated.name, updated.metadata, updated.schedule, updated.description) == (
        "renamed",
        {"k": "v"},
        None,
        None,
    )
    assert updated.initial_events == created.initial_events

    paused = await deployments(api).pause(created.id)
    assert_valid(paused)
    assert (
        paused.status == "paused"
        and paused.paused_reason is not None
        and paused.paused_reason.type == "manual"
    )
    assert [d.id for d in await collect(deployments(api).list(status="paused"))] == [created.id]
    assert await collect(deployments(api).list(status="active")) == []
    unpaused = await deployments(api).unpause(created.id)
    assert unpaused.status == "active" and unpaused.paused_reason is None

    other = await make(api)
    listed = await collect(deployments(api).list(limit=1))
    assert [d.id for d in listed] == [other.id, created.id]
    for item in listed:
        assert_valid(item)
    assert [d.id for d in await collect(deployments(api).list(agent_id=agent.id))] == [created.id]

    archived = await deployments(api).archive(created.id)
    assert_valid(archived)
    assert archived.archived_at is not None and archived.status == "active"
    assert [d.id for d in await collect(deployments(api).list())] == [other.id]
    assert len(await collect(deployments(api).list(include_archived=True))) == 2
    with pytest.raises(anthropic.BadRequestError):
        await deployments(api).update(created.id, name="x")
    with pytest.raises(anthropic.BadRequestError):
        await deployments(api).run(created.id)
    with pytest.raises(anthropic.BadRequestError, match="include_archived"):
        await collect(deployments(api).list(status="active", include_archived=True))


async def test_manual_run_creates_a_session(api: Api) -> None:
    created = await make(api, initial_events=[OUTCOME, MESSAGE, SYSTEM], metadata={"from": "deploy"})
    paused = await deployments(api).pause(created.id)  # manual runs work while paused
    assert paused.status == "paused"
    run = await deployments(api).run(created.id)
    assert isinstance(run, BetaManagedAgentsDeploymentRun)
    assert_complete(run)
    assert run.id.startswith("drun_") and run.error is None and run.session_id is not None
    assert run.trigger_context.type == "manual" and run.deployment_id == created.id
    session = await api.client.beta.sessions.retrieve(run.session_id)
    assert session.deployment_id == created.id and session.metadata == {"from": "deploy"}
    assert session.environment_id == created.environment_id
    events = await collect(api.client.beta.sessions.events.list(run.session_id))
    assert [e.type for e in events][:3] == ["user.define_outcome", "user.message", "system.message"]
    assert api.runner.wakes(run.session_id) == 1
    by_deployment = await collect(api.client.beta.sessions.list(deployment_id=created.id))
    assert [s.id for s in by_deployment] == [run.session_id]

    got = await api.client.beta.deployment_runs.retrieve(run.id)
    assert_complete(got)
    assert got.model_dump() == run.model_dump()
    second = await deployments(api).run(created.id)
    runs = api.client.beta.deployment_runs
    assert [r.id for r in await collect(runs.list(deployment_id=created.id))] == [second.id, run.id]
    assert len(await collect(runs.list(trigger_type="manual", has_error=False))) == 2
    assert await collect(runs.list(trigger_type="schedule")) == []
    assert await collect(runs.list(has_error=True)) == []
    assert await collect(runs.list(deployment_id="depl_unknown")) == []
    assert [r.id for r in await collect(runs.list(created_at_gt=run.created_at))] == [second.id]
    with pytest.raises(anthropic.BadRequestError):
        await collect(runs.list(page="not-a-cursor"))
    with pytest.raises(anthropic.NotFoundError):
        await runs.retrieve("drun_unknown")


async def test_runs_that_cannot_start_record_the_typed_error(api: Api) -> None:
    upload = await api.client.beta.files.upload(file=("a.txt", b"a", "text/plain"))
    with_file = await make(api, resources=[{"type": "file", "file_id": upload.id}])
    await api.client.beta.files.delete(upload.id)
    run = await deployments(api).run(with_file.id)
    assert_complete(run)
    assert run.session_id is None and run.error is not None and run.error.type == "file_not_found_error"

    deployment = await make(api)
    await api.client.beta.environments.archive(deployment.environment_id)
    run = await deployments(api).run(deployment.id)
    assert run.error is not None and run.error.type == "environment_archived_error"
    failed = await collect(api.client.beta.deployment_runs.list(has_error=True))
    assert {r.id for r in failed} >= {run.id}
    for item in failed:
        assert_complete(item)


@pytest.mark.parametrize(
    ("schedule", "param"),
    [
        ({"type": "cron", "expression": "61 * * * *", "timezone": "UTC"}, "schedule.expression"),
        ({"type": "cron", "expression": "* * * * * *", "timezone": "UTC"}, "schedule.expression"),
        ({"type": "cron", "expression": "* * * *", "timezone": "UTC"}, "schedule.expression"),
        ({"type": "cron", "expression": "@daily", "timezone": "UTC"}, "schedule.expression"),
        ({"type": "cron", "expression": "0 0 L * *", "timezone": "UTC"}, "schedule.expression"),
        ({"type": "cron", "expression": "0 0 * * 5#2", "timezone": "UTC"}, "schedule.expression"),
        ({"type": "cron", "expression": "0 0 30 2 *", "timezone": "UTC"}, "schedule.expression"),
        ({"type": "cron", "expression": "0 9 * * *", "timezone": "Mars/Olympus"}, "schedule.timezone"),
        ({"type": "cron", "expression": "0 9 * * *", "timezone": "../../etc/passwd"}, "schedule.timezone"),
        ({"type": "cron", "expression": "0 9 * * *", "timezone": ""}, "schedule.timezone"),
    ],
)
async def test_bad_schedules_are_refused_naming_the_field(
    api: Api, schedule: dict[str, Any], param: str
) -> None:
    with pytest.raises(anthropic.BadRequestError, match=param.replace(".", r"\.")):
        await make(api, schedule=schedule)


async def test_hostile_input(api: Api) -> None:
    with pytest.raises(anthropic.BadRequestError, match="initial_events"):
        await make(api, initial_events=[MESSAGE] * 51)
    with pytest.raises(anthropic.BadRequestError, match="initial_events"):
        await make(api, initial_events=[])
    with pytest.raises(anthropic.BadRequestError, match="initial_events"):
        await make(api, initial_events=[{"type": "user.interrupt"}])
    with pytest.raises(anthropic.NotFoundError):
        await make(api, agent="agent_unknown")
    with pytest.raises(anthropic.NotFoundError):
        await make(api, environment_id="env_unknown")
    with pytest.raises(anthropic.NotFoundError):
        await make(api, vault_ids=["vlt_unknown"])
    with pytest.raises(anthropic.BadRequestError, match="authorization_token"):
        await make(
            api,
            resources=[
                {"type": "github_repository", "url": "https://github.com/a/b", "authorization_token": "t"}
            ],
        )
    with pytest.raises(anthropic.BadRequestError):
        await make(api, name="")
    with pytest.raises(anthropic.NotFoundError):
        await deployments(api).retrieve("depl_unknown")
    created = await make(api)
    with pytest.raises(anthropic.BadRequestError, match="name"):
        await deployments(api).update(created.id, name=None)  # type: ignore[arg-type]
    anonymous = anthropic.AsyncAnthropic(base_url=api.url, api_key="sk-wrong", max_retries=0)
    async with anonymous:
        with pytest.raises(anthropic.AuthenticationError):
            await anonymous.beta.deployments.list()


async def test_scoped_keys(api: Api) -> None:
    mine, theirs = await api.environment("mine"), await api.environment("theirs")
    own = await make(api, environment_id=mine)
    other = await make(api, environment_id=theirs)
    other_run = await deployments(api).run(other.id)
    response = await api.http.post(
        "/v1/api_keys", json={"name": "env", "scope": "read_write", "environment_ids": [mine]}
    )
    assert response.status_code == 200, response.text
    async with anthropic.AsyncAnthropic(
        base_url=api.url, api_key=response.json()["key"], max_retries=0
    ) as client:
        assert [d.id for d in await collect(client.beta.deployments.list())] == [own.id]
        with pytest.raises(anthropic.NotFoundError):
            await client.beta.deployments.retrieve(other.id)
        with pytest.raises(anthropic.NotFoundError):
            await client.beta.deployments.run(other.id)
        with pytest.raises(anthropic.NotFoundError):
            await client.beta.deployment_runs.retrieve(other_run.id)
        with pytest.raises(anthropic.NotFoundError):
            await make_with(client, api, environment_id=theirs)
        run = await client.beta.deployments.run(own.id)
        assert [r.id for r in await collect(client.beta.deployment_runs.list())] == [run.id]
    response = await api.http.post("/v1/api_keys", json={"name": "ro", "scope": "read_only"})
    async with anthropic.AsyncAnthropic(
        base_url=api.url, api_key=response.json()["key"], max_retries=0
    ) as client:
        assert len(await collect(client.beta.deployments.list())) == 2
        with pytest.raises(anthropic.PermissionDeniedError):
            await client.beta.deployments.run(own.id)


async def make_with(client: anthropic.AsyncAnthropic, api: Api, **overrides: Any) -> Any:
    agent = await api.agent()
    params: dict[str, Any] = {"name": "x", "agent": agent.id, "initial_events": [MESSAGE], **overrides}
    return await client.beta.deployments.create(**params)
