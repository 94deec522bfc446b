"""Query-string, cursor and page helpers for the list endpoints.

The SDK sends arrays with brackets (``types[]=a&types[]=b``) and time bounds as
``created_at[gte]=<ISO 8601>``; the plain spellings (``types=a``, ``created_at_gte=...``) are
accepted too. Page cursors are opaque to clients: URL-safe base64 of a small JSON object.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.datastructures import QueryParams

from control_plane.errors import InvalidRequest

__all__ = [
    "TimeBounds",
    "check_limit",
    "decode_cursor",
    "encode_cursor",
    "page_body",
    "query_list",
    "time_bounds",
]

_ONE_US = timedelta(microseconds=1)


def page_body(data: list[dict[str, Any]], next_page: str | None) -> dict[str, Any]:
    """A list endpoint's answer: ``{"data": [...], "next_page": cursor or null}``."""
    return {"data": data, "next_page": next_page}


def query_list(params: QueryParams, name: str, *, allowed: Collection[str] | None = None) -> list[str]:
    """Every value of ``name[]`` and ``name``; with ``allowed``, an unknown value is a 400."""
    values = [*params.getlist(f"{name}[]"), *params.getlist(name)]
    if allowed is not None:
        for value in values:
            if value not in allowed:
                raise InvalidRequest(f"{name}[]: unknown value {value!r}", param=name)
    return values


def check_limit(limit: int, maximum: int) -> int:
    if not 1 <= limit <= maximum:
        raise InvalidRequest(f"limit must be between 1 and {maximum}", param="limit")
    return limit


def _parse_time(value: str, param: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value.strip().replace(" ", "+"))
    except ValueError:
        raise InvalidRequest(f"{param}: {value!r} is not an RFC 3339 timestamp", param=param) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class TimeBounds:
    """Inclusive bounds (``None``: unbounded); exclusive ones are moved in by one microsecond,
    the store's resolution."""

    after: datetime | None = None
    before: datetime | None = None

    def contains(self, value: datetime) -> bool:
        return (self.after is None or value >= self.after) and (self.before is None or value <= self.before)

    @property
    def unbounded(self) -> bool:
        return self.after is None and self.before is None


def time_bounds(params: QueryParams, field: str = "created_at", *, exclusive: bool = True) -> TimeBounds:
    """Read ``<field>[gte|gt|lte|lt]`` (or ``<field>_gte`` ...) into inclusive bounds."""

    def get(op: str) -> datetime | None:
        raw = params.get(f"{field}[{op}]")
        if raw is None:
            raw = params.get(f"{field}_{op}")
        return None if raw is None else _parse_time(raw, f"{field}[{op}]")

    lows = [get("gte")]
    highs = [get("lte")]
    if exclusive:
        gt, lt = get("gt"), get("lt")
        lows.append(None if gt is None else gt + _ONE_US)
        highs.append(None if lt is None else lt - _ONE_US)
    after = max((t for t in lows if t is not None), default=None)
    before = min((t for t in highs if t is not None), default=None)
    return TimeBounds(after, before)


def encode_cursor(obj: dict[str, Any]) -> str:
    raw = json.dumps(obj, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> dict[str, Any]:
    """The cursor's object; a cursor this server did not make is a 400."""
    try:
        obj = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise InvalidRequest("page: invalid page cursor", param="page") from None
    if not isinstance(obj, dict):
        raise InvalidRequest("page: invalid page cursor", param="page")
    return obj
