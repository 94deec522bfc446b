"""The model client's server-sent-event reader and its error classification, on bytes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from control_plane.harness.model import (
    AnthropicModelClient,
    ModelRetryableError,
    ModelTerminalError,
    _sse_events,
    error_for_status,
)

STREAM = (
    b"event: message_start\n"
    b'data: {"type":"message_start","message":{"id":"msg_1"}}\n'
    b"\n"
    b": a comment line\n"
    b"id: 7\n"
    b"retry: 1000\n"
    b"event: ping\n"
    b'data: {"type": "ping"}\n'
    b"\n"
    b"event: content_block_delta\n"
    b'data: {"type":"content_block_delta",\n'
    b'data: "delta":{"text":"caf\xc3\xa9 \xe2\x9c\x93"}}\n'
    b"\n"
    b"data: no event name: skipped\n"
    b"\n"
    b"event: message_stop\n"
    b'data: {"type":"message_stop"}\n'
)
EXPECTED = [
    ("message_start", b'{"type":"message_start","message":{"id":"msg_1"}}'),
    ("ping", b'{"type": "ping"}'),
    ("content_block_delta", b'{"type":"content_block_delta",\n"delta":{"text":"caf\xc3\xa9 \xe2\x9c\x93"}}'),
    ("message_stop", b'{"type":"message_stop"}'),  # the last event needs no blank line after it
]


async def _chunks(parts: list[bytes]) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def _read(parts: list[bytes]) -> list[tuple[str, bytes]]:
    return [item async for item in _sse_events(_chunks(parts))]


async def test_whole_stream_in_one_chunk() -> None:
    assert await _read([STREAM]) == EXPECTED


async def test_split_at_every_byte() -> None:
    """A chunk boundary anywhere (inside a line, a multi-byte character, a CRLF) changes nothing."""
    for cut in range(1, len(STREAM)):
        assert await _read([STREAM[:cut], STREAM[cut:]]) == EXPECTED, cut
    assert await _read([bytes([b]) for b in STREAM]) == EXPECTED


async def test_crlf_line_endings() -> None:
    crlf = STREAM.replace(b"\n", b"\r\n")
    assert await _read([crlf]) == EXPECTED
    for cut in range(1, len(crlf), 7):
        assert await _read([crlf[:cut], crlf[cut:]]) == EXPECTED, cut


async def test_empty_stream_yields_nothing() -> None:
    assert await _read([]) == []
    assert await _read([b"\n\n: only comments\n\n"]) == []


def _error(kind: str, message: str = "m") -> bytes:
    return f'{{"type":"error","error":{{"type":"{kind}","message":"{message}"}}}}'.encode()


@pytest.mark.parametrize(
    ("status", "body", "kind", "error_type"),
    [
        (529, b"", ModelRetryableError, "model_overloaded_error"),
        (200, _error("overloaded_error", "Overloaded"), ModelRetryableError, "model_overloaded_error"),
        (200, _error("rate_limit_error", "slow down"), ModelRetryableError, "model_rate_limited_error"),
        # As the SDK classifies it: an error under status 400 (here, in a 200 stream) is retried.
        (200, _error("invalid_request_error", "x"), ModelRetryableError, "model_request_failed_error"),
        (502, b"<html>bad gateway</html>", ModelRetryableError, "model_request_failed_error"),
        (408, b"", ModelRetryableError, "model_request_failed_error"),
        (307, b"", ModelRetryableError, "model_request_failed_error"),  # redirects are not followed
        (400, _error("invalid_request_error", "bad"), ModelTerminalError, "model_request_failed_error"),
        (402, b"", ModelTerminalError, "billing_error"),
        (403, _error("billing_error", "pay"), ModelTerminalError, "billing_error"),
    ],
)  # fmt: skip
def test_errors_are_classified_as_the_sdk_would(
    status: int, body: bytes, kind: type[Exception], error_type: str
) -> None:
    error = error_for_status(status, body)
    assert type(error) is kind
    assert error.error_type == error_type
    assert str(status) in str(error) or "overloaded" in str(error) or "rate limited" in str(error)


def test_the_error_message_is_the_apis_own() -> None:
    error = error_for_status(400, _error("invalid_request_error", "max_tokens: too big"))
    assert "max_tokens: too big" in str(error)
    assert "HTTP 418" in str(error_for_status(418, b"   "))


def test_a_huge_error_body_is_cut_in_the_message() -> None:
    error = error_for_status(500, b"x" * 100_000)
    assert len(str(error)) < 2100


async def test_a_closed_client_refuses_with_a_retryable_error() -> None:
    """At shutdown the harness may still ask: the session is retried (by the next process), never
    terminated."""
    client = AnthropicModelClient(base_url="http://127.0.0.1:9", api_key="k")
    await client.close()
    with pytest.raises(ModelRetryableError, match="closed"):
        await client.stream({"model": "m", "max_tokens": 1, "messages": []}, lambda _: None)
