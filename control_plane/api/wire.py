"""Small helpers for the API's JSON shapes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

__all__ = ["page_body", "timestamp"]


def timestamp(value: datetime) -> str:
    """RFC 3339 in UTC with a ``Z``, as the API returns them."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def page_body(data: list[dict[str, Any]], next_page: str | None) -> dict[str, Any]:
    return {"data": data, "next_page": next_page}
