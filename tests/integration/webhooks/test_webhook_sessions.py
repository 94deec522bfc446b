"""Webhooks of a real session run: a real control plane (SQLite, the harness, the vault), the local
scripted Messages server, the official SDK, and a real receiver on loopback.

Endpoints are managed through Outpost's own API (``/v1/outpost/webhook_endpoints``): admin and
unscoped read_write keys change them, environment-scoped keys see only their environment's, the
secret is shown at create and rotate only. A session created, run, archived and deleted gives the
``session.*`` webhooks, each signed so that ``client.beta.webhooks.unwrap`` accepts it and parsed
completely by the SDK's models. A second control plane on the same store does not send them twice.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from control_plane.server import ControlPlane
from scripted_model import LocalModelServer, Turn
from tests.support import eventually
from tests.support.api_app import assert_complete
from tests.support.edge_link import control_plane_config
from tests.support.edge_link import no_ambient_proxy as no_ambient_proxy
from tests.support.webhook_receiver import Receiver

pytestmark = pytest.mark.usefixtures("no_ambient_proxy")

ENDPOINTS = "/v1/outpost/webhook_endpoints"
# The receiver is on loopback over plain HTTP: both allowed as an operator would for a local
# receiver; quick polls so that retries of other processes' writes are seen at once (default 1 s).
SETTINGS: dict[str, Any] = {
    "outbound_allow_networks": ["127.0.0.0/8"],
    "webhooks": {"allow_http_loopback": True, "poll_interval_s": 0.05},
}


@asynccontextmanager
async def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[ControlPlane, Any]]:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "unused")
    async with LocalModelServer(lambda request: Turn.text("Done.")) as model:
        settings = control_plane_config(tmp_path, model_base_url=model.base_url, **SETTINGS)
        async with ControlPlane(settings) as cp:
            yield cp, model


def http(cp: ControlPlane, key: str | None = None) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=cp.http_url, headers={"authorization": f"Bearer {key or cp.admin_key()}"}, timeout=30
    )


def sdk(cp: ControlPlane) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        base_url=cp.http_url, api_key=cp.admin_key(), max_retries=0, _strict_response_validation=True
    )


async def new_key(admin: httpx.AsyncClient, scope: str, environments: list[str] | None = None) -> str:
    body: dict[str, Any] = {"name": scope, "scope": scope}
    if environments is not None:
        body["environment_ids"] = environments
    reply = await admin.post("/v1/api_keys", json=body)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["key"])


async def test_a_session_run_gives_signed_session_webhooks_that_unwrap_accepts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with (
        Receiver() as receiver,
        stack(tmp_path, monkeypatch) as (cp, _),
        sdk(cp) as client,
        http(cp) as admin,
    ):
        environment = await client.beta.environments.create(name="pool")
        agent = await client.beta.agents.create(name="writer", model="claude-webhooks-test")
        made = await admin.post(ENDPOINTS, json={"url": receiver.url, "environment_id": environment.id})
        assert made.status_code == 200, made.text
        endpoint = made.json()
        secret = endpoint.pop("secret")
        assert endpoint["enabled"] and endpoint["environment_id"] == environment.id
        shown = (await admin.get(f"{ENDPOINTS}/{endpoint['id']}")).json()
        assert "secret" not in shown and shown == endpoint

        session = await client.beta.sessions.create(agent=agent.id, environment_id=environment.id)
        await client.beta.sessions.events.send(
            session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "Hi"}]}]
        )
        await eventually(lambda: "session.idled" in receiver.types(), 60.0, "session.idled")
        await client.beta.sessions.archive(session.id)
        # (a log event is derived after it is appended; deleting the session deletes its log)
        await eventually(lambda: "session.status_terminated" in receiver.types(), 60.0, "terminated")
        await client.beta.sessions.delete(session.id)
        wanted = {
            "session.created",
            "session.running",
            "session.status_run_started",
            "session.idled",
            "session.status_idled",
            "session.archived",
            "session.status_terminated",
            "session.deleted",
        }
        await eventually(
            lambda: wanted <= set(receiver.types()), 60.0, lambda: f"all of {wanted}: {receiver.types()}"
        )

        events = receiver.verified(secret)
        for event, delivery in zip(events, receiver.deliveries, strict=True):
            assert_complete(event)
            assert_complete(event.data)
            assert event.id == delivery.webhook_id and event.type == "event"
            assert event.data.id == session.id
            assert set(json.loads(delivery.body)["data"]) == {"type", "id", "organization_id", "workspace_id"}
        types = [e.data.type for e in events]
        assert len(types) == len(set(types))  # each once
        assert types.index("session.created") < types.index("session.running") < types.index("session.idled")


async def test_who_may_manage_endpoints_and_what_scoped_keys_see(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with stack(tmp_path, monkeypatch) as (cp, _), sdk(cp) as client, http(cp) as admin:
        mine = (await client.beta.environments.create(name="mine")).id
        theirs = (await client.beta.environments.create(name="theirs")).id
        url = "https://hooks.example.com/in"
        a = (await admin.post(ENDPOINTS, json={"url": url, "environment_id": mine})).json()
        b = (await admin.post(ENDPOINTS, json={"url": url, "environment_id": theirs})).json()
        c = (await admin.post(ENDPOINTS, json={"url": url, "event_types": ["session.idled"]})).json()
        scoped = await new_key(admin, "read_write", [mine])
        read_only = await new_key(admin, "read_only")
        writer = await new_key(admin, "read_write")
        async with http(cp, scoped) as s, http(cp, read_only) as r, http(cp, writer) as w:
            listed = (await s.get(ENDPOINTS)).json()
            assert [e["id"] for e in listed["data"]] == [a["id"]]
            assert (await s.get(f"{ENDPOINTS}/{b['id']}")).status_code == 404
            assert (await s.get(f"{ENDPOINTS}/{c['id']}")).status_code == 404
            for client_, expected in ((s, 403), (r, 403)):
                denied = await client_.post(ENDPOINTS, json={"url": url, "environment_id": mine})
                assert denied.status_code == expected, denied.text
                assert denied.json()["error"]["type"] == "permission_error"
                assert (await client_.delete(f"{ENDPOINTS}/{a['id']}")).status_code == expected
            assert len((await r.get(ENDPOINTS)).json()["data"]) == 3  # unscoped read_only reads all
            changed = await w.post(f"{ENDPOINTS}/{a['id']}", json={"enabled": False, "event_types": []})
            assert changed.status_code == 200 and changed.json()["enabled"] is False
            assert "secret" not in changed.json()
            rotated = await w.post(f"{ENDPOINTS}/{a['id']}/rotate_secret")
            assert rotated.json()["secret"].startswith("whsec_") and rotated.json()["secret"] != a["secret"]
            bad = await w.post(ENDPOINTS, json={"url": "http://hooks.example.com/"})
            assert bad.status_code == 400 and "https" in bad.json()["error"]["message"]
            extra = await w.post(ENDPOINTS, json={"url": url, "secret": "whsec_mine"})
            assert extra.status_code == 400  # unknown fields refused
            gone = await w.delete(f"{ENDPOINTS}/{b['id']}")
            assert gone.json() == {"type": "webhook_endpoint_deleted", "id": b["id"]}
            assert (await w.get(f"{ENDPOINTS}/{b['id']}")).status_code == 404
        unauthenticated = await httpx.AsyncClient(base_url=cp.http_url).get(ENDPOINTS)
        assert unauthenticated.status_code == 401
        still = await admin.get("/v1/webhooks")  # the SDK-shaped path stays the typed 404
        assert (
            still.status_code == 404 and still.json()["error"]["details"]["error_code"] == "unsupported_path"
        )


async def test_two_control_planes_on_one_store_send_each_session_webhook_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Receiver() as receiver, stack(tmp_path, monkeypatch) as (cp, model):
        settings = control_plane_config(tmp_path, model_base_url=model.base_url, **SETTINGS)
        async with ControlPlane(settings) as second, sdk(cp) as client, http(second) as admin:
            environment = await client.beta.environments.create(name="pool")
            agent = await client.beta.agents.create(name="writer", model="claude-webhooks-test")
            made = (await admin.post(ENDPOINTS, json={"url": receiver.url})).json()
            session = await client.beta.sessions.create(agent=agent.id, environment_id=environment.id)
            for turn, text in enumerate(("One", "Two"), start=1):
                await client.beta.sessions.events.send(
                    session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": text}]}]
                )
                await eventually(
                    lambda turn=turn: receiver.types().count("session.idled") >= turn,  # type: ignore[misc]
                    60.0,
                    "the turn's idle webhook",
                )
            await eventually(lambda: receiver.types().count("session.status_idled") == 2, 30.0, "idles")
        ids = [d.webhook_id for d in receiver.deliveries]
        assert len(ids) == len(set(ids)), receiver.types()  # none sent twice
        assert sorted(receiver.types()) == sorted(
            ["session.created"]
            + ["session.running", "session.status_run_started"] * 2
            + ["session.idled", "session.status_idled"] * 2
        )
        receiver.verified(made["secret"])


async def test_a_deployment_run_gives_deployment_run_webhooks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deployments' run listener is wired to the outbox: a manual run that starts a session
    gives ``deployment_run.started`` then ``.succeeded``; one that cannot start (its environment
    archived) gives ``.started`` then ``.failed``; each about the run, verified by ``unwrap``."""
    async with (
        Receiver() as receiver,
        stack(tmp_path, monkeypatch) as (cp, _),
        sdk(cp) as client,
        http(cp) as admin,
    ):
        environment = await client.beta.environments.create(name="pool")
        agent = await client.beta.agents.create(name="nightly", model="claude-webhooks-test")
        made = await admin.post(
            ENDPOINTS,
            json={
                "url": receiver.url,
                "event_types": [
                    "deployment_run.started",
                    "deployment_run.succeeded",
                    "deployment_run.failed",
                ],
            },
        )
        assert made.status_code == 200, made.text
        secret = made.json()["secret"]
        initial = [{"type": "user.message", "content": [{"type": "text", "text": "Report."}]}]
        deployment = await client.beta.deployments.create(
            agent=agent.id, environment_id=environment.id, name="nightly", initial_events=initial
        )
        ok = await client.beta.deployments.run(deployment.id)
        assert ok.session_id is not None
        await eventually(
            lambda: len(receiver.types()) >= 2, 60.0, lambda: f"two webhooks: {receiver.types()}"
        )
        await client.beta.environments.archive(environment.id)
        failed = await client.beta.deployments.run(deployment.id)
        assert failed.error is not None
        await eventually(
            lambda: len(receiver.types()) >= 4, 60.0, lambda: f"four webhooks: {receiver.types()}"
        )

        events = receiver.verified(secret)
        seen = [(event.data.type, event.data.id) for event in events]
        assert sorted(seen) == sorted(
            [  # deliveries of different events may overtake each other
                ("deployment_run.started", ok.id),
                ("deployment_run.succeeded", ok.id),
                ("deployment_run.started", failed.id),
                ("deployment_run.failed", failed.id),
            ]
        )
        for event in events:
            assert_complete(event)
            assert_complete(event.data)
