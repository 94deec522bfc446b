"""Events a :class:`~outpost_wire.session.TunnelSession` reports to its caller.

Frozen dataclasses drained with ``TunnelSession.events_received()``. Three of them end the
connection (the session is CLOSED when they are emitted): :class:`PeerDead`,
:class:`ProtocolError` (we rejected the peer's input and queued an ErrorFrame for it),
:class:`PeerError` (the peer rejected ours). The others carry frames up to the caller.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeAlias

from outpost_wire.errors import ErrorCode
from outpost_wire.frames import Hello, Outcome, Request, Welcome

__all__ = [
    "CancelReceived",
    "CatalogReceived",
    "DrainReceived",
    "Event",
    "HelloReceived",
    "PeerDead",
    "PeerError",
    "ProtocolError",
    "RequestReceived",
    "ResultReceived",
    "WelcomeReceived",
]


@dataclass(frozen=True, slots=True)
class HelloReceived:
    hello: Hello


@dataclass(frozen=True, slots=True)
class WelcomeReceived:
    welcome: Welcome


@dataclass(frozen=True, slots=True)
class RequestReceived:
    request: Request


@dataclass(frozen=True, slots=True)
class ResultReceived:
    request_id: str
    outcome: Outcome


@dataclass(frozen=True, slots=True)
class CancelReceived:
    request_id: str


@dataclass(frozen=True, slots=True)
class DrainReceived:
    reason: str
    grace_ms: int


@dataclass(frozen=True, slots=True)
class CatalogReceived:
    """CONTROL: the edge sent a CatalogUpdate; its MCP catalog is now ``catalog_json``."""

    digest: str
    catalog_json: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class PeerDead:
    """Nothing arrived for ``heartbeat_timeout_s``; the session is CLOSED."""


@dataclass(frozen=True, slots=True)
class ProtocolError:
    """The peer sent something bad; an ErrorFrame is queued for it and the session is CLOSED."""

    code: ErrorCode
    message: str


@dataclass(frozen=True, slots=True)
class PeerError:
    """The peer sent an ErrorFrame; the session is CLOSED."""

    code: ErrorCode
    message: str


Event: TypeAlias = (
    HelloReceived
    | WelcomeReceived
    | RequestReceived
    | ResultReceived
    | CancelReceived
    | DrainReceived
    | CatalogReceived
    | PeerDead
    | ProtocolError
    | PeerError
)
