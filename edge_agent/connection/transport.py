"""The transport seam: something that moves whole frames (bytes) to and from the control plane.

The link pumps a :class:`~outpost_wire.session.TunnelSession` through any :class:`Transport`;
gRPC (:mod:`edge_agent.connection.grpc_transport`) and WebSocket
(:mod:`edge_agent.connection.ws_transport`); :class:`~edge_agent.connection.dialer.Dialer` picks one.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["Transport", "TransportError"]

from edge_agent.errors import EdgeError
from outpost_wire.admission import final_refusal


class TransportError(EdgeError):
    """The connection could not be made or broke. ``unauthenticated`` is set when the control plane
    refused our identity; ``refusal`` names the reason when it is final (revoked, unknown edge,
    ...: :func:`outpost_wire.admission.final_refusal`), and retrying cannot help."""

    def __init__(self, message: str, *, unauthenticated: bool = False, refusal: str | None = None) -> None:
        super().__init__(message)
        self.unauthenticated = unauthenticated or refusal is not None
        self.refusal = refusal

    @classmethod
    def refused(cls, message: str, details: str) -> TransportError:
        """The control plane refused our identity, saying ``details``."""
        return cls(message, unauthenticated=True, refusal=final_refusal(details))


class Transport(Protocol):
    async def send(self, data: bytes) -> None:
        """Send one frame. Raises TransportError if the connection is gone."""

    async def receive(self) -> bytes | None:
        """The next frame, or ``None`` when the peer closed the stream cleanly."""

    async def close(self) -> None:
        """Idempotent."""
