"""The Messages API shapes the local model emits, checked against the anthropic SDK's own types."""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic.types import Message, RawMessageStreamEvent
from pydantic import TypeAdapter

from scripted_model import wire
from scripted_model.script import RedactedThinking, Text, Thinking, ToolUse, Turn

EVENT = TypeAdapter(RawMessageStreamEvent)
BODY = {"model": "claude-test", "max_tokens": 100, "messages": [{"role": "user", "content": "hello there"}]}
TURN = Turn(
    [
        Thinking("Let me think about this for a moment."),
        RedactedThinking("opaque-bytes"),
        Text("Here is a text that is long enough to be split into several chunks."),
        ToolUse("bash", {"command": "echo 'héllo'", "args": [1, 2, {"deep": None}]}, id="toolu_fixed"),
    ]
)


def message_for(turn: Turn, **overrides: Any) -> dict[str, Any]:
    params: dict[str, Any] = {
        "message_id": "msg_01test",
        "model": "claude-test",
        "stop_reason": turn.resolved_stop_reason,
        "stop_sequence": turn.stop_sequence,
        "input_tokens": wire.count_input_tokens(BODY),
    }
    params.update(overrides)
    return wire.message_json(wire.render_content(turn), **params)


@pytest.mark.parametrize(
    "text", ["", "one", "  leading and trailing  ", "many words in a row to chunk up\nwith lines\n\n", "\t"]
)
@pytest.mark.parametrize("words", [1, 3, 100])
def test_chunk_text_concatenates_back(text: str, words: int) -> None:
    chunks = wire.chunk_text(text, words)
    assert "".join(chunks) == text
    assert all(chunks)


def test_chunk_text_splits_into_several_deltas() -> None:
    assert wire.chunk_text("a b c d e f g", 3) == ["a b c ", "d e f ", "g"]


def test_chunk_json_concatenates_back() -> None:
    text = json.dumps({"k": "v" * 50, "n": [1, 2, 3]})
    chunks = wire.chunk_json(text, 7)
    assert "".join(chunks) == text
    assert max(len(c) for c in chunks) <= 7
    with pytest.raises(ValueError):
        wire.chunk_json(text, 0)
    with pytest.raises(ValueError):
        wire.chunk_text(text, 0)


def test_message_json_is_a_valid_sdk_message() -> None:
    message = Message.model_validate(message_for(TURN))
    assert message.stop_reason == "tool_use"
    assert [b.type for b in message.content] == ["thinking", "redacted_thinking", "text", "tool_use"]
    tool_use = message.content[3]
    assert tool_use.type == "tool_use"
    assert tool_use.id == "toolu_fixed"
    assert tool_use.input == {"command": "echo 'héllo'", "args": [1, 2, {"deep": None}]}
    thinking = message.content[0]
    assert thinking.type == "thinking"
    assert thinking.signature == wire.signature_for(thinking.thinking)
    assert message.usage.input_tokens > 0
    assert message.usage.output_tokens > 0
    assert message.usage.cache_read_input_tokens == 0
    assert message.usage.cache_creation_input_tokens == 0


def test_render_content_makes_fresh_tool_ids_unless_pinned() -> None:
    turn = Turn([ToolUse("a"), ToolUse("b", id="toolu_pinned")])
    first, second = wire.render_content(turn)
    assert first["id"].startswith("toolu_01")
    assert second["id"] == "toolu_pinned"
    assert wire.render_content(turn)[0]["id"] != first["id"]


def test_stop_sequence_is_echoed_only_for_stop_sequence() -> None:
    stopped = Turn([Text("x")], stop_reason="stop_sequence", stop_sequence="END")
    assert message_for(stopped)["stop_sequence"] == "END"
    assert message_for(Turn([Text("x")], stop_sequence="END"))["stop_sequence"] is None


