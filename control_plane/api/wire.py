"""Small helpers for the API's JSON shapes."""

from __future__ import annotations

from typing import Any

from control_plane.timestamps import timestamp  # re-exported: the routers' name for it

__all__ = ["page_body", "timestamp"]


def page_body(data: list[dict[str, Any]], next_page: str | None) -> dict[str, Any]:
    return {"data": data, "next_page": next_page}
