"""API keys as a resource, through the real API with the official ``anthropic`` SDK: scopes,
environment-scoped keys, revocation and expiry; the key's id in the log lines of its requests."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import anthropic
import httpx
import pytest

from control_plane.api.auth import create_api_key
from control_plane.api.caller import KeyScope
from outpost_wire.logfmt import ContextFilter, PlainFormatter
from tests.support.api_app import Api, utcnow

MESSAGE = [{"type": "user.message", "content": [{"type": "text", "text": "hi"}]}]


@asynccontextmanager
async def sdk(api: Api, key: str) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with anthropic.AsyncAnthropic(base_url=api.url, api_key=key, max_retries=0, timeout=20) as client:
        yield client


async def new_key(api: Api, **body: Any) -> dict[str, Any]:
    response = await api.http.post("/v1/api_keys", json={"name": "test key", **body})
    assert response.status_code == 200, response.text
    created: dict[str, Any] = response.json()
    return created


async def test_environment_scoped_key_sees_only_its_environment(api: Api) -> None:
    env_a, env_b = await api.environment("a"), await api.environment("b")
    agent = (await api.agent()).id
    mine = await api.session(agent=agent, environment_id=env_a)
    theirs = await api.session(agent=agent, environment_id=env_b)
    created = await new_key(api, scope="read_write", environment_ids=[env_a])
    assert created["key"].startswith("sk-outpost-")
    assert created["environment_ids"] == [env_a] and created["scope"] == "read_write"

    async with sdk(api, created["key"]) as client:
        listed = [s.id async for s in client.beta.sessions.list()]
        assert listed == [mine.id]
        assert (await client.beta.sessions.retrieve(mine.id)).id == mine.id
        # another environment's session: a 404 exactly like an unknown id, on every route
        for call in (
            client.beta.sessions.retrieve(theirs.id),
            client.beta.sessions.update(theirs.id, title="mine now"),
            client.beta.sessions.delete(theirs.id),
            client.beta.sessions.archive(theirs.id),
            client.beta.sessions.events.send(theirs.id, events=MESSAGE),  # type: ignore[arg-type]
        ):
            with pytest.raises(anthropic.NotFoundError) as caught:
                await call
            assert caught.value.type == "not_found_error"  # type: ignore[attr-defined]
            assert "not found" in str(caught.value)
        with pytest.raises(anthropic.NotFoundError):
            [e async for e in client.beta.sessions.events.list(theirs.id)]
        with pytest.raises(anthropic.NotFoundError):
            [r async for r in client.beta.sessions.resources.list(theirs.id)]
        # a bad query is a 400 before the session is looked up: the same answer as for its own
        # session, so neither reveals whether the other environment's session exists
        for sid in (mine.id, theirs.id):
            with pytest.raises(anthropic.BadRequestError, match="limit"):
                await client.beta.sessions.resources.list(sid, limit=0)
        with pytest.raises(anthropic.NotFoundError):
            async with await client.beta.sessions.events.stream(theirs.id):
                pass
        # environments: only its own, and no new ones
        assert [e.id async for e in client.beta.environments.list()] == [env_a]
        with pytest.raises(anthropic.NotFoundError):
            await client.beta.environments.retrieve(env_b)
        with pytest.raises(anthropic.PermissionDeniedError) as denied:
            await client.beta.environments.create(name="c", config={"type": "self_hosted"})
        assert denied.value.type == "permission_error"  # type: ignore[attr-defined]
        # a session in its own environment, yes; in another, the environment is unknown to it
        made = await client.beta.sessions.create(agent=agent, environment_id=env_a)
        with pytest.raises(anthropic.NotFoundError):
            await client.beta.sessions.create(agent=agent, environment_id=env_b)
        # agents: readable, not writable by an environment-scoped key
        assert (await client.beta.agents.retrieve(agent)).id == agent
        with pytest.raises(anthropic.PermissionDeniedError):
            await client.beta.agents.create(name="x", model="claude-opus-4-8")
    assert (await api.client.beta.sessions.retrieve(theirs.id)).title is None  # untouched
    assert {s.id async for s in api.client.beta.sessions.list()} == {mine.id, theirs.id, made.id}


async def test_scoped_key_fleet_routes(api: Api) -> None:
    env_a, env_b = await api.environment("a"), await api.environment("b")
    token_b = (await api.http.post(f"/v1/environments/{env_b}/enrollment_tokens")).json()
    created = await new_key(api, scope="read_write", environment_ids=[env_a])
    headers = {"authorization": f"Bearer {created['key']}"}
    async with httpx.AsyncClient(base_url=api.url, headers=headers, timeout=20) as http:
        own = await http.post(f"/v1/environments/{env_a}/enrollment_tokens")
        assert own.status_code == 200, own.text
        other = await http.post(f"/v1/environments/{env_b}/enrollment_tokens")
        assert other.status_code == 404
        listed = (await http.get("/v1/enrollment_tokens")).json()["data"]
        assert [t["id"] for t in listed] == [own.json()["id"]]
        assert (await http.get("/v1/enrollment_tokens", params={"environment_id": env_b})).json()[
            "data"
        ] == []
        assert (await http.post(f"/v1/enrollment_tokens/{token_b['id']}/revoke")).status_code == 404
        assert (await http.get("/v1/edges")).json()["data"] == []
        exec_b = {"environment_id": env_b, "session_id": "s1", "tool": "bash", "input": {"command": "id"}}
        assert (await http.post("/v1/sandboxes/exec", json=exec_b)).status_code == 404
        destroy_b = {"environment_id": env_b, "session_id": "s1"}
        assert (await http.post("/v1/sandboxes/destroy", json=destroy_b)).status_code == 404
        # the keys themselves and /metrics: admin only
        assert (await http.get("/v1/api_keys")).status_code == 403
        assert (
            await http.post("/v1/api_keys", json={"name": "escalate", "scope": "admin"})
        ).status_code == 403
    token_list = (await api.http.get("/v1/enrollment_tokens")).json()["data"]
    assert {t["id"] for t in token_list} == {token_b["id"], own.json()["id"]}  # the admin sees both


async def test_read_only_key_gets_403_on_writes(api: Api) -> None:
    session = await api.session()
    created = await new_key(api, scope="read_only")
    async with sdk(api, created["key"]) as client:
        assert (await client.beta.sessions.retrieve(session.id)).id == session.id
        with pytest.raises(anthropic.PermissionDeniedError) as caught:
            await client.beta.sessions.create(agent=session.agent.id, environment_id=session.environment_id)
        assert caught.value.type == "permission_error"  # type: ignore[attr-defined]
        assert "read_only" in str(caught.value)
        with pytest.raises(anthropic.PermissionDeniedError):
            await client.beta.sessions.events.send(session.id, events=MESSAGE)  # type: ignore[arg-type]
        with pytest.raises(anthropic.PermissionDeniedError):
            await client.beta.sessions.delete(session.id)
    # refused before the body is read: a malformed body still gets the 403, not a 400
    headers = {"authorization": f"Bearer {created['key']}", "content-type": "application/json"}
    response = await api.http.post("/v1/environments", content=b"{bad", headers=headers)
    assert response.status_code == 403
    assert response.json()["error"]["type"] == "permission_error"


async def test_revoke_works_at_once(api: Api) -> None:
    created = await new_key(api, scope="read_write")
    async with sdk(api, created["key"]) as client:
        await client.beta.agents.list()
        revoked = (await api.http.post(f"/v1/api_keys/{created['id']}/revoke")).json()
        assert revoked["status"] == "revoked" and revoked["revoked_at"]
        with pytest.raises(anthropic.AuthenticationError) as caught:
            await client.beta.agents.list()
        assert caught.value.status_code == 401
        assert "revoked" in str(caught.value)


async def test_open_stream_ends_after_revocation(api: Api) -> None:
    """A stream opened before the revocation ends by itself at its next frame (the fixture pings
    every 0.2 s; the key is re-read at most every 5 s)."""
    session = await api.session()
    created = await new_key(api, scope="read_write")
    async with sdk(api, created["key"]) as client:
        stream = await client.beta.sessions.events.stream(session.id)
        async with stream:
            await api.http.post(f"/v1/api_keys/{created['id']}/revoke")

            async def drain() -> None:
                async for _ in stream:
                    pass

            await asyncio.wait_for(drain(), timeout=60)  # ends: no hang


async def test_expired_key_is_401_with_a_clear_message(api: Api) -> None:
    key, record = await create_api_key(
        api.store, "short", utcnow() - timedelta(hours=2), scope=KeyScope.READ_WRITE,
        expires_at=utcnow() - timedelta(seconds=1),
    )  # fmt: skip
    async with sdk(api, key) as client:
        with pytest.raises(anthropic.AuthenticationError) as caught:
            await client.beta.agents.list()
    assert f"API key {record.id} expired at" in str(caught.value)
    listed = {k["id"]: k for k in (await api.http.get("/v1/api_keys")).json()["data"]}
    assert listed[record.id]["status"] == "expired"


async def test_create_list_never_shows_the_secret(api: Api) -> None:
    created = await new_key(api, scope="read_only", ttl_s=3600)
    assert created["expires_at"] and created["status"] == "active"
    listed = (await api.http.get("/v1/api_keys")).json()
    text = str(listed)
    assert created["key"] not in text and "key_hash" not in text
    mine = next(k for k in listed["data"] if k["id"] == created["id"])
    assert set(mine) == {
        "type", "id", "name", "scope", "environment_ids", "status",
        "created_at", "expires_at", "last_used_at", "revoked_at",
    }  # fmt: skip
    async with sdk(api, created["key"]) as client:
        await client.beta.agents.list()
    used = (await api.http.get(f"/v1/api_keys/{created['id']}")).json()
    assert used["last_used_at"] is not None


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"scope": "admin", "environment_ids": ["env_x"]}, "environment_ids"),
        ({"scope": "read_only", "ttl_s": 60, "expires_at": "2099-01-01T00:00:00Z"}, "expires_at"),
        ({"scope": "read_only", "expires_at": "2001-01-01T00:00:00Z"}, "expires_at"),
        ({"scope": "superuser"}, None),
        ({"scope": "read_only", "ttl_s": 0}, None),
    ],
)
async def test_create_refuses_bad_requests(api: Api, body: dict[str, Any], param: str | None) -> None:
    response = await api.http.post("/v1/api_keys", json={"name": "bad", **body})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["type"] == "invalid_request_error"


async def test_unknown_environment_is_404(api: Api) -> None:
    response = await api.http.post("/v1/api_keys", json={"name": "x", "environment_ids": ["env_nope"]})
    assert response.status_code == 404


async def test_last_admin_key_cannot_be_revoked(api: Api) -> None:
    admin_id = next(k["id"] for k in (await api.http.get("/v1/api_keys")).json()["data"])
    response = await api.http.post(f"/v1/api_keys/{admin_id}/revoke")
    assert response.status_code == 409
    assert "rotate" in response.json()["error"]["message"]
    second = await new_key(api, scope="admin")
    assert (await api.http.post(f"/v1/api_keys/{admin_id}/revoke")).status_code == 200
    async with sdk(api, second["key"]) as client:
        await client.beta.agents.list()


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.addFilter(ContextFilter())  # copies the bound ids onto each record, as in production
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


async def test_key_id_in_log_lines(api: Api) -> None:
    """What a request logs carries the key's id (bound like the request id), never the key."""
    created = await new_key(api, scope="read_only")
    handler = _Collect()
    logger = logging.getLogger("control_plane.api.auth")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        async with sdk(api, created["key"]) as client:
            with pytest.raises(anthropic.PermissionDeniedError):
                await client.beta.agents.create(name="x", model="claude-opus-4-8")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    [refused] = [r for r in handler.records if "read_only" in r.getMessage()]
    assert getattr(refused, "api_key_id", None) == created["id"]
    assert getattr(refused, "request_id", "").startswith("req_")
    assert created["key"] not in PlainFormatter().format(refused)
