"""What the hub hands out: frozen dataclasses, free of mcp SDK types.

* :class:`McpCatalog` -- per server its status and its tools (filtered by policy), plus a
  ``digest`` (sha256 of the canonical JSON) that stays the same across restarts when nothing
  changed. The digest covers names, statuses and tools, not ``last_error`` (whose text varies
  from one failed attempt to the next).
* :class:`McpCallResult` -- tool-result content blocks (:class:`TextBlock`, :class:`ImageBlock`,
  :class:`DocumentBlock`: the wire's own, from :mod:`outpost_wire.results`, so a result crosses
  the tunnel as it is), ``is_error`` and ``latency_ms``.

``input_schema`` is a plain mapping owned by the catalog; treat it as read-only.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from outpost_wire.results import ContentBlock, DocumentBlock, ImageBlock, TextBlock

__all__ = [
    "ContentBlock",
    "DocumentBlock",
    "ImageBlock",
    "McpCallResult",
    "McpCatalog",
    "McpServerEntry",
    "McpTool",
    "ServerStatus",
    "TextBlock",
    "ToolOutput",
]


class ServerStatus(enum.Enum):
    UP = "up"
    DOWN = "down"  # not connected: starting, failed, restarting, or closed


@dataclass(frozen=True)
class McpTool:
    name: str
    description: str
    input_schema: Mapping[str, Any] = field(hash=False)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": dict(self.input_schema)}


@dataclass(frozen=True)
class McpServerEntry:
    """One server in the catalog. ``tools`` are the last ones listed (kept while it is down)."""

    name: str
    status: ServerStatus
    tools: tuple[McpTool, ...]
    last_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status.value,
            "last_error": self.last_error,
            "tools": [tool.to_dict() for tool in self.tools],
        }


@dataclass(frozen=True)
class McpCatalog:
    servers: tuple[McpServerEntry, ...]
    digest: str

    @classmethod
    def build(cls, servers: Iterable[McpServerEntry]) -> McpCatalog:
        """Sort servers and tools by name and compute the digest."""
        ordered = tuple(
            sorted(
                (
                    McpServerEntry(
                        s.name, s.status, tuple(sorted(s.tools, key=lambda t: t.name)), s.last_error
                    )
                    for s in servers
                ),
                key=lambda s: s.name,
            )
        )
        stable = [
            {"name": s.name, "status": s.status.value, "tools": [t.to_dict() for t in s.tools]}
            for s in ordered
        ]
        canonical = json.dumps(stable, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return cls(servers=ordered, digest="sha256:" + hashlib.sha256(canonical.encode()).hexdigest())

    def server(self, name: str) -> McpServerEntry | None:
        return next((s for s in self.servers if s.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {"digest": self.digest, "servers": [s.to_dict() for s in self.servers]}


@dataclass(frozen=True)
class McpCallResult:
    content: tuple[ContentBlock, ...]
    is_error: bool
    latency_ms: float

    def content_dicts(self) -> list[dict[str, Any]]:
        """The content as Anthropic ``tool_result`` content blocks."""
        return [block.to_json() for block in self.content]


@dataclass(frozen=True)
class ToolOutput:
    """A tool's answer as a session returns it, before the hub adds the latency (internal)."""

    content: tuple[ContentBlock, ...]
    is_error: bool
