"""The edge side of the sandboxd protocol, without I/O.

Two layers, each a small class you feed bytes into and read results out of:

* :class:`StreamDemuxer` splits Docker's multiplexed attach stream (``tty=False``: 8-byte headers
  ``[stream, 0, 0, 0, size:u32be]``) into ``(stream, payload)`` chunks;
* :class:`FrameDecoder` splits the daemon's stdout into frames (4-byte big-endian length + UTF-8
  JSON).

:func:`encode_frame`, :func:`bootstrap_payload` and :func:`to_tool_result` are the other
conversions. Wire dicts never leave this module and :mod:`.channel`: callers see
:class:`~outpost_wire.results.ToolResult`.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from typing import Any

from outpost_wire.results import ContentBlock, DocumentBlock, ImageBlock, TextBlock, ToolResult

from ..errors import SandboxUnavailable

__all__ = [
    "MAX_FRAME_BYTES",
    "STDERR",
    "STDOUT",
    "FrameDecoder",
    "StreamDemuxer",
    "bootstrap_payload",
    "decode_message",
    "encode_frame",
    "to_tool_result",
]

STDOUT = 1
STDERR = 2
MAX_FRAME_BYTES = 64 * 1024 * 1024
_HEADER = struct.Struct(">BxxxL")
_LENGTH = struct.Struct(">I")


class StreamDemuxer:
    """Docker's stdout/stderr multiplexing for a non-TTY exec, undone incrementally."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._stream = 0
        self._remaining = 0  # payload bytes still due for the current chunk

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        self._buf += data
        out: list[tuple[int, bytes]] = []
        pos = 0
        buf = self._buf
        while True:
            if self._remaining:
                take = min(self._remaining, len(buf) - pos)
                if take == 0:
                    break
                out.append((self._stream, bytes(buf[pos : pos + take])))
                pos += take
                self._remaining -= take
                continue
            if len(buf) - pos < _HEADER.size:
                break
            if buf[pos] > STDERR or buf[pos + 1 : pos + 4] != b"\0\0\0":
                # Not a multiplexed stream: Docker reports exec start failures as plain text.
                text = bytes(buf[pos : pos + 300]).decode("utf-8", "replace").strip()
                raise SandboxUnavailable(f"unexpected output from docker exec: {text!r}")
            self._stream, self._remaining = _HEADER.unpack_from(buf, pos)
            pos += _HEADER.size
        del buf[:pos]
        return out


class FrameDecoder:
    """Length-prefixed frames, reassembled across arbitrary chunk boundaries."""

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self._buf = bytearray()
        self._max = max_frame_bytes

    @property
    def buffered(self) -> bytes:
        """Bytes received but not yet part of a complete frame (for diagnostics)."""
        return bytes(self._buf)

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        frames: list[bytes] = []
        pos = 0
        buf = self._buf
        while len(buf) - pos >= _LENGTH.size:
            (length,) = _LENGTH.unpack_from(buf, pos)
            if length > self._max:
                raise SandboxUnavailable(f"sandbox daemon sent a {length}-byte frame (limit {self._max})")
            end = pos + _LENGTH.size + length
            if len(buf) < end:
                break
            frames.append(bytes(buf[pos + _LENGTH.size : end]))
            pos = end
        del buf[:pos]
        return frames


def encode_frame(message: dict[str, Any]) -> bytes:
    data = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
    if len(data) > MAX_FRAME_BYTES:
        raise ValueError(f"request frame of {len(data)} bytes exceeds {MAX_FRAME_BYTES}")
    return _LENGTH.pack(len(data)) + data


def bootstrap_payload(source: bytes) -> bytes:
    """What the bootstrap reads first: the source length on one line, then the source."""
    return b"%d\n" % len(source) + source


def decode_message(frame: bytes) -> dict[str, Any]:
    try:
        message = json.loads(frame.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise SandboxUnavailable("sandbox daemon sent a malformed frame") from None
    if not isinstance(message, dict):
        raise SandboxUnavailable("sandbox daemon sent a frame that is not an object")
    return message


def to_tool_result(message: dict[str, Any]) -> ToolResult:
    """Convert a daemon response ``{id, content, is_error}`` into a :class:`ToolResult`."""
    raw_blocks = message.get("content")
    if not isinstance(raw_blocks, list):
        return ToolResult.error("sandbox daemon returned a response without content")
    blocks: list[ContentBlock] = []
    for raw in raw_blocks:
        block = _to_block(raw)
        if block is None:
            return ToolResult.error("sandbox daemon returned a malformed content block")
        blocks.append(block)
    return ToolResult(content=tuple(blocks), is_error=bool(message.get("is_error")))


def _to_block(raw: Any) -> ContentBlock | None:
    if not isinstance(raw, dict):
        return None
    kind = raw.get("type")
    if kind == "text":
        text = raw.get("text")
        return TextBlock(text) if isinstance(text, str) else None
    if kind in ("image", "document"):
        media_type = raw.get("media_type")
        data_b64 = raw.get("data_b64")
        if not isinstance(media_type, str) or not isinstance(data_b64, str):
            return None
        try:
            data = base64.b64decode(data_b64, validate=True)
        except (binascii.Error, ValueError):
            return None
        return ImageBlock(media_type, data) if kind == "image" else DocumentBlock(media_type, data)
    return None
