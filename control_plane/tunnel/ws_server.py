"""The tunnel over WebSocket: the same frames as the gRPC tunnel, one binary message each, on the
HTTP API's port (``GET /v1/tunnel/ws``) for networks where only HTTP(S) gets out.

Authentication is proof of possession (:mod:`outpost_wire.pop`): the upgrade request carries
``Authorization: Outpost-PoP <token>``, a short-lived token signed with the edge's key and holding
its certificate. We verify the signature with the certificate's key, then check the certificate
exactly as the gRPC tunnel does (:meth:`EnrollmentService.authenticate_peer`: issued by our CA, the
edge's current certificate, not revoked, not expired), then the nonce against a replay cache. A
refusal is an HTTP 401 before the upgrade (the WebSocket denial-response extension; servers
without it answer 403), logged with its reason, and touches no other edge.

Where TLS reaches the control plane (``http_tls``: the API port serves TLS, client certificates
requested but optional) and the edge presented a certificate that TLS verified against our CA, the
edge is authenticated by that certificate instead (mTLS, :func:`~control_plane.tunnel.tls_peer.
peer_certificate`), with the same store checks; a token sent as well must still verify and name
the same edge and certificate. Without a client certificate (plain HTTP, TLS terminated in front
of the control plane, or none sent) the token is required, and proves possession end to end.

Close codes after the upgrade: 4001 when the edge's identity is no longer accepted (revoked),
1002 for a protocol error, 1009 for an oversized frame, 1001 when the control plane shuts down or
the tunnel ends otherwise. Message size is capped by the ASGI server (``ws_max_size``), set above
the frame limit so oversized frames get the codec's typed error.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from starlette.responses import PlainTextResponse
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from control_plane.enroll.nonces import SharedNonces
from control_plane.errors import ControlPlaneError
from control_plane.store.base import EdgeRecord
from control_plane.tunnel.connection import EdgeConnection
from control_plane.tunnel.grpc_server import Authenticator
from control_plane.tunnel.pump import pump
from control_plane.tunnel.registry import EdgeRegistry
from control_plane.tunnel.tls_peer import peer_certificate
from outpost_wire.errors import ErrorCode
from outpost_wire.pop import AUTH_SCHEME, PopError, verify_token
from outpost_wire.session import SessionConfig
from outpost_wire.throttle import LogThrottle

__all__ = ["CLOSE_UNAUTHENTICATED", "WS_TUNNEL_PATH", "WsTunnelEndpoint"]

log = logging.getLogger(__name__)
_refusals = LogThrottle(log)  # strangers can cause these: a few lines a minute per kind

WS_TUNNEL_PATH = "/v1/tunnel/ws"
CLOSE_UNAUTHENTICATED = 4001  # private-use close code: the edge's identity was refused

_CLOSE_CODES = {
    ErrorCode.UNAUTHENTICATED: CLOSE_UNAUTHENTICATED,
    ErrorCode.MALFORMED_FRAME: 1002,
    ErrorCode.PROTOCOL_VIOLATION: 1002,
    ErrorCode.FRAME_TOO_LARGE: 1009,
}


class WsTunnelEndpoint:
    """The WebSocket handler of ``/v1/tunnel/ws``: mount :meth:`handle` with Starlette's
    ``add_websocket_route`` (no FastAPI dependency injection: the token is the credential)."""

    def __init__(
        self,
        *,
        registry: EdgeRegistry,
        authenticate: Authenticator,
        audience: str,
        session_config: SessionConfig,
        control_plane_id: str,
        software_version: str,
        clock: Callable[[], float] = time.time,
        nonces: SharedNonces | None = None,
    ) -> None:
        """``nonces``: where accepted tokens' nonces are remembered (``SharedNonces(store)`` so a
        token works once across control-plane processes); default this process only."""
        self._registry = registry
        self._authenticate = authenticate
        self._audience = audience
        self._session_config = session_config
        self._control_plane_id = control_plane_id
        self._software_version = software_version
        self._clock = clock
        self._nonces = nonces or SharedNonces(None)

    async def handle(self, websocket: WebSocket) -> None:
        """Authenticate the upgrade request, then pump the edge's tunnel until it ends."""
        client = websocket.client
        peer = f"ws:{client.host}:{client.port}" if client else "ws:?"
        try:
            edge = await self._authorize(websocket.headers.get("authorization"), peer_certificate(websocket))
        except (PopError, ControlPlaneError) as exc:
            _refusals.warning("ws", "tunnel: WebSocket connection from %s refused: %s", peer, exc)
            await _deny(websocket, f"outpost: unauthenticated: {exc}")
            return
        await websocket.accept()
        conn = EdgeConnection(
            edge,
            listener=self._registry,
            session_config=self._session_config,
            control_plane_id=self._control_plane_id,
            software_version=self._software_version,
            peer=peer,
        )

        async def read() -> bytes | None:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return None
            data = message.get("bytes")
            if data is None:
                conn.close(ErrorCode.PROTOCOL_VIOLATION, "text messages are not frames")
                return None
            assert isinstance(data, bytes)
            return data

        await pump(conn, read=read, write=websocket.send_bytes, broken=(WebSocketDisconnect, OSError))
        if websocket.application_state is WebSocketState.CONNECTED and (
            websocket.client_state is WebSocketState.CONNECTED
        ):
            code = _CLOSE_CODES.get(conn.close_code or ErrorCode.UNAVAILABLE, 1001)
            try:
                await websocket.close(code, conn.close_reason[:120])
            except (RuntimeError, OSError) as exc:  # the edge went away at the same moment
                log.debug("tunnel: closing the WebSocket of edge %s: %s", conn.edge_id, exc)

    async def _authorize(self, header: str | None, tls_cert: bytes | None = None) -> EdgeRecord:
        """The edge of this upgrade request: by its TLS client certificate (``tls_cert``, DER, as
        verified by the TLS layer) if there is one, else by its proof-of-possession token."""
        scheme, _, token = (header or "").partition(" ")
        has_token = scheme.lower() == AUTH_SCHEME.lower() and bool(token.strip())
        if tls_cert is not None:  # mTLS: the certificate is the credential
            edge = await self._authenticate(tls_cert)
            if has_token:  # sent as well: it must hold up, for the same edge and certificate
                now = self._clock()
                claims = verify_token(token.strip(), audience=self._audience, now=now)
                if claims.edge_id != edge.id or claims.cert_der != tls_cert:
                    raise PopError(
                        "edge_mismatch", "the token names another edge than the TLS client certificate"
                    )
                await self._nonces.use(claims, now)
            log.debug("tunnel: edge %s authenticated by its TLS client certificate", edge.id)
            return edge
        if not has_token:
            raise PopError("missing", f"expected an 'Authorization: {AUTH_SCHEME} <token>' header")
        now = self._clock()
        claims = verify_token(token.strip(), audience=self._audience, now=now)
        edge = await self._authenticate(claims.cert_der)
        if edge.id != claims.edge_id:
            raise PopError("edge_mismatch", "the token names another edge than its certificate")
        await self._nonces.use(claims, now)
        return edge


async def _deny(websocket: WebSocket, reason: str) -> None:
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(PlainTextResponse(reason, status_code=401))
    else:
        await websocket.close(1008, reason[:120])
