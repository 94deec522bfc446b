"""Pin the public surface of outpost_wire: changing it is a deliberate, reviewed act."""

from __future__ import annotations

import outpost_wire

EXPECTED = {
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
    "Repository",
    "RemoteError",
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
}


def test_all_is_pinned() -> None:
    assert set(outpost_wire.__all__) == EXPECTED
    assert len(outpost_wire.__all__) == len(EXPECTED), "duplicates in __all__"


def test_every_export_exists() -> None:
    for name in outpost_wire.__all__:
        assert hasattr(outpost_wire, name), name


def test_protobuf_does_not_leak() -> None:
    for name in outpost_wire.__all__:
        module = getattr(getattr(outpost_wire, name), "__module__", "") or ""
        assert "_proto" not in module, name
