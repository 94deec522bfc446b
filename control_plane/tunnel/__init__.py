"""The tunnel server side: edge connections, the registry of connected edges, and ``EdgeGateway``;
the gRPC and WebSocket carriers share one pump (:mod:`control_plane.tunnel.pump`)."""

from __future__ import annotations

from control_plane.tunnel.connection import EdgeConnection
from control_plane.tunnel.gateway import (
    EdgeGateway,
    GatewayConfig,
    SandboxMove,
    SandboxPlacements,
    TunnelGrants,
)
from control_plane.tunnel.grpc_server import Authenticator, GrpcTunnelServer
from control_plane.tunnel.presence import EdgePresence, PresenceStore
from control_plane.tunnel.registry import EdgeRegistry, EdgeStatus
from control_plane.tunnel.ws_server import WS_TUNNEL_PATH, WsTunnelEndpoint

__all__ = [
    "WS_TUNNEL_PATH",
    "Authenticator",
    "EdgeConnection",
    "EdgeGateway",
    "EdgePresence",
    "EdgeRegistry",
    "EdgeStatus",
    "GatewayConfig",
    "GrpcTunnelServer",
    "PresenceStore",
    "SandboxMove",
    "SandboxPlacements",
    "TunnelGrants",
    "WsTunnelEndpoint",
]
