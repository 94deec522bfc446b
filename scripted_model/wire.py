"""The Messages API wire format, as the local model server speaks it. No I/O, no clock.

Shapes follow the real API (and the ``anthropic`` SDK types that parse them):

- a non-streaming response is a ``message`` object (:func:`message_json`);
- a streaming response is a list of server-sent events (:func:`stream_events`)::

      message_start          the message with empty content, stop_reason null, usage
      content_block_start    per block: the block with empty text / input / thinking
      ping                   once, after the first content_block_start
      content_block_delta    text_delta | input_json_delta | thinking_delta, then signature_delta
      content_block_stop
      message_delta          stop_reason, stop_sequence, usage (cumulative output_tokens)
      message_stop

- an error is ``{"type": "error", "error": {"type": ..., "message": ...}, "request_id": ...}``
  (:func:`error_body`); mid-stream it is an ``error`` event with the same body.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scripted_model.script import RedactedThinking, StopReason, Text, Thinking, ToolUse, Turn

__all__ = [
    "ERROR_TYPES",
    "SseEvent",
    "chunk_json",
    "chunk_text",
    "compaction_summary",
    "count_input_tokens",
    "count_output_tokens",
    "cut_with_error",
    "error_body",
    "error_type_for_status",
    "message_json",
    "new_message_id",
    "new_request_id",
    "new_tool_use_id",
    "render_content",
    "signature_for",
    "stream_events",
    "usage_json",
    "validate_request",
]

ERROR_TYPES: Mapping[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
"""HTTP status → the real API's ``error.type``."""

_DEFAULT_MESSAGES: Mapping[str, str] = {
    "invalid_request_error": "Invalid request",
    "authentication_error": "invalid x-api-key",
    "billing_error": "Your credit balance is too low",
    "permission_error": "Your API key does not have permission to use the specified resource.",
    "not_found_error": "Not found",
    "request_too_large": "Request exceeds the maximum allowed number of bytes.",
    "rate_limit_error": "Number of request tokens has exceeded your per-minute rate limit",
    "api_error": "Internal server error",
    "timeout_error": "Request timed out",
    "overloaded_error": "Overloaded",
}

_ID_ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def _random_suffix(length: int) -> str:
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(length))


def new_message_id() -> str:
    """A fresh id in the real API's ``msg_01…`` form."""
    return "msg_01" + _random_suffix(22)


def new_tool_use_id() -> str:
    """A fresh id in the real API's ``toolu_01…`` form."""
    return "toolu_01" + _random_suffix(22)


def new_request_id() -> str:
    """A fresh id in the real API's ``req_…`` form (``request-id`` header, error bodies)."""
    return "req_011C" + _random_suffix(20)


def signature_for(thinking: str) -> str:
    """An opaque thinking signature, stable for a given text."""
    digest = hashlib.sha256(b"outpost-local-model\0" + thinking.encode()).digest()
    return base64.b64encode(digest * 2).decode()


def error_type_for_status(status: int) -> str:
    """The real API's ``error.type`` for an HTTP status."""
    if status in ERROR_TYPES:
        return ERROR_TYPES[status]
    return "api_error" if status >= 500 else "invalid_request_error"


def error_body(error_type: str, message: str | None = None, *, request_id: str) -> dict[str, Any]:
    """The real API's error object; ``message`` defaults to the API's usual text for the type."""
    return {
        "type": "error",
        "error": {"type": error_type, "message": message or _DEFAULT_MESSAGES.get(error_type, "Error")},
        "request_id": request_id,
    }


def validate_request(body: Any) -> str | None:
    """Check a ``POST /v1/messages`` body; the ``invalid_request_error`` message, or None when valid.

    Checks what the server relies on (model, max_tokens, messages, stream), not every API rule.
    """
    if not isinstance(body, Mapping):
        return "There was an error parsing the body of your request: expected a JSON object."
    for key in ("model", "max_tokens", "messages"):
        if key not in body:
            return f"{key}: Field required"
    if not isinstance(body["model"], str) or not body["model"]:
        return "model: Input should be a non-empty string"
    max_tokens = body["max_tokens"]
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        return "max_tokens: Input should be an integer greater than or equal to 1"
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            return f"messages.{index}: Input should be an object"
        if message.get("role") not in ("user", "assistant"):
            return f"messages.{index}.role: Input should be 'user' or 'assistant'"
        if not isinstance(message.get("content"), str | list):
            return f"messages.{index}.content: Input should be a string or a list of content blocks"
    if not isinstance(body.get("stream", False), bool):
        return "stream: Input should be a valid boolean"
    return None


