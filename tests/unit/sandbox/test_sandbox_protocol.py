"""The sans-I/O codec between the edge and sandboxd."""

from __future__ import annotations

import base64
import json
import struct

import pytest

from edge_agent.errors import SandboxUnavailable
from edge_agent.sandbox.protocol import (
    STDERR,
    STDOUT,
    FrameDecoder,
    StreamDemuxer,
    bootstrap_payload,
    encode_frame,
    to_tool_result,
)
from outpost_wire.results import DocumentBlock, ImageBlock, TextBlock, ToolResult


def mux(stream: int, payload: bytes) -> bytes:
    return struct.pack(">BxxxL", stream, len(payload)) + payload


def test_demux_reassembles_across_any_split() -> None:
    wire = mux(STDOUT, b"hello") + mux(STDERR, b"oops") + mux(STDOUT, b"") + mux(STDOUT, b"world")
    for step in (1, 2, 3, 7, 8, 9, len(wire)):
        demux = StreamDemuxer()
        out: dict[int, bytes] = {STDOUT: b"", STDERR: b""}
        for i in range(0, len(wire), step):
            for stream, payload in demux.feed(wire[i : i + step]):
                out[stream] += payload
        assert out == {STDOUT: b"helloworld", STDERR: b"oops"}, step


def test_demux_reports_plain_text_errors() -> None:
    with pytest.raises(SandboxUnavailable, match="OCI runtime exec failed"):
        StreamDemuxer().feed(b"OCI runtime exec failed: exec failed: executable file not found")


def test_frames_across_any_split() -> None:
    messages = [{"id": i, "content": [{"type": "text", "text": "x" * i}]} for i in range(5)]
    wire = b"".join(encode_frame(m) for m in messages)
    for step in (1, 3, 4, 5, 100, len(wire)):
        decoder = FrameDecoder()
        frames: list[bytes] = []
        for i in range(0, len(wire), step):
            frames += decoder.feed(wire[i : i + step])
        assert [json.loads(f) for f in frames] == messages
        assert decoder.buffered == b""


def test_frame_limit() -> None:
    decoder = FrameDecoder(max_frame_bytes=10)
    with pytest.raises(SandboxUnavailable, match="11-byte frame"):
        decoder.feed(struct.pack(">I", 11))


def test_bootstrap_payload() -> None:
    assert bootstrap_payload(b"print(1)\n") == b"9\nprint(1)\n"


def test_to_tool_result() -> None:
    png = b"\x89PNG"
    result = to_tool_result(
        {
            "id": 1,
            "is_error": False,
            "content": [
                {"type": "text", "text": "hi"},
                {"type": "image", "media_type": "image/png", "data_b64": base64.b64encode(png).decode()},
                {"type": "document", "media_type": "application/pdf", "data_b64": ""},
            ],
        }
    )
    assert result == ToolResult(
        content=(TextBlock("hi"), ImageBlock("image/png", png), DocumentBlock("application/pdf", b"")),
        is_error=False,
    )
    assert to_tool_result({"id": 2, "is_error": True, "content": [{"type": "text", "text": "no"}]}).is_error


@pytest.mark.parametrize(
    "message",
    [
        {"id": 1},
        {"id": 1, "content": "text"},
        {"id": 1, "content": [{"type": "video"}]},
        {"id": 1, "content": [{"type": "text", "text": 3}]},
        {"id": 1, "content": [{"type": "image", "media_type": "image/png", "data_b64": "!!"}]},
    ],
)
def test_malformed_responses_become_errors(message: dict[str, object]) -> None:
    result = to_tool_result(message)
    assert result.is_error and "sandbox daemon returned" in result.plain_text
