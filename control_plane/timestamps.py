"""Timestamps as the API and the stored views spell them.

Below both the HTTP layer (``control_plane.api``) and the domain (sessions, vault …): either may
import it; the routers import it from here too."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["timestamp"]


def timestamp(value: datetime) -> str:
    """RFC 3339 in UTC with a ``Z``, as the API returns them."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
