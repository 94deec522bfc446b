"""outpost_wire: the tunnel contract shared by the control plane and the edge agent.

Layers, bottom up (each module imports only the ones above it in this list)::

    errors     ErrorCode (the closed set of codes on the wire) and the OutpostError hierarchy
    results    ToolResult and its content blocks
    frames     the frames and outcomes as frozen dataclasses; PROTOCOL_VERSION
    codec      bytes <-> frames/outcomes; the only user of the generated ``_proto`` package
    events     what a session reports to its caller
    session    TunnelSession: the sans-I/O protocol core that gRPC and WebSocket transports pump

The ``.proto`` source lives in ``proto/outpost_wire/_proto/``; ``scripts/gen_protos.py`` regenerates
``outpost_wire/_proto`` (``--check`` in CI).
"""

from __future__ import annotations

from outpost_wire.codec import decode_frame, decode_outcome, encode_frame, encode_outcome
from outpost_wire.errors import (
    ErrorCode,
    FrameTooLarge,
    MalformedFrame,
    OutpostError,
    ProtocolViolation,
    RemoteError,
    WireError,
)
from outpost_wire.frames import (
    PROTOCOL_VERSION,
    Ack,
    Cancel,
    CatalogUpdate,
    Destroy,
    Destroyed,
    Drain,
    Egress,
    ErrorFrame,
    Execute,
    Failure,
    Frame,
    Heartbeat,
    Hello,
    McpCall,
    Operation,
    Outcome,
    Provision,
    Provisioned,
    Repository,
    Request,
    ResultChunk,
    Welcome,
)
from outpost_wire.results import ContentBlock, DocumentBlock, ImageBlock, TextBlock, ToolResult
from outpost_wire.session import ConnState, Role, SessionConfig, TunnelSession
from outpost_wire.tunnel_events import (
    CancelReceived,
    CatalogReceived,
    DrainReceived,
    Event,
    HelloReceived,
    PeerDead,
    PeerError,
    ProtocolError,
    RequestReceived,
    ResultReceived,
    WelcomeReceived,
)

__all__ = [
    "PROTOCOL_VERSION",
    "Ack",
    "Cancel",
    "CancelReceived",
    "CatalogReceived",
    "CatalogUpdate",
    "ConnState",
    "ContentBlock",
    "Destroy",
    "Destroyed",
    "DocumentBlock",
    "Drain",
    "DrainReceived",
    "Egress",
    "ErrorCode",
    "ErrorFrame",
    "Event",
    "Execute",
    "Failure",
    "Frame",
    "FrameTooLarge",
    "Heartbeat",
    "Hello",
    "HelloReceived",
    "ImageBlock",
    "MalformedFrame",
    "McpCall",
    "Operation",
    "Outcome",
    "OutpostError",
    "PeerDead",
    "PeerError",
    "ProtocolError",
    "ProtocolViolation",
    "Provision",
    "Provisioned",
    "RemoteError",
    "Repository",
    "Request",
    "RequestReceived",
    "ResultChunk",
    "ResultReceived",
    "Role",
    "SessionConfig",
    "TextBlock",
    "ToolResult",
    "TunnelSession",
    "Welcome",
    "WelcomeReceived",
    "WireError",
    "decode_frame",
    "decode_outcome",
    "encode_frame",
    "encode_outcome",
]
