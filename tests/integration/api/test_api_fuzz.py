"""Fuzzing the HTTP API (hypothesis, fixed budget, derandomized so CI is repeatable).

Arbitrary JSON (huge numbers, control characters, deep nesting, wrong types, unknown and known
field names) posted to the routes that take bodies: with a valid key every answer is a typed 4xx or
a success, never a 500; without one it is always 401. The real app over a real SQLite store, through
ASGI in-process."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from control_plane.api.app import ApiServices, create_app
from control_plane.api.auth import create_api_key
from control_plane.enroll import CertificateAuthority, EnrollmentService
from control_plane.store.sqlite import SqliteStore
from control_plane.tunnel import EdgeGateway, EdgeRegistry
from tests.support.api_app import FakeRunner, utcnow

FUZZ = settings(
    max_examples=150,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

FIELDS = [
    "name", "model", "type", "config", "metadata", "tools", "events", "content", "text", "agent",
    "environment_id", "version", "id", "description", "system", "mcp_servers", "title", "vault_ids",
    "tool_use_id", "result", "source", "data", "media_type", "resources", "url", "limit",
]  # fmt: skip
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
    st.sampled_from(["user.message", "agent", "self_hosted", "text", "claude-opus-4-8", "\x00", "\u202e"]),
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(FIELDS), st.text(max_size=8)), inner, max_size=5),
    ),
    max_leaves=25,
)
BODIES = st.one_of(
    JSON.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=200),  # not JSON at all
    st.integers(min_value=1, max_value=400).map(lambda n: b"[" * n + b"]" * n),  # deep nesting
)


@dataclass
class Api:
    loop: asyncio.AbstractEventLoop
    client: httpx.AsyncClient
    anonymous: httpx.AsyncClient
    paths: list[str]

    def post(self, client: httpx.AsyncClient, path: str, body: bytes) -> httpx.Response:
        headers = {"content-type": "application/json"}
        return self.loop.run_until_complete(client.post(path, content=body, headers=headers))


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    loop = asyncio.new_event_loop()
    tmp: Path = tmp_path_factory.mktemp("fuzz")
    store = SqliteStore(tmp / "control.db")
    loop.run_until_complete(store.__aenter__())
    key, _ = loop.run_until_complete(create_api_key(store, "fuzz", utcnow()))
    registry = EdgeRegistry()
    services = ApiServices(
        store=store,
        enrollment=EnrollmentService(store, CertificateAuthority.load_or_create(tmp / "ca"), clock=utcnow),
        registry=registry,
        gateway=EdgeGateway(registry),
        clock=utcnow,
        tunnel_address=None,
        runner=FakeRunner(store),
    )
    transport = httpx.ASGITransport(app=create_app(services))
    client = httpx.AsyncClient(transport=transport, base_url="http://t", headers={"x-api-key": key})
    anonymous = httpx.AsyncClient(transport=transport, base_url="http://t")

    async def ids() -> tuple[str, str, str]:
        agent = await client.post("/v1/agents", json={"name": "a", "model": "claude-opus-4-8"})
        env = await client.post("/v1/environments", json={"name": "e", "config": {"type": "self_hosted"}})
        session = await client.post(
            "/v1/sessions", json={"agent": agent.json()["id"], "environment_id": env.json()["id"]}
        )
        return agent.json()["id"], env.json()["id"], session.json()["id"]

    agent_id, env_id, session_id = loop.run_until_complete(ids())
    paths = [
        "/v1/agents",
        f"/v1/agents/{agent_id}",
        "/v1/environments",
        f"/v1/environments/{env_id}",
        f"/v1/environments/{env_id}/enrollment_tokens",
        "/v1/sessions",
        f"/v1/sessions/{session_id}",
        f"/v1/sessions/{session_id}/events",
        "/v1/vaults",
        "/v1/sandboxes/exec",
    ]
    try:
        yield Api(loop, client, anonymous, paths)
    finally:
        loop.run_until_complete(client.aclose())
        loop.run_until_complete(anonymous.aclose())
        loop.run_until_complete(store.__aexit__(None, None, None))
        loop.close()


@FUZZ
@given(st.integers(min_value=0, max_value=9), BODIES)
def test_no_body_makes_the_api_fail_with_a_500(api: Api, which: int, body: bytes) -> None:
    path = api.paths[which]
    response = api.post(api.client, path, body)
    assert response.status_code < 500 or response.status_code == 503, (path, body[:200], response.text)
    error: Any = response.json()
    if response.status_code >= 400:
        assert error["type"] == "error" and isinstance(error["error"]["message"], str)
    anonymous = api.post(api.anonymous, path, body)
    assert anonymous.status_code == 401
