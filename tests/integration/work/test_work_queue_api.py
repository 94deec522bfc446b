"""The work queue's routes through the official SDK against the real API (uvicorn, SQLite): every
state transition, the 412, ``block_ms`` bounds, each credential where it belongs and nowhere else,
and concurrent polls never handing one item to two workers."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic.types.beta.environments import BetaHeartbeatPreconditionFailedError

from control_plane.work import WorkQueue
from tests.support.api_app import Api, utcnow
from tests.support.api_server import serve_api


@dataclass
class Setup:
    api: Api
    env_id: str
    env_key: str
    worker: anthropic.AsyncAnthropic  # bearer: the environment key
    session_id: str


def _bearer(api: Api, token: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=api.url, auth_token=token, api_key=None, max_retries=0)


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[Setup]:
    async with serve_api(tmp_path) as api:
        config: Any = {"type": "self_hosted", "tool_runner": "worker"}
        env = await api.client.beta.environments.create(name="w", config=config)
        key = (await api.http.post(f"/v1/environments/{env.id}/keys", json={"name": "k"})).json()["key"]
        agent = await api.agent()
        session = await api.client.beta.sessions.create(agent=agent.id, environment_id=env.id)
        yield Setup(api, env.id, key, _bearer(api, key), session.id)


def _token(secret: str) -> str:
    return str(json.loads(base64.urlsafe_b64decode(secret + "=" * (-len(secret) % 4)))["sessions_token"])


async def test_states_heartbeats_and_stops(setup: Setup) -> None:
    work = setup.worker.beta.environments.work
    item = await work.poll(setup.env_id, block_ms=10, anthropic_worker_id="worker-1")
    assert item is not None and item.state == "queued" and item.data.id == setup.session_id and item.secret
    assert await work.poll(setup.env_id, block_ms=10) is None  # handed out: not again before reclaim
    acked = await work.ack(item.id, environment_id=setup.env_id)
    assert acked.state == "starting" and acked.acknowledged_at
    holder = _bearer(setup.api, _token(item.secret)).beta.environments.work
    beat = await holder.heartbeat(
        item.id, environment_id=setup.env_id, expected_last_heartbeat="NO_HEARTBEAT"
    )
    assert beat.lease_extended and beat.state == "active" and beat.ttl_seconds == 300 and beat.last_heartbeat
    with pytest.raises(BetaHeartbeatPreconditionFailedError) as stale:  # the SDK's own 412 class
        await holder.heartbeat(item.id, environment_id=setup.env_id, expected_last_heartbeat="NO_HEARTBEAT")
    assert stale.value.status_code == 412 and stale.value.error_code == "heartbeat_precondition_failed"
    current = stale.value.details.current_state
    assert current.last_heartbeat == beat.last_heartbeat and current.state == "active"
    assert not current.lease_extended
    again = await holder.heartbeat(
        item.id, environment_id=setup.env_id, expected_last_heartbeat=beat.last_heartbeat
    )
    assert again.lease_extended and again.last_heartbeat != beat.last_heartbeat
    stopping = await setup.api.client.beta.environments.work.stop(item.id, environment_id=setup.env_id)
    assert stopping.state == "stopping" and stopping.stop_requested_at
    told = await holder.heartbeat(item.id, environment_id=setup.env_id, expected_last_heartbeat="anything")
    assert not told.lease_extended and told.state == "stopping"  # not compared while stopping
    stopped = await holder.stop(item.id, environment_id=setup.env_id, force=True)
    assert stopped.state == "stopped" and stopped.stopped_at
    assert (await work.stop(item.id, environment_id=setup.env_id, force=True)).state == "stopped"  # 200 again
    with pytest.raises(anthropic.AuthenticationError):  # the token died with the item
        await holder.heartbeat(item.id, environment_id=setup.env_id, expected_last_heartbeat="x")
    got = await setup.api.client.beta.environments.work.retrieve(item.id, environment_id=setup.env_id)
    assert got.secret is None and got.state == "stopped"
    updated = await setup.api.client.beta.environments.work.update(
        item.id, environment_id=setup.env_id, metadata={"a": "b"}
    )
    assert updated.metadata == {"a": "b"}
    # new input on a session with no live item queues a new one
    await setup.api.client.beta.sessions.events.send(
        setup.session_id, events=[{"type": "user.message", "content": [{"type": "text", "text": "hi"}]}]
    )
    stats = await setup.api.client.beta.environments.work.stats(setup.env_id)
    assert stats.depth == 1 and stats.pending == 0 and stats.workers_polling == 1


async def test_an_expired_lease_is_queued_again(setup: Setup) -> None:
    work = setup.worker.beta.environments.work
    item = await work.poll(setup.env_id)
    assert item is not None and item.secret
    await work.ack(item.id, environment_id=setup.env_id)
    record = await setup.api.store.get_resource("work", item.id)
    body = {**record.body, "lease_expires_at": "2000-01-01T00:00:00Z"}  # as if its TTL had passed
    await setup.api.store.update_resource("work", item.id, body, utcnow())
    again = await work.poll(setup.env_id)
    assert again is not None and again.id == item.id and again.state == "queued"
    with pytest.raises(anthropic.AuthenticationError):  # the first holder's token is dead
        await _bearer(setup.api, _token(item.secret)).beta.environments.work.heartbeat(
            item.id, environment_id=setup.env_id, expected_last_heartbeat="NO_HEARTBEAT"
        )


async def test_block_ms_bounds_and_an_empty_poll_is_json_null(setup: Setup) -> None:
    for bad in ("0", "1000", "-1"):
        response = await setup.api.http.get(
            f"/v1/environments/{setup.env_id}/work/poll",
            params={"block_ms": bad},
            headers={"authorization": f"Bearer {setup.env_key}"},
        )
        assert response.status_code == 400, response.text
    work = setup.worker.beta.environments.work
    assert await work.poll(setup.env_id, block_ms=999) is not None
    raw = await setup.api.http.get(
        f"/v1/environments/{setup.env_id}/work/poll",
        params={"block_ms": 5},
        headers={"authorization": f"Bearer {setup.env_key}"},
    )
    assert raw.status_code == 200 and raw.content == b"null"


async def test_each_credential_only_where_it_belongs(setup: Setup) -> None:
    api, env_id = setup.api, setup.env_id
    item = await setup.worker.beta.environments.work.poll(env_id)
    assert item is not None and item.secret
    token = _token(item.secret)
    other_config: Any = {"type": "self_hosted", "tool_runner": "worker"}
    other_env = await api.client.beta.environments.create(name="other", config=other_config)
    other_session = await api.client.beta.sessions.create(agent=(await api.agent()).id, environment_id=env_id)

    async def status(credential: str, method: str, path: str, **kw: Any) -> int:
        headers = {"authorization": f"Bearer {credential}"}
        return (await api.http.request(method, path, headers=headers, **kw)).status_code

    work = f"/v1/environments/{env_id}/work"
    assert await status(setup.env_key, "GET", work) == 200
    assert await status(setup.env_key, "GET", f"/v1/sessions/{setup.session_id}") == 200
    assert await status(token, "GET", f"/v1/sessions/{setup.session_id}") == 200
    assert await status(token, "GET", f"/v1/sessions/{setup.session_id}/events") == 200
    # another session, another environment, routes not the worker's, the API-key-only routes
    assert await status(token, "GET", f"/v1/sessions/{other_session.id}") == 403
    assert await status(setup.env_key, "GET", f"/v1/environments/{other_env.id}/work/poll") == 403
    assert await status(token, "GET", f"{work}/poll") == 403
    assert await status(setup.env_key, "GET", "/v1/agents") == 403
    assert await status(setup.env_key, "GET", f"{work}/{item.id}") == 403
    assert await status(setup.env_key, "GET", f"{work}/stats") == 403
    assert await status(token, "POST", f"/v1/sessions/{setup.session_id}/archive") == 403
    assert await status(setup.env_key, "GET", "/v1/memory_stores") == 403  # memory: sessions token only
    # an API key on the worker-only routes
    assert (await api.http.get(f"{work}/poll")).status_code == 403
    assert (await api.http.get(work)).status_code == 403
    assert (await api.http.post(f"{work}/{item.id}/ack")).status_code == 403
    # unknown and revoked credentials
    assert await status("oek-" + "0" * 24 + "." + "x" * 43, "GET", work) == 401
    assert await status("ost-" + "0" * 24 + "." + "x" * 43, "GET", f"/v1/sessions/{setup.session_id}") == 401
    [record] = (await api.http.get(f"/v1/environments/{env_id}/keys")).json()["data"]
    assert "key" not in record and record["status"] == "active"
    assert (await api.http.post(f"/v1/environments/{env_id}/keys/{record['id']}/revoke")).status_code == 200
    assert await status(setup.env_key, "GET", work) == 401


async def test_concurrent_polls_on_two_queues_never_share_an_item(setup: Setup) -> None:
    """Two queue instances on one store (as two control-plane processes have): every item goes to
    exactly one poll."""
    api = setup.api
    agent = await api.agent()
    for _ in range(7):
        await api.client.beta.sessions.create(agent=agent.id, environment_id=setup.env_id)
    queues = [WorkQueue(api.store, utcnow), WorkQueue(api.store, utcnow)]

    async def drain(queue: WorkQueue) -> list[str]:
        got: list[str] = []
        while polled := await queue.poll(
            setup.env_id, block_ms=None, reclaim_older_than_ms=60_000, worker_id=None
        ):
            got.append(polled.item.id)
        return got

    results = await asyncio.gather(*(drain(queues[i % 2]) for i in range(6)))
    handed = [i for r in results for i in r]
    assert len(handed) == 8 and len(set(handed)) == 8
