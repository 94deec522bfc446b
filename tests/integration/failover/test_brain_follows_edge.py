"""The brain follows the hands' tunnel per session, not per environment: two control planes on one
store, one environment whose two edges are split between them (edge 1 on A, edge 2 on B). A
session whose sandbox is on edge 2 is run by B, whichever process the user's message reached, and
the other way round; each process answers with its own model server, so the answer says who ran
the turn. No Docker: the edges are the real ``Dialer`` + ``Link`` with a fake handler."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from control_plane.config import ControlPlaneConfig
from control_plane.harness import HarnessConfig
from control_plane.server import ControlPlane
from edge_agent.connection import Dialer
from edge_agent.enroll import register
from edge_agent.identity import Identity
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


class Named:
    """A model that says which control plane asked it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.requests = 0

    def __call__(self, request: Mapping[str, Any]) -> Turn:
        self.requests += 1
        return Turn.text(f"answered by {self.name}")


def dialer_to(cp: ControlPlane, identity: Identity, state_dir: Path) -> Dialer:
    return make_dialer(
        identity,
        state_dir,
        "grpc",
        tunnel_address=cp.tunnel_address,
        control_plane_url=cp.http_url,
        backoff_initial_s=0.2,
        backoff_max_s=60.0,
        connect_timeout_s=10.0,
    )


async def test_each_session_runs_where_its_sandbox_edge_is_connected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "unused")
    model_a, model_b = Named("A"), Named("B")
    async with AsyncExitStack() as stack:
        server_a = await stack.enter_async_context(LocalModelServer(model_a))
        server_b = await stack.enter_async_context(LocalModelServer(model_b))

        def config(model_url: str) -> ControlPlaneConfig:
            return control_plane_config(  # the same data_dir: one store, one CA, one admin key
                tmp_path,
                drain_grace_s=30.0,
                model_base_url=model_url,
                harness=HarnessConfig(follow_tunnels=True, lease_scan_interval_s=0.2, lease_ttl_s=3),
            )

        a = await stack.enter_async_context(ControlPlane(config(server_a.base_url)))
        b = await stack.enter_async_context(ControlPlane(config(server_b.base_url)))
        http_a = await stack.enter_async_context(api_client(a))
        http_b = await stack.enter_async_context(api_client(b))

        r = await http_a.post("/v1/environments", json={"name": "split", "config": {"type": "self_hosted"}})
        environment = r.json()["id"]
        identities = []
        for i in (1, 2):
            r = await http_a.post(f"/v1/environments/{environment}/enrollment_tokens", json={})
            token = r.json()
            identities.append(
                await register(
                    a.http_url,
                    token["token"],
                    tmp_path / f"edge{i}",
                    name=f"edge-{i}",
                    ca_fingerprint=token["ca_fingerprint"],
                )
            )
        edge1, edge2 = identities
        await stack.enter_async_context(running_link(edge1, dialer_to(a, edge1, tmp_path / "edge1")))
        await stack.enter_async_context(running_link(edge2, dialer_to(b, edge2, tmp_path / "edge2")))

        async def split() -> bool:
            return await connected_edges(a) == [edge1.edge_id] and await connected_edges(b) == [edge2.edge_id]

        await eventually(split, 10, "edge 1 on A and edge 2 on B")
        assert a.store is not None and b.store is not None

        async def presence_known() -> bool:
            assert a.store is not None
            holders = [await a.store.edge_holder(e.edge_id, datetime.now(UTC)) for e in identities]
            return holders == [a.id, b.id]

        await eventually(presence_known, 5, "both processes' edges in the store")

        r = await http_a.post("/v1/agents", json={"name": "where", "model": "claude-sonnet-5-5"})
        agent = r.json()["id"]

        async def session_on(edge: Identity) -> str:
            r = await http_a.post("/v1/sessions", json={"agent": agent, "environment_id": environment})
            session_id = str(r.json()["id"])
            assert a.store is not None
            await a.store.set_sandbox_edge(session_id, edge.edge_id)  # its workspace is there
            return session_id

        async def answer(http: httpx.AsyncClient, session_id: str) -> str:
            message = {"type": "user.message", "content": [{"type": "text", "text": "who runs me?"}]}
            r = await http.post(f"/v1/sessions/{session_id}/events", json={"events": [message]})
            assert r.status_code == 200, r.text
            found: list[str] = []

            async def answered() -> bool:
                r = await http.get(f"/v1/sessions/{session_id}/events")
                found[:] = [
                    block["text"]
                    for e in r.json()["data"]
                    if e["type"] == "agent.message"
                    for block in e["content"]
                ]
                return bool(found)

            await eventually(answered, 15, f"an answer in {session_id}")
            return found[0]

        # The message reaches A, but the session's sandbox edge is on B: B runs it.
        on_edge2 = await session_on(edge2)
        assert await answer(http_a, on_edge2) == "answered by B"
        # And the other way round.
        on_edge1 = await session_on(edge1)
        assert await answer(http_b, on_edge1) == "answered by A"
        assert (model_a.requests, model_b.requests) == (1, 1)
        assert await a.store.wake_requests() == []
