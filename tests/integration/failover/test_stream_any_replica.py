"""A stream opened on any replica sees every event, whichever replica appended it.

Two control planes on one store (SQLite: the store's feed of appends is polled), the official SDK
as the client: the session's turn runs on A (its environment's edge is connected to A), the
client's stream is on B, as behind a load balancer. The stream on B delivers every event of the
turn, in log order, exactly as the log holds them; and a stream on A sees the user's message that
B's API appended."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anthropic
import pytest

from control_plane.server import ControlPlane
from edge_agent.enroll import register
from scripted_model import LocalModelServer, Turn
from tests.support import eventually
from tests.support.edge_link import (
    api_client,
    connected_edges,
    control_plane_config,
    make_dialer,
    running_link,
)
from tests.support.edge_link import no_ambient_proxy as no_ambient_proxy

pytestmark = pytest.mark.usefixtures("no_ambient_proxy")


async def collect_until_idle(stream: Any, timeout_s: float = 30.0) -> list[Any]:
    seen: list[Any] = []

    async def read() -> None:
        async for event in stream:
            seen.append(event)
            if event.type == "session.status_idle":
                return

    await asyncio.wait_for(read(), timeout_s)
    return seen


async def test_a_stream_on_another_replica_sees_every_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "unused")
    async with AsyncExitStack() as stack:
        model = await stack.enter_async_context(LocalModelServer(lambda _: Turn.text("from the brain")))
        config = control_plane_config(tmp_path, model_base_url=model.base_url)  # one store for both
        a = await stack.enter_async_context(ControlPlane(config))
        b = await stack.enter_async_context(ControlPlane(config))
        http = await stack.enter_async_context(api_client(a))
        r = await http.post("/v1/environments", json={"name": "one", "config": {"type": "self_hosted"}})
        environment = r.json()["id"]
        r = await http.post(f"/v1/environments/{environment}/enrollment_tokens", json={})
        token = r.json()
        edge = await register(
            a.http_url, token["token"], tmp_path / "edge", name="edge", ca_fingerprint=token["ca_fingerprint"]
        )
        dialer = make_dialer(
            edge, tmp_path / "edge", "grpc", tunnel_address=a.tunnel_address, control_plane_url=a.http_url
        )
        await stack.enter_async_context(running_link(edge, dialer))

        async def on_a() -> bool:
            return await connected_edges(a) == [edge.edge_id]

        await eventually(on_a, 10, "the edge on A")

        client_a = anthropic.AsyncAnthropic(base_url=a.http_url, api_key=a.admin_key(), max_retries=0)
        client_b = anthropic.AsyncAnthropic(base_url=b.http_url, api_key=b.admin_key(), max_retries=0)
        stack.push_async_callback(client_a.close)
        stack.push_async_callback(client_b.close)
        agent = await client_a.beta.agents.create(name="far", model="claude-sonnet-5-5")
        session = await client_a.beta.sessions.create(agent=agent.id, environment_id=environment)

        for sender, watcher in ((client_a, client_b), (client_b, client_a)):
            stream = await watcher.beta.sessions.events.stream(session.id)
            async with stream:
                await sender.beta.sessions.events.send(
                    session.id,
                    events=[{"type": "user.message", "content": [{"type": "text", "text": "hello"}]}],
                )
                seen = await collect_until_idle(stream)
            types = [e.type for e in seen]
            assert types[0] == "user.message" and "agent.message" in types, types
            listed = [e.id async for e in client_a.beta.sessions.events.list(session.id)]
            # Every event of this turn, in log order, as the log holds it.
            assert [e.id for e in seen] == listed[listed.index(seen[0].id) :]
        assert b.harness is not None and a.harness is not None
        assert b.follower is not None and b.follower.notices > 0  # B's stream was fed by the store