def test_stream_events_parse_as_sdk_events_and_rebuild_the_message() -> None:
    message = message_for(TURN)
    events = wire.stream_events(message, words_per_chunk=2, json_chunk_chars=5)
    # The SDK skips ``ping`` before parsing; every other event must parse as its named type.
    assert all(e.event == e.data["type"] for e in events)
    for event in events:
        if event.event != "ping":
            assert EVENT.validate_python(event.data).type == event.event
    names = [e.event for e in events]
    assert names[0] == "message_start"
    assert names[1:3] == ["content_block_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]

    start = events[0].data["message"]
    assert start["content"] == []
    assert start["stop_reason"] is None
    assert start["usage"]["input_tokens"] == message["usage"]["input_tokens"]

    # Rebuild each block from its start and deltas, as a client does.
    blocks: dict[int, dict[str, Any]] = {}
    partial_json: dict[int, str] = {}
    for event in events:
        data = event.data
        if event.event == "content_block_start":
            blocks[data["index"]] = dict(data["content_block"])
        elif event.event == "content_block_delta":
            block, delta = blocks[data["index"]], data["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] = delta["signature"]
            elif delta["type"] == "input_json_delta":
                partial_json[data["index"]] = partial_json.get(data["index"], "") + delta["partial_json"]
    for index, text in partial_json.items():
        blocks[index]["input"] = json.loads(text)
    assert [blocks[i] for i in sorted(blocks)] == message["content"]

    text_deltas = [e for e in events if e.data.get("delta", {}).get("type") == "text_delta"]
    assert len(text_deltas) > 1
    first_json = next(e for e in events if e.data.get("delta", {}).get("type") == "input_json_delta")
    assert first_json.data["delta"]["partial_json"] == ""

    final = events[-2].data
    assert final["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert final["usage"]["output_tokens"] == message["usage"]["output_tokens"]


def test_stream_without_ping() -> None:
    events = wire.stream_events(message_for(Turn.text("hi")), ping=False)
    assert "ping" not in [e.event for e in events]


def test_sse_encoding_is_event_then_compact_data() -> None:
    event = wire.SseEvent("ping", {"type": "ping"})
    assert event.encode() == b'event: ping\ndata: {"type":"ping"}\n\n'
    assert wire.SseEvent("x", {"t": "é"}).encode() == 'event: x\ndata: {"t":"é"}\n\n'.encode()


def test_cut_with_error_stops_after_the_first_delta() -> None:
    events = wire.stream_events(message_for(Turn.text("one two three four five six seven")))
    cut = wire.cut_with_error(events, "overloaded_error", request_id="req_1")
    assert [e.event for e in cut] == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "error",
    ]
    assert cut[-1].data == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
        "request_id": "req_1",
    }


def test_cut_with_error_without_deltas_follows_message_start() -> None:
    events = wire.stream_events(message_for(Turn([RedactedThinking("x")])))
    cut = wire.cut_with_error(events, "api_error", "boom", request_id="req_1")
    assert [e.event for e in cut] == ["message_start", "error"]
    assert cut[-1].data["error"]["message"] == "boom"


@pytest.mark.parametrize(
    ("status", "error_type"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (503, "api_error"),
        (529, "overloaded_error"),
        (418, "invalid_request_error"),
    ],
)
def test_error_type_for_status(status: int, error_type: str) -> None:
    assert wire.error_type_for_status(status) == error_type


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ([], "JSON object"),
        ({"max_tokens": 1, "messages": []}, "model: Field required"),
        ({"model": "m", "messages": []}, "max_tokens: Field required"),
        ({"model": "m", "max_tokens": 1}, "messages: Field required"),
        ({"model": "", "max_tokens": 1, "messages": []}, "model"),
        ({"model": "m", "max_tokens": 0, "messages": []}, "max_tokens"),
        ({"model": "m", "max_tokens": True, "messages": []}, "max_tokens"),
        ({"model": "m", "max_tokens": 1, "messages": []}, "at least one message"),
        ({"model": "m", "max_tokens": 1, "messages": [1]}, "messages.0"),
        (
            {"model": "m", "max_tokens": 1, "messages": [{"role": "system", "content": "x"}]},
            "messages.0.role",
        ),
        ({"model": "m", "max_tokens": 1, "messages": [{"role": "user"}]}, "messages.0.content"),
        ({**BODY, "stream": "yes"}, "stream"),
    ],
)
def test_validate_request_rejects(body: Any, needle: str) -> None:
    problem = wire.validate_request(body)
    assert problem is not None
    assert needle in problem


def test_validate_request_accepts_a_normal_body() -> None:
    assert wire.validate_request({**BODY, "stream": True, "system": "be brief", "tools": []}) is None


def test_token_counts_grow_with_size() -> None:
    small = wire.count_input_tokens(BODY)
    big = wire.count_input_tokens({**BODY, "system": "x" * 4000})
    assert 0 < small < big
    assert wire.count_output_tokens([]) == 1
    assert wire.count_output_tokens([{"type": "text", "text": "x" * 400}]) == 100


def test_ids_have_the_real_prefixes() -> None:
    assert wire.new_message_id().startswith("msg_01")
    assert wire.new_request_id().startswith("req_")
    assert wire.new_message_id() != wire.new_message_id()
