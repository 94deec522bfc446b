"""WebSocket transport for the edge: the tunnel's frames as binary messages on the control plane's
HTTP(S) port (``/v1/tunnel/ws``), for networks that let only HTTP(S) out.

The upgrade request carries ``Authorization: Outpost-PoP <token>`` (:mod:`outpost_wire.pop`): a
token valid for 30 s, signed with the edge's key, holding its certificate, for this control
plane's CA. A fresh token is made for every connection. Through an HTTP proxy the connection is a
``CONNECT`` tunnel (websockets' own proxy client; credentials from the proxy URL go out as
``Proxy-Authorization: Basic``). Over ``wss://`` the server certificate is checked against the
system's trust store plus the control plane's CA, and the edge presents its client certificate
(from its identity files): where TLS reaches the control plane (``http_tls``) it authenticates the
edge by that certificate (mTLS); where TLS ends at a proxy in front of it, the token does.

Keepalive is explicit: a WebSocket ping every ``ping_interval_s``, the link is dropped when a pong
is ``ping_timeout_s`` late. The message cap matches the gRPC transport's.
"""

from __future__ import annotations

import logging
import ssl
import time
from urllib.parse import urlsplit, urlunsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import (
    ConnectionClosed,
    ConnectionClosedOK,
    InvalidHandshake,
    InvalidProxyStatus,
    InvalidStatus,
    InvalidURI,
    ProxyError,
)

from edge_agent.connection.proxy import ProxyConfig
from edge_agent.connection.transport import TransportError
from edge_agent.identity import Identity
from outpost_wire.channel import grpc_message_limit
from outpost_wire.pop import AUTH_SCHEME, audience_for, create_token
from outpost_wire.version import SOFTWARE_VERSION

__all__ = ["WS_TUNNEL_PATH", "WsTransport", "connect_ws", "tls_client_context", "tunnel_ws_url"]

log = logging.getLogger(__name__)

WS_TUNNEL_PATH = "/v1/tunnel/ws"  # kept in step with control_plane.tunnel.ws_server by hand
_CLOSE_UNAUTHENTICATED = 4001  # control_plane.tunnel.ws_server.CLOSE_UNAUTHENTICATED


def tunnel_ws_url(http_url: str) -> str:
    """The tunnel's WebSocket URL under the control plane's HTTP base URL
    (``https://cp.example.com/outpost`` -> ``wss://cp.example.com/outpost/v1/tunnel/ws``)."""
    parts = urlsplit(http_url)
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme)
    if scheme is None or not parts.hostname:
        raise TransportError(f"control plane URL {http_url!r} is not an http(s):// URL")
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") + WS_TUNNEL_PATH, "", ""))


class WsTransport:
    """A :class:`~edge_agent.connection.transport.Transport` over one WebSocket connection."""

    def __init__(self, connection: ClientConnection) -> None:
        self._connection = connection

    async def send(self, data: bytes) -> None:
        try:
            await self._connection.send(data)
        except ConnectionClosed as exc:
            raise _closed(exc) from None

    async def receive(self) -> bytes | None:
        try:
            message = await self._connection.recv()
        except ConnectionClosedOK:
            return None
        except ConnectionClosed as exc:
            raise _closed(exc) from None
        if isinstance(message, str):
            raise TransportError("control plane sent a text message on the tunnel")
        return message

    async def close(self) -> None:
        """Idempotent (websockets' close is)."""
        await self._connection.close()


async def connect_ws(
    url: str,
    identity: Identity,
    *,
    max_frame_bytes: int,
    connect_timeout_s: float,
    proxy: ProxyConfig | None,
    ping_interval_s: float = 20.0,
    ping_timeout_s: float = 20.0,
    now: float | None = None,
) -> WsTransport:
    """Open the WebSocket tunnel at ``url`` (``ws://`` or ``wss://``). Raises TransportError."""
    token = create_token(
        key_pem=identity.key_pem,
        cert_pem=identity.cert_pem,
        edge_id=identity.edge_id,
        audience=audience_for(identity.ca_pem),
        now=time.time() if now is None else now,
    )
    ssl_context = tls_client_context(identity) if url.startswith("wss://") else None
    via = f" through proxy {proxy.redacted}" if proxy else ""
    try:
        connection = await connect(
            url,
            additional_headers={"Authorization": f"{AUTH_SCHEME} {token}"},
            user_agent_header=f"outpost-edge/{SOFTWARE_VERSION}",
            proxy=proxy.url if proxy else None,
            ssl=ssl_context,
            open_timeout=connect_timeout_s,
            ping_interval=ping_interval_s,
            ping_timeout=ping_timeout_s,
            close_timeout=5,
            max_size=grpc_message_limit(max_frame_bytes),
            compression=None,  # frames are small or already compact; spare the CPU
        )
    except InvalidProxyStatus as exc:
        status = exc.response.status_code
        hint = (
            ": proxy authentication failed, check the credentials in the proxy URL"
            if status == 407
            else ": the proxy refused to CONNECT to the control plane"
        )
        raise TransportError(f"proxy {proxy.redacted if proxy else '?'} answered {status}{hint}") from None
    except ProxyError as exc:
        raise TransportError(f"proxy {proxy.redacted if proxy else '?'} failed: {exc}") from None
    except InvalidStatus as exc:
        status = exc.response.status_code
        body = exc.response.body.decode("utf-8", "replace")[:200] if exc.response.body else ""
        message = f"control plane refused the WebSocket tunnel at {url}: HTTP {status} {body}".rstrip()
        if status in (401, 403):
            raise TransportError.refused(message, body) from None
        raise TransportError(message) from None
    except (InvalidHandshake, InvalidURI) as exc:
        raise TransportError(f"WebSocket handshake with {url}{via} failed: {exc}") from None
    except TimeoutError:
        raise TransportError(
            f"could not open the WebSocket tunnel at {url}{via} within {connect_timeout_s:g} s"
        ) from None
    except OSError as exc:
        raise TransportError(f"could not connect to {url}{via}: {exc.strerror or exc}") from None
    log.debug("WebSocket tunnel open to %s%s", url, via)
    return WsTransport(connection)


def tls_client_context(identity: Identity) -> ssl.SSLContext:
    """TLS to the control plane's HTTPS port (the WebSocket tunnel, certificate renewal): the
    server is verified against the system's trust store plus the control plane's CA, and the edge
    presents its client certificate when its identity files hold it."""
    ssl_context = ssl.create_default_context()
    ssl_context.load_verify_locations(cadata=identity.ca_pem.decode("ascii"))
    _load_client_cert(ssl_context, identity)
    return ssl_context


def _load_client_cert(ssl_context: ssl.SSLContext, identity: Identity) -> None:
    """Present the edge's certificate to a TLS server that asks for one (mTLS). Without usable
    identity files the connection goes without it: the token authenticates the edge then."""
    files = identity.client_cert_files()
    if files is None:
        log.debug(
            "no identity files for edge %s: the WebSocket tunnel goes without a client certificate",
            identity.edge_id,
        )
        return
    cert_file, key_file = files
    try:
        ssl_context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        log.warning("cannot load the client certificate from %s: %s; relying on the token", cert_file, exc)


def _closed(exc: ConnectionClosed) -> TransportError:
    received = exc.rcvd
    if received is None:
        return TransportError("WebSocket tunnel broke without a close frame")
    message = f"control plane closed the WebSocket tunnel: {received.code} {received.reason}".rstrip()
    if received.code == _CLOSE_UNAUTHENTICATED:
        return TransportError.refused(message, received.reason)
    return TransportError(message)
