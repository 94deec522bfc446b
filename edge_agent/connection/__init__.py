"""The edge's outbound connection to the control plane: transports (gRPC, WebSocket), proxy
resolution, transport selection (``Dialer``), backoff, the link."""

from __future__ import annotations

from edge_agent.connection.backoff import Backoff
from edge_agent.connection.dialer import Dialer
from edge_agent.connection.grpc_transport import GrpcTransport, connect_grpc
from edge_agent.connection.link import Link, LinkState, RequestHandler
from edge_agent.connection.proxy import ProxyConfig, resolve_proxy
from edge_agent.connection.selection import TransportKind, TransportSelector
from edge_agent.connection.transport import Transport, TransportError
from edge_agent.connection.ws_transport import WsTransport, connect_ws

__all__ = [
    "Backoff",
    "Dialer",
    "GrpcTransport",
    "Link",
    "LinkState",
    "ProxyConfig",
    "RequestHandler",
    "Transport",
    "TransportError",
    "TransportKind",
    "TransportSelector",
    "WsTransport",
    "connect_grpc",
    "connect_ws",
    "resolve_proxy",
]
