"""Conversions shared by the store implementations (private to ``control_plane.store``).

Every backend stores the same representation, so the backends behave alike down to the edge cases:

* times are integer microseconds since the Unix epoch, read back as aware UTC ``datetime`` objects;
  a naive ``datetime`` is refused;
* JSON documents (resource bodies, event payloads) are serialized compactly, refusing NaN and
  values JSON cannot hold, and every read decodes a fresh copy;
* page cursors are opaque: URL-safe base64 of a small JSON object naming the direction and the key;
* ``list_resources`` filters match top-level body fields by JSON type and value.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import gc
import hashlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from control_plane.errors import InvalidRequest
from control_plane.store.base import NewEvent

__all__ = [
    "FilterValue",
    "ResourceCursor",
    "check_filters",
    "check_limit",
    "check_new_events",
    "content_digest",
    "decode_resource_cursor",
    "decode_version_cursor",
    "dumps",
    "encode_resource_cursor",
    "encode_version_cursor",
    "filter_matches",
    "from_us",
    "loads",
    "opt_from_us",
    "opt_to_us",
    "path_range",
    "paused_gc",
    "to_us",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)
_FIELD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]{0,127}")

#: A scalar is "equal to"; a tuple of strings is "any of" (the empty tuple matches nothing).
FilterValue = str | int | float | bool | None | tuple[str, ...]


# -- time ---------------------------------------------------------------------------------------


def to_us(dt: datetime, param: str = "now") -> int:
    """Microseconds since the epoch of an aware ``datetime``; a naive one is refused."""
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise InvalidRequest(f"{param} must be a timezone-aware datetime", param=param)
    return (dt - _EPOCH) // _ONE_US


def opt_to_us(dt: datetime | None, param: str) -> int | None:
    return None if dt is None else to_us(dt, param)


def from_us(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


def opt_from_us(us: int | None) -> datetime | None:
    return None if us is None else _EPOCH + timedelta(microseconds=us)


# -- JSON ---------------------------------------------------------------------------------------


def dumps(value: Mapping[str, Any], param: str) -> str:
    """Compact JSON of a document; ``InvalidRequest`` if it is not a JSON object JSON can hold."""
    if not isinstance(value, Mapping):
        raise InvalidRequest(f"{param} must be a JSON object", param=param)
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidRequest(f"{param} is not JSON-serializable: {exc}", param=param) from exc


_DECODER = json.JSONDecoder()


def loads(text: str) -> dict[str, Any]:
    """Decode a document written by ``dumps``. ``raw_decode`` skips the whitespace scans of
    ``json.loads``, which the compact text we wrote does not need (a quarter of the decoding time)."""
    value: dict[str, Any] = _DECODER.raw_decode(text)[0]
    return value


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while decoding a large result.

    Decoding a long log allocates hundreds of thousands of containers, which sets off repeated
    full collections that scan the whole heap: on a 100k-event replay that is more than half the
    time. Nothing decoded here can form a reference cycle, so nothing is lost by deferring the
    collection; it is resumed (only if it was running) as soon as the result is built.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


# -- validation ---------------------------------------------------------------------------------


def check_new_events(events: Sequence[NewEvent]) -> None:
    """Refuse malformed events before anything is written: empty ids or types, or an id twice."""
    seen: set[str] = set()
    for event in events:
        if not isinstance(event.id, str) or not event.id:
            raise InvalidRequest("event id must be a non-empty string", param="events.id")
        if not isinstance(event.type, str) or not event.type:
            raise InvalidRequest(f"event {event.id!r}: type must be a non-empty string", param="events.type")
        if event.id in seen:
            raise InvalidRequest(f"event id {event.id!r} appears twice in one append", param="events.id")
        seen.add(event.id)


def check_limit(limit: int) -> None:
    if limit < 1:
        raise InvalidRequest("limit must be at least 1", param="limit")


def check_filters(filters: Mapping[str, Any] | None) -> dict[str, FilterValue]:
    """Filters are top-level field names mapped to scalar JSON values, or to a tuple (list,
    frozenset) of strings: any of them."""
    if not filters:
        return {}
    checked: dict[str, FilterValue] = {}
    for name, value in filters.items():
        if not isinstance(name, str) or not _FIELD_RE.fullmatch(name):
            raise InvalidRequest(
                f"filter field {name!r} is not a plain top-level field name", param="filters"
            )
        if isinstance(value, tuple | list | frozenset | set):
            if not all(isinstance(v, str) for v in value):
                raise InvalidRequest(f"filter {name!r}: a list of values must hold strings", param="filters")
            checked[name] = tuple(sorted(value))
            continue
        if value is not None and not isinstance(value, str | int | float | bool):
            raise InvalidRequest(
                f"filter {name!r} must be a string, number, boolean or null", param="filters"
            )
        checked[name] = value
    return checked


def filter_matches(body: Mapping[str, Any], name: str, wanted: FilterValue) -> bool:
    """The reference semantics of a filter: same JSON type (numbers compare as numbers, a boolean
    is not a number) and equal value; ``None`` matches JSON null or a missing field."""
    actual = body.get(name)
    if isinstance(wanted, tuple):
        return isinstance(actual, str) and actual in wanted
    if wanted is None:
        return actual is None
    if isinstance(wanted, bool):
        return isinstance(actual, bool) and actual is wanted
    if isinstance(wanted, int | float):
        return isinstance(actual, int | float) and not isinstance(actual, bool) and actual == wanted
    return isinstance(actual, str) and actual == wanted


# -- cursors ------------------------------------------------------------------------------------

Direction = Literal["next", "prev"]


@dataclass(frozen=True, slots=True)
class ResourceCursor:
    """A position in a ``list_resources`` listing: the key of the row it is relative to, and
    whether the page wanted lies after it (``next``) or before it (``prev``) in the listing order."""

    direction: Direction
    created_us: int
    id: str


def _encode(obj: dict[str, Any]) -> str:
    raw = json.dumps(obj, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(cursor: str) -> dict[str, Any]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        obj = json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest("invalid cursor", param="cursor") from exc
    if not isinstance(obj, dict):
        raise InvalidRequest("invalid cursor", param="cursor")
    return obj


def encode_resource_cursor(direction: Direction, created_us: int, id: str) -> str:
    return _encode({"d": direction, "c": created_us, "i": id})


def decode_resource_cursor(cursor: str) -> ResourceCursor:
    obj = _decode(cursor)
    direction, created_us, id = obj.get("d"), obj.get("c"), obj.get("i")
    if (
        direction not in ("next", "prev")
        or not isinstance(created_us, int)
        or isinstance(created_us, bool)
        or not isinstance(id, str)
    ):
        raise InvalidRequest("invalid cursor", param="cursor")
    return ResourceCursor("next" if direction == "next" else "prev", created_us, id)


def encode_version_cursor(version: int) -> str:
    return _encode({"v": version})


def decode_version_cursor(cursor: str) -> int:
    version = _decode(cursor).get("v")
    if not isinstance(version, int) or isinstance(version, bool):
        raise InvalidRequest("invalid cursor", param="cursor")
    return version


# -- memories -----------------------------------------------------------------------------------


def content_digest(content: str) -> tuple[str, int]:
    """A memory's ``content_sha256`` (lowercase hex of its UTF-8 bytes) and size in bytes."""
    data = content.encode("utf-8")
    return hashlib.sha256(data).hexdigest(), len(data)


def path_range(path_prefix: str, path_from: str | None) -> tuple[str, str]:
    """The paths ``[low, high)`` that start with ``path_prefix`` (which ends with ``/``) and are
    not before ``path_from``: every path starting with ``/a/`` sorts at or after ``/a/`` and before
    ``/a0`` (``0`` is the character after ``/``), in code-point order, which is UTF-8 byte order."""
    if not path_prefix.endswith("/"):
        raise InvalidRequest("path_prefix must end with '/'", param="path_prefix")
    high = path_prefix[:-1] + "0"
    low = path_prefix if path_from is None or path_from < path_prefix else path_from
    return low, high
