"""The edge's outbound connection to the control plane: transports, backoff, the link."""

from __future__ import annotations

from edge_agent.connection.backoff import Backoff
from edge_agent.connection.grpc_transport import GrpcTransport, connect_grpc
from edge_agent.connection.link import Link, LinkState, RequestHandler
from edge_agent.connection.transport import Transport, TransportError

__all__ = [
    "Backoff",
    "GrpcTransport",
    "Link",
    "LinkState",
    "RequestHandler",
    "Transport",
    "TransportError",
    "connect_grpc",
]
