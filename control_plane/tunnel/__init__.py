"""The tunnel server side: edge connections, the registry of connected edges, and ``EdgeGateway``."""

from __future__ import annotations

from control_plane.tunnel.connection import EdgeConnection
from control_plane.tunnel.gateway import EdgeGateway, GatewayConfig
from control_plane.tunnel.grpc_server import Authenticator, GrpcTunnelServer
from control_plane.tunnel.registry import EdgeRegistry, EdgeStatus

__all__ = [
    "Authenticator",
    "EdgeConnection",
    "EdgeGateway",
    "EdgeRegistry",
    "EdgeStatus",
    "GatewayConfig",
    "GrpcTunnelServer",
]
