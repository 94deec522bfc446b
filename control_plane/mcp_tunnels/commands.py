"""What :class:`~control_plane.mcp_tunnels.service.TunnelService` is asked and answers: typed
values, not HTTP models (the API's router translates request bodies and query strings into these)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ListQuery", "RevealedToken"]


@dataclass(frozen=True, slots=True)
class ListQuery:
    """A page of tunnels or of a tunnel's certificates, newest first."""

    limit: int = 20
    cursor: str | None = None  # the store's
    include_archived: bool = False


@dataclass(frozen=True, slots=True)
class RevealedToken:
    """A tunnel's connector token: ``id`` names the value and changes on rotation."""

    id: str
    token: str

    def __repr__(self) -> str:  # the value is a credential: never in a repr
        return f"RevealedToken(id={self.id!r}, token=<redacted>)"