def count_input_tokens(body: Mapping[str, Any]) -> int:
    """A plausible input token count: a quarter of the JSON size of system, messages and tools."""
    prompt = [body.get("system"), body.get("messages"), body.get("tools")]
    return max(1, len(json.dumps(prompt, ensure_ascii=False)) // 4)


def compaction_summary(messages: Sequence[Any]) -> str:
    """The deterministic summary of a compaction request: how much it covered and the start of
    the first user text."""
    texts: list[str] = []
    chars = 0
    for message in messages:
        content = message.get("content") if isinstance(message, Mapping) else None
        chars += len(json.dumps(content, ensure_ascii=False))
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        for block in blocks:
            if isinstance(block, Mapping) and block.get("type") == "text" and block.get("text"):
                texts.append(str(block["text"]))
    first = texts[0][:200] if texts else ""
    return f"Compacted {len(messages)} messages ({chars} characters). The conversation began: {first}"


def count_output_tokens(content: Sequence[Mapping[str, Any]]) -> int:
    """A plausible output token count: a quarter of the generated characters, at least 1."""
    chars = 0
    for block in content:
        kind = block["type"]
        if kind == "text":
            chars += len(block["text"])
        elif kind == "tool_use":
            chars += len(block["name"]) + len(json.dumps(block["input"], ensure_ascii=False))
        elif kind == "thinking":
            chars += len(block["thinking"])
        elif kind == "redacted_thinking":
            chars += len(block["data"])
        elif kind == "compaction":
            chars += len(block.get("content") or "")
    return max(1, chars // 4)


def usage_json(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    """The ``usage`` object of a message, with zero cache counts, as the real API sends it."""
    return {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def render_content(turn: Turn, *, new_tool_id: Callable[[], str] = new_tool_use_id) -> list[dict[str, Any]]:
    """The content blocks of ``turn`` as the API returns them (tool ids and signatures filled in)."""
    blocks: list[dict[str, Any]] = []
    for block in turn.content:
        if isinstance(block, Text):
            blocks.append({"type": "text", "text": block.text})
        elif isinstance(block, ToolUse):
            blocks.append(
                {
                    "type": "tool_use",
                    "id": block.id if block.id is not None else new_tool_id(),
                    "name": block.name,
                    "input": dict(block.input),
                }
            )
        elif isinstance(block, Thinking):
            signature = block.signature if block.signature is not None else signature_for(block.thinking)
            blocks.append({"type": "thinking", "thinking": block.thinking, "signature": signature})
        elif isinstance(block, RedactedThinking):
            blocks.append({"type": "redacted_thinking", "data": block.data})
    return blocks


def message_json(
    content: Sequence[Mapping[str, Any]],
    *,
    message_id: str,
    model: str,
    stop_reason: StopReason,
    stop_sequence: str | None,
    input_tokens: int,
    context_management: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The complete ``message`` object (the non-streaming response body); ``context_management``:
    the edits applied, for a request that asked for them."""
    message = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [dict(b) for b in content],
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence if stop_reason == "stop_sequence" else None,
        "usage": usage_json(input_tokens, count_output_tokens(content)),
    }
    if context_management is not None:
        message["context_management"] = dict(context_management)
    return message


@dataclass(frozen=True)
class SseEvent:
    """One server-sent event: its name and its JSON data."""

    event: str
    data: Mapping[str, Any]

    def encode(self) -> bytes:
        """The event's bytes on the wire: ``event: …`` and compact ``data: …``, then a blank line."""
        payload = json.dumps(self.data, ensure_ascii=False, separators=(",", ":"))
        return f"event: {self.event}\ndata: {payload}\n\n".encode()


_WORD = re.compile(r"\s*\S+\s*|\s+")


def chunk_text(text: str, words_per_chunk: int = 3) -> list[str]:
    """Split ``text`` into chunks of a few words; the chunks concatenate back to ``text``."""
    if words_per_chunk < 1:
        raise ValueError("words_per_chunk must be at least 1")
    words = _WORD.findall(text)
    return ["".join(words[i : i + words_per_chunk]) for i in range(0, len(words), words_per_chunk)]


def chunk_json(text: str, chars_per_chunk: int = 16) -> list[str]:
    """Split serialized JSON into ``partial_json`` pieces of at most ``chars_per_chunk`` characters."""
    if chars_per_chunk < 1:
        raise ValueError("chars_per_chunk must be at least 1")
    return [text[i : i + chars_per_chunk] for i in range(0, len(text), chars_per_chunk)]


def _delta(index: int, delta: Mapping[str, Any]) -> SseEvent:
    return SseEvent("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})


def _block_events(
    index: int, block: Mapping[str, Any], words_per_chunk: int, json_chunk_chars: int
) -> tuple[dict[str, Any], list[SseEvent]]:
    """The ``content_block_start`` payload and the deltas for one final block."""
    kind = block["type"]
    if kind == "text":
        deltas = [
            _delta(index, {"type": "text_delta", "text": c})
            for c in chunk_text(block["text"], words_per_chunk)
        ]
        return {"type": "text", "text": ""}, deltas
    if kind == "tool_use":
        serialized = json.dumps(block["input"], ensure_ascii=False)
        pieces = ["", *chunk_json(serialized, json_chunk_chars)]
        deltas = [_delta(index, {"type": "input_json_delta", "partial_json": p}) for p in pieces]
        return {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}, deltas
    if kind == "thinking":
        deltas = [
            _delta(index, {"type": "thinking_delta", "thinking": c})
            for c in chunk_text(block["thinking"], words_per_chunk)
        ]
        deltas.append(_delta(index, {"type": "signature_delta", "signature": block["signature"]}))
        return {"type": "thinking", "thinking": "", "signature": ""}, deltas
    return dict(block), []


def stream_events(
    message: Mapping[str, Any],
    *,
    words_per_chunk: int = 3,
    json_chunk_chars: int = 16,
    ping: bool = True,
) -> list[SseEvent]:
    """The events that stream ``message`` (a :func:`message_json` object), in order."""
    usage = message["usage"]
    skeleton = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    skeleton.pop("context_management", None)  # sent with message_delta, as the API does
    skeleton["usage"] = {**usage, "output_tokens": 1}
    events = [SseEvent("message_start", {"type": "message_start", "message": skeleton})]
    for index, block in enumerate(message["content"]):
        start, deltas = _block_events(index, block, words_per_chunk, json_chunk_chars)
        events.append(
            SseEvent(
                "content_block_start", {"type": "content_block_start", "index": index, "content_block": start}
            )
        )
        if ping and index == 0:
            events.append(SseEvent("ping", {"type": "ping"}))
        events.extend(deltas)
        events.append(SseEvent("content_block_stop", {"type": "content_block_stop", "index": index}))
    delta: dict[str, Any] = {
        "type": "message_delta",
        "delta": {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]},
        "usage": {
            "input_tokens": usage["input_tokens"],
            "cache_creation_input_tokens": usage["cache_creation_input_tokens"],
            "cache_read_input_tokens": usage["cache_read_input_tokens"],
            "output_tokens": usage["output_tokens"],
        },
    }
    if "context_management" in message:
        delta["context_management"] = message["context_management"]
    events.append(SseEvent("message_delta", delta))
    events.append(SseEvent("message_stop", {"type": "message_stop"}))
    return events


def cut_with_error(
    events: Sequence[SseEvent], error_type: str, message: str | None = None, *, request_id: str
) -> list[SseEvent]:
    """A stream that fails part-way: ``events`` up to the first content delta, then an ``error`` event.

    With no content delta at all, the error follows ``message_start``.
    """
    kept: list[SseEvent] = []
    for event in events:
        if event.event in ("message_delta", "message_stop"):
            break
        kept.append(event)
        if event.event == "content_block_delta":
            break
    if not any(e.event == "content_block_delta" for e in kept):
        kept = kept[:1]
    return [*kept, SseEvent("error", error_body(error_type, message, request_id=request_id))]
