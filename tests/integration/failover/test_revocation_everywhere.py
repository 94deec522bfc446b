"""Revocation reaches every control-plane process on the store: an edge revoked through process A
loses its tunnel to process B within ``edge_recheck_interval_s`` (2 s by default, untouched here),
and takes the refusal as final."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from control_plane.server import ControlPlane
from control_plane.store.base import EdgeRecord
from control_plane.tunnel.recheck import refusal_reason
from edge_agent.connection.link import LinkState
from edge_agent.identity import Identity
from tests.support import eventually
from tests.support.edge_link import api_client, connected_edges, make_dialer, running_link
from tests.support.edge_link import no_ambient_proxy as no_ambient_proxy

pytestmark = pytest.mark.usefixtures("no_ambient_proxy")

NOW = datetime(2026, 12, 3, tzinfo=UTC)


def _edge(**changes: object) -> EdgeRecord:
    record = EdgeRecord(
        id="edge_1",
        environment_id="env_1",
        name="e",
        cert_serial="01",
        cert_fingerprint="f" * 64,
        created_at=NOW - timedelta(days=10),
        cert_not_after=NOW + timedelta(days=1),
    )
    return replace(record, **changes)  # type: ignore[arg-type]


def test_why_a_live_tunnel_is_cut() -> None:
    assert refusal_reason(_edge(), NOW) is None
    assert refusal_reason(None, NOW) == "unknown_edge"
    assert refusal_reason(_edge(revoked_at=NOW), NOW) == "revoked"
    assert refusal_reason(_edge(cert_not_after=NOW), NOW) == "expired"
    # Renewed: the previous certificate still good while the new one is not used yet is fine.
    renewed = _edge(
        cert_not_after=NOW - timedelta(seconds=1), previous_cert_not_after=NOW + timedelta(hours=1)
    )
    assert refusal_reason(renewed, NOW) is None


@pytest.mark.parametrize("transport", ["grpc", "websocket"])
async def test_revoking_through_one_process_cuts_the_tunnel_on_another(
    pair: tuple[ControlPlane, ControlPlane], enrolled: tuple[str, Identity], tmp_path: Path, transport: str
) -> None:
    a, b = pair
    assert b.config.edge_recheck_interval_s == 2.0  # the shipped default
    _, identity = enrolled
    dialer = make_dialer(
        identity, tmp_path / "edge", transport, tunnel_address=b.tunnel_address, control_plane_url=b.http_url
    )
    async with running_link(identity, dialer) as link:
        await eventually(lambda: _holds(b, identity.edge_id), what="the edge on process B")
        async with api_client(a) as api:
            r = await api.post(f"/v1/edges/{identity.edge_id}/revoke")
        assert r.status_code == 200, r.text
        revoked_at = time.monotonic()
        await eventually(lambda: _gone(b, identity.edge_id), timeout_s=15, what="B to cut the tunnel")
        took = time.monotonic() - revoked_at
        print(f"\n{transport}: revoked through A, tunnel on B cut after {took:.2f} s")
        await eventually(lambda: _refused(link.state), what="the edge to stop for good")
        assert await connected_edges(a) == []


async def _holds(cp: ControlPlane, edge_id: str) -> bool:
    return edge_id in await connected_edges(cp)


async def _gone(cp: ControlPlane, edge_id: str) -> bool:
    return edge_id not in await connected_edges(cp)


async def _refused(state: LinkState) -> bool:
    return state is LinkState.REFUSED
