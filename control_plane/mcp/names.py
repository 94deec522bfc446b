"""Deterministic names for MCP tools as the model sees them (pure; no I/O).

An MCP tool ``tool`` of the agent's server ``server`` is offered to the model as
``mcp__<server>__<tool>``. Claude accepts at most :data:`MAX_TOOL_NAME_CHARS` characters of
``[A-Za-z0-9_-]``, so:

* when ``server`` and ``tool`` are both made of those characters, ``server`` holds no ``__`` and
  does not end in ``_`` (so the separator is unambiguous) and the whole fits, the name is exactly
  ``mcp__<server>__<tool>``;
* otherwise every other character becomes ``_``, the name is cut to leave room, and
  ``_<8 hex of sha256(server NUL tool)>`` is appended: still unique, and the same on every run.

A name depends only on its own ``(server, tool)``, never on the other tools offered, so it is
stable across turns and restarts. Names are never parsed back: :class:`ToolNameMap` keeps the
reverse map of one model request.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from typing import Final

__all__ = ["MAX_TOOL_NAME_CHARS", "ToolNameMap", "hashed_tool_name", "sanitize", "tool_name"]

MAX_TOOL_NAME_CHARS: Final = 64
_PREFIX: Final = "mcp__"
_SEPARATOR: Final = "__"
_DIGEST_CHARS: Final = 8
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_SAFE = re.compile(r"[A-Za-z0-9_-]+")


def sanitize(text: str) -> str:
    """``text`` with every character outside ``[A-Za-z0-9_-]`` replaced by ``_``."""
    return _UNSAFE.sub("_", text)


def tool_name(server: str, tool: str) -> str:
    """The model-facing name of MCP tool ``tool`` of server ``server`` (see the module docstring)."""
    plain = f"{_PREFIX}{server}{_SEPARATOR}{tool}"
    unambiguous = _SEPARATOR not in server and not server.endswith("_")
    if (
        _SAFE.fullmatch(server)
        and _SAFE.fullmatch(tool)
        and unambiguous
        and len(plain) <= MAX_TOOL_NAME_CHARS
    ):
        return plain
    return hashed_tool_name(server, tool)


def hashed_tool_name(server: str, tool: str) -> str:
    """The sanitized, truncated name with the ``_<8 hex>`` digest of ``(server, tool)``."""
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:_DIGEST_CHARS]
    base = f"{_PREFIX}{sanitize(server)}{_SEPARATOR}{sanitize(tool)}"
    return f"{base[: MAX_TOOL_NAME_CHARS - _DIGEST_CHARS - 1]}_{digest}"


class ToolNameMap:
    """The MCP tools of one model request by model-facing name, and back.

    ``reserved`` are names already taken (the toolset's and the custom tools); a tool whose name
    is taken gets its digest form, and in the (astronomically unlikely) case that is taken too it
    is left out (:meth:`add` returns ``None``). Deterministic for a given order of :meth:`add`.
    """

    def __init__(self, reserved: Iterable[str] = ()) -> None:
        self._reserved = frozenset(reserved)
        self._by_name: dict[str, tuple[str, str]] = {}
        self._by_tool: dict[tuple[str, str], str] = {}

    def add(self, server: str, tool: str) -> str | None:
        """Name ``(server, tool)`` (idempotent); ``None`` when no free name exists."""
        known = self._by_tool.get((server, tool))
        if known is not None:
            return known
        for name in (tool_name(server, tool), hashed_tool_name(server, tool)):
            if name not in self._reserved and name not in self._by_name:
                self._by_name[name] = (server, tool)
                self._by_tool[(server, tool)] = name
                return name
        return None

    def lookup(self, name: str) -> tuple[str, str] | None:
        """The ``(server, tool)`` offered as ``name``, or ``None``."""
        return self._by_name.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)
