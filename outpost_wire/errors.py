"""Errors shared by both sides of the tunnel.

On the wire an error is a closed enum (:class:`ErrorCode`) plus a message, never a class path.
In Python every error raised by the wire package derives from :class:`OutpostError`::

    OutpostError
    ├── WireError                 a frame could not be encoded or decoded
    │   ├── FrameTooLarge         the frame exceeds max_frame_bytes
    │   └── MalformedFrame        the bytes are not a valid frame
    ├── ProtocolViolation         a valid frame arrived in a state that forbids it
    └── RemoteError               the peer answered a request with an error (carries .code)

Each side keeps its own subtree for local failures (``control_plane.errors``, ``edge_agent.errors``)
and maps foreign exceptions (docker, grpc, sqlite, anthropic) once, at the boundary that calls them.
"""

from __future__ import annotations

import enum

__all__ = [
    "ErrorCode",
    "FrameTooLarge",
    "MalformedFrame",
    "OutpostError",
    "ProtocolViolation",
    "RemoteError",
    "WireError",
]


class ErrorCode(enum.Enum):
    """The closed set of error codes that may cross the wire."""

    UNSPECIFIED = "unspecified"
    INVALID_REQUEST = "invalid_request"  # the request is malformed or names an unknown operation
    POLICY_DENIED = "policy_denied"  # the edge's local policy refuses it; message names the rule
    CAPACITY_EXHAUSTED = "capacity_exhausted"  # no room for another sandbox
    SANDBOX_UNAVAILABLE = "sandbox_unavailable"  # the sandbox could not be created or reached
    UNKNOWN_SESSION = "unknown_session"  # no sandbox exists for the session (destroy, etc.)
    DEADLINE_EXCEEDED = "deadline_exceeded"  # the request's deadline passed before it finished
    CANCELLED = "cancelled"  # the peer cancelled the request
    DRAINING = "draining"  # the peer is draining and takes no new requests
    FRAME_TOO_LARGE = "frame_too_large"
    MALFORMED_FRAME = "malformed_frame"
    PROTOCOL_VIOLATION = "protocol_violation"
    UNAUTHENTICATED = "unauthenticated"
    UNAVAILABLE = "unavailable"  # no edge is connected / the link is down
    INTERNAL = "internal"
    MCP_CONNECTION_FAILED = "mcp_connection_failed"  # the MCP server of an McpCall cannot be reached
    # A repository of the session could not be put into its workspace (the sandbox was not made):
    REPOSITORY_CLONE_FAILED = "repository_clone_failed"  # any other clone failure
    REPOSITORY_AUTHENTICATION_FAILED = "repository_authentication_failed"  # no or a refused credential
    REPOSITORY_FORBIDDEN = "repository_forbidden"  # the credential may not read the repository
    REPOSITORY_NOT_FOUND = "repository_not_found"
    REPOSITORY_CHECKOUT_FAILED = "repository_checkout_failed"  # the branch or commit does not exist
    # An Execute without a sandbox spec for a session the edge holds none for (it restarted, or
    # destroyed the sandbox): nothing ran; the control plane sends the call again with the spec.
    SANDBOX_SPEC_REQUIRED = "sandbox_spec_required"


class OutpostError(Exception):
    """Base class of every error raised by Outpost code."""


class WireError(OutpostError):
    """A frame could not be encoded or decoded."""

    code: ErrorCode = ErrorCode.MALFORMED_FRAME


class FrameTooLarge(WireError):
    code = ErrorCode.FRAME_TOO_LARGE


class MalformedFrame(WireError):
    code = ErrorCode.MALFORMED_FRAME


class ProtocolViolation(OutpostError):
    """A well-formed frame that the current state does not allow."""

    code = ErrorCode.PROTOCOL_VIOLATION


class RemoteError(OutpostError):
    """The peer answered a request with an error."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(f"{code.value}: {message}")
        self.code = code
        self.message = message
