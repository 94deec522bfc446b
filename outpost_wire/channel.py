"""Constants both gRPC transports agree on."""

from __future__ import annotations

__all__ = ["CONNECT_METHOD", "grpc_message_limit"]

#: The one RPC: a bidirectional stream of encoded frames (see ``proto/``: service Tunnel).
CONNECT_METHOD = "/outpost.tunnel.v1.Tunnel/Connect"


def grpc_message_limit(max_frame_bytes: int) -> int:
    """gRPC's own message cap, set above our frame limit so that an oversized frame reaches our
    codec and gets a typed ``FRAME_TOO_LARGE`` error instead of a bare transport failure; beyond
    this, gRPC cuts the stream with RESOURCE_EXHAUSTED."""
    return 2 * max_frame_bytes + 64 * 1024
