"""What an authenticated edge can make the control plane hold: real control plane, real edge links
(``Dialer`` + ``Link``, gRPC on loopback), no sandboxes. Results for request ids nobody sent that
edge are dropped unbuffered (and acked), and a result from an edge that was not asked is ignored."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from pathlib import Path

import httpx
import pytest

from control_plane.server import ControlPlane
from edge_agent.connection import Link
from edge_agent.enroll import register
from edge_agent.identity import Identity
from outpost_wire.errors import ErrorCode
from outpost_wire.frames import Execute, Failure, Outcome, Request
from outpost_wire.results import ImageBlock, TextBlock, ToolResult
from tests.support import eventually
from tests.support.edge_link import (
    api_client,
    make_dialer,
    running_control_plane,
    running_link,
)
from tests.support.edge_link import no_ambient_proxy as no_ambient_proxy

pytestmark = pytest.mark.usefixtures("no_ambient_proxy")

MB = 1_000_000


class Recording:
    """Holds every Execute until ``release`` is set; remembers the requests it got."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.requests: list[Request] = []

    async def handle(self, request: Request) -> Outcome:
        self.requests.append(request)
        await self.release.wait()
        if isinstance(request.op, Execute):
            return ToolResult.text("honest answer")
        return Failure(ErrorCode.INVALID_REQUEST, "only Execute")

    def cancel(self, request_id: str) -> bool:
        return False


async def _environment(api: httpx.AsyncClient) -> str:
    r = await api.post("/v1/environments", json={"name": "limits", "config": {"type": "self_hosted"}})
    assert r.status_code == 200, r.text
    return str(r.json()["id"])


async def _enroll(cp: ControlPlane, api: httpx.AsyncClient, environment: str, state_dir: Path) -> Identity:
    r = await api.post(f"/v1/environments/{environment}/enrollment_tokens", json={})
    token = r.json()
    return await register(
        cp.http_url, token["token"], state_dir, name=state_dir.name, ca_fingerprint=token["ca_fingerprint"]
    )


def _send(link: Link, request_id: str, outcome: Outcome) -> None:
    """Make the edge deliver ``outcome`` for ``request_id``, asked or not."""
    link.session.send_result(request_id, outcome)
    link._wake_writer.set()


async def test_results_for_made_up_request_ids_are_not_buffered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with AsyncExitStack() as stack:
        cp = await stack.enter_async_context(running_control_plane(tmp_path, monkeypatch))
        api = await stack.enter_async_context(api_client(cp))
        identity = await _enroll(cp, api, await _environment(api), tmp_path / "edge")
        link = await stack.enter_async_context(
            running_link(identity, make_dialer(identity, tmp_path / "edge"))
        )
        await eventually(lambda: _true(cp.registry.get(identity.edge_id) is not None), 15, "the edge")
        conn = cp.registry.get(identity.edge_id)
        assert conn is not None

        big = ToolResult((TextBlock("x"), ImageBlock("image/png", b"\x00" * (9 * MB))))  # 3 chunks each
        for n in range(8):
            _send(link, f"req_made_up_{n}", big)
        peak = 0

        async def all_dropped() -> bool:
            nonlocal peak
            peak = max(peak, conn.reassembly_bytes)
            return conn.dropped_result_chunks >= 8 * 3 and not link.session.unacked_results()

        await eventually(all_dropped, 30, "every chunk dropped and every result acked", interval_s=0.001)
        assert peak == 0 and conn.reassembly_bytes == 0  # nothing was ever buffered
        assert cp.registry.get(identity.edge_id) is conn  # the edge stays connected
        assert cp.registry.pending_count == 0


async def test_a_result_from_an_edge_that_was_not_asked_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with AsyncExitStack() as stack:
        cp = await stack.enter_async_context(running_control_plane(tmp_path, monkeypatch))
        api = await stack.enter_async_context(api_client(cp))
        environment = await _environment(api)
        handlers: dict[str, Recording] = {}
        links: dict[str, Link] = {}
        for name in ("edge-a", "edge-b"):
            identity = await _enroll(cp, api, environment, tmp_path / name)
            handlers[identity.edge_id] = Recording()
            dialer = make_dialer(identity, tmp_path / name)
            links[identity.edge_id] = await stack.enter_async_context(
                running_link(identity, dialer, handlers[identity.edge_id])
            )
        await eventually(
            lambda: _true(len(cp.registry.for_environment(environment)) == 2), 15, "both edges connected"
        )

        call = asyncio.create_task(
            cp.gateway.execute("sesn_x", environment, "bash", {"command": "true"}, idempotency_key="k1")
        )
        await eventually(lambda: _true(any(h.requests for h in handlers.values())), 15, "the request")
        asked = next(edge for edge, h in handlers.items() if h.requests)
        other = next(edge for edge in handlers if edge != asked)
        request_id = handlers[asked].requests[0].request_id

        other_conn = cp.registry.get(other)
        assert other_conn is not None
        _send(links[other], request_id, ToolResult.text("forged answer"))
        await eventually(lambda: _true(other_conn.dropped_result_chunks == 1), 15, "the forged result")
        await eventually(lambda: _true(not links[other].session.unacked_results()), 15, "its ack")
        assert not call.done()  # the forged answer settled nothing

        handlers[asked].release.set()
        result = await asyncio.wait_for(call, 30)
        assert result == ToolResult.text("honest answer")
        assert cp.registry.get(other) is other_conn  # dropped, not a reason to cut the link


async def _true(value: bool) -> bool:
    return value
