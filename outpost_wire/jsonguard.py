"""JSON from untrusted peers, parsed with a bound on nesting depth.

``json.loads`` recurses once per nested array or object: 2,500 ``[`` raise ``RecursionError`` (a
traceback where a clear refusal belongs), and deeper input costs stack before it fails. :func:`loads`
counts the nesting first, outside strings, in one linear pass, and refuses past ``max_depth`` with a
``ValueError`` like any other malformed input.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["DEFAULT_MAX_DEPTH", "JsonTooDeep", "loads"]

DEFAULT_MAX_DEPTH = 64


class JsonTooDeep(ValueError):
    """Nested deeper than allowed."""


def _depth_ok(text: str, max_depth: int) -> bool:
    depth = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > max_depth:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def loads(data: str | bytes, *, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """``json.loads`` that raises :class:`JsonTooDeep` (a ``ValueError``) past ``max_depth``."""
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    if not _depth_ok(text, max_depth):
        raise JsonTooDeep(f"JSON nested deeper than {max_depth} levels")
    return json.loads(text)
