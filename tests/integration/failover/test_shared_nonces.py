"""A proof-of-possession token works once across control-plane processes, not once per process:
a token captured in flight (at a TLS-terminating proxy, say) and replayed to another process behind
the same load balancer within its lifetime is refused there too."""

from __future__ import annotations

import time

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from control_plane.server import ControlPlane
from edge_agent.connection.ws_transport import tunnel_ws_url
from edge_agent.identity import Identity
from outpost_wire.pop import AUTH_SCHEME, audience_for, create_token
from tests.support.edge_link import no_ambient_proxy as no_ambient_proxy

pytestmark = pytest.mark.usefixtures("no_ambient_proxy")


async def _status(url: str, token: str) -> tuple[int, str]:
    try:
        async with connect(url, additional_headers={"Authorization": f"{AUTH_SCHEME} {token}"}, proxy=None):
            return 101, ""
    except InvalidStatus as exc:
        return exc.response.status_code, exc.response.body.decode()


async def test_a_token_replayed_to_another_process_is_refused(
    pair: tuple[ControlPlane, ControlPlane], enrolled: tuple[str, Identity]
) -> None:
    a, b = pair
    _, identity = enrolled
    token = create_token(
        key_pem=identity.key_pem,
        cert_pem=identity.cert_pem,
        edge_id=identity.edge_id,
        audience=audience_for(identity.ca_pem),
        now=time.time(),
    )
    assert await _status(tunnel_ws_url(a.http_url), token) == (101, "")
    status, body = await _status(tunnel_ws_url(b.http_url), token)
    assert status == 401 and "replayed" in body and "another control-plane process" in body
    fresh = create_token(
        key_pem=identity.key_pem,
        cert_pem=identity.cert_pem,
        edge_id=identity.edge_id,
        audience=audience_for(identity.ca_pem),
        now=time.time(),
    )
    assert await _status(tunnel_ws_url(b.http_url), fresh) == (101, "")  # a fresh token is fine
