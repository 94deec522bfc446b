"""Tool results as both sides see them: frozen dataclasses, independent of protobuf.

A :class:`ToolResult` mirrors the content of an Anthropic ``tool_result`` block: a list of text,
image or document blocks plus ``is_error``. A tool that fails (non-zero exit, missing file, dead
sandbox) is a ``ToolResult`` with ``is_error=True``, never an exception across the wire.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ContentBlock", "DocumentBlock", "ImageBlock", "MemoryChange", "TextBlock", "ToolResult"]


@dataclass(frozen=True, slots=True)
class TextBlock:
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"type": "text", "text": self.text}


@dataclass(frozen=True, slots=True)
class ImageBlock:
    media_type: str
    data: bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": self.media_type, "data": _b64(self.data)},
        }


@dataclass(frozen=True, slots=True)
class DocumentBlock:
    media_type: str
    data: bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "document",
            "source": {"type": "base64", "media_type": self.media_type, "data": _b64(self.data)},
        }


ContentBlock = TextBlock | ImageBlock | DocumentBlock


@dataclass(frozen=True, slots=True)
class MemoryChange:
    """A file a tool changed under a read-write memory mount (``/mnt/memory/<slug>``), as the
    edge's post-call scan found it.

    ``path`` is the memory's path (``/notes.md``); ``content`` the file's text now, ``None`` when
    the file was deleted; ``base_sha256`` the content's hash in the edge's baseline (what the
    control plane last sent), ``""`` for a new file. ``error`` non-empty: the change cannot become
    a memory (too large, not UTF-8, a link, ...) and is only reported (``content`` is ``None``).
    """

    store_id: str
    path: str
    content: str | None = field(default=None, repr=False)
    base_sha256: str = ""
    error: str = ""


@dataclass(frozen=True, slots=True)
class ToolResult:
    content: tuple[ContentBlock, ...] = field(default_factory=tuple)
    is_error: bool = False
    #: What the call changed in the session's memory mounts (the control plane writes it back
    #: as memory versions before it records the result, and strips it).
    memory_changes: tuple[MemoryChange, ...] = ()

    @classmethod
    def text(cls, text: str, *, is_error: bool = False) -> ToolResult:
        return cls(content=(TextBlock(text),), is_error=is_error)

    @classmethod
    def error(cls, text: str) -> ToolResult:
        return cls(content=(TextBlock(text),), is_error=True)

    def to_json(self) -> list[dict[str, Any]]:
        """The ``content`` list of an Anthropic tool_result block."""
        return [block.to_json() for block in self.content]

    @property
    def plain_text(self) -> str:
        """All text blocks joined; for logs and CLIs."""
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
