"""New sessions spread over an environment's edges by live load, no Docker: one real control plane
(SQLite, gRPC mTLS on loopback, port 0) and several enrolled edges, each the real ``Dialer`` +
``Link`` with a handler that keeps one in-memory "sandbox" per session up to its capacity (and
refuses with ``capacity_exhausted`` beyond, as a real edge does) and reports them in its
heartbeats. Calls go through the control plane's own gateway, as the harness makes them."""

from __future__ import annotations

import asyncio
from collections import Counter
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from control_plane.server import ControlPlane
from edge_agent.enroll import register
from edge_agent.identity import Identity
from outpost_wire.errors import ErrorCode, RemoteError
from outpost_wire.frames import Destroy, Destroyed, Execute, Failure, Outcome, Provision, Provisioned, Request
from outpost_wire.results import ToolResult
from tests.support import eventually
from tests.support.edge_link import api_client, make_dialer, running_link
from tests.support.edge_link import cp_fixture as cp_fixture
from tests.support.edge_link import no_ambient_proxy as no_ambient_proxy

pytestmark = pytest.mark.usefixtures("no_ambient_proxy")

EDGES = 4
CAPACITY = 4


class MemorySandboxes:
    """A request handler holding one sandbox per session in memory, ``capacity`` at most."""

    def __init__(self, edge_id: str, capacity: int) -> None:
        self.edge_id = edge_id
        self.capacity = capacity
        self.sessions: set[str] = set()
        self.refused = 0

    async def handle(self, request: Request) -> Outcome:
        if isinstance(request.op, Destroy):
            existed = request.session_id in self.sessions
            self.sessions.discard(request.session_id)
            return Destroyed(existed=existed)
        if request.session_id not in self.sessions:
            if len(self.sessions) >= self.capacity:
                self.refused += 1
                return Failure(ErrorCode.CAPACITY_EXHAUSTED, f"{len(self.sessions)} sandboxes in use")
            self.sessions.add(request.session_id)
        if isinstance(request.op, Provision):
            return Provisioned(sandbox_id=f"sbx_{request.session_id}", image="memory", reused=False)
        assert isinstance(request.op, Execute)
        await asyncio.sleep(0.01)  # a little work, so that calls overlap
        return ToolResult.text(self.edge_id)

    def cancel(self, request_id: str) -> bool:
        return False


async def enroll(cp: ControlPlane, tmp_path: Path, count: int) -> tuple[str, list[Identity]]:
    async with api_client(cp) as api:
        r = await api.post("/v1/environments", json={"name": "spread", "config": {"type": "self_hosted"}})
        assert r.status_code == 200, r.text
        environment = str(r.json()["id"])
        identities = []
        for i in range(count):
            r = await api.post(f"/v1/environments/{environment}/enrollment_tokens", json={})
            token = r.json()
            identities.append(
                await register(
                    cp.http_url,
                    token["token"],
                    tmp_path / f"edge{i}",
                    name=f"edge-{i}",
                    ca_fingerprint=token["ca_fingerprint"],
                )
            )
    return environment, identities


async def test_new_sessions_spread_over_the_edges_and_fail_typed_only_when_all_are_full(
    cp: ControlPlane, tmp_path: Path
) -> None:
    environment, identities = await enroll(cp, tmp_path, EDGES)
    edges = {i.edge_id: MemorySandboxes(i.edge_id, CAPACITY) for i in identities}
    async with AsyncExitStack() as stack:
        for i, identity in enumerate(identities):
            handler = edges[identity.edge_id]
            await stack.enter_async_context(
                running_link(
                    identity,
                    make_dialer(identity, tmp_path / f"edge{i}"),
                    handler,
                    sandbox_capacity=CAPACITY,
                    sandboxes_in_use=lambda h=handler: len(h.sessions),  # type: ignore[misc]
                )
            )

        async def all_connected() -> bool:
            return cp.gateway.edges_connected(environment) == EDGES

        await eventually(all_connected, 20, "every edge connected")

        async def call(session: str) -> str:
            result = await cp.gateway.execute(
                session, environment, "bash", {"command": "true"}, idempotency_key=f"{session}-1"
            )
            return str(result.to_json()[0]["text"])

        # 14 of 16 slots at once: every edge gets 3 or 4, none is refused.
        placed = await asyncio.gather(*(call(f"sess_{n}") for n in range(14)))
        by_edge = Counter(placed)
        assert sorted(by_edge) == sorted(edges) and all(3 <= n <= 4 for n in by_edge.values()), by_edge
        assert sum(h.refused for h in edges.values()) == 0

        # The last two slots, once the edges' heartbeats have reported the first 14.
        async def beats_report_them() -> bool:
            conns = [cp.registry.get(edge_id) for edge_id in edges]
            return all(
                c is not None and c.heartbeat_seq > 0 and c.sandboxes_in_use == len(edges[c.edge_id].sessions)
                for c in conns
            )

        await eventually(beats_report_them, 20, "heartbeats reporting the sandboxes")
        await asyncio.gather(call("sess_14"), call("sess_15"))
        assert [len(h.sessions) for h in edges.values()] == [CAPACITY] * EDGES

        with pytest.raises(RemoteError) as caught:
            await call("sess_16")
        assert caught.value.code is ErrorCode.CAPACITY_EXHAUSTED
        assert f"every edge of environment {environment} is full: {EDGES} edge(s)" in caught.value.message

        # Sessions that end free their edge's room at once, before its next heartbeat.
        first = placed[0]
        gone = [f"sess_{n}" for n in range(14) if placed[n] == first][:2]
        for session in gone:
            assert await cp.gateway.destroy(session, environment) is True
        assert [await call("sess_17"), await call("sess_18")] == [first, first]
        assert sum(h.refused for h in edges.values()) == 0
