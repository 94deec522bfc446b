"""Turns, content blocks and scripts of the local model."""

from __future__ import annotations

import pytest

from scripted_model.script import (
    InvalidTurn,
    LocalModelError,
    RedactedThinking,
    Script,
    ScriptExhausted,
    Text,
    Thinking,
    ToolUse,
    Turn,
)

REQUEST = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}


def test_stop_reason_is_inferred_from_the_blocks() -> None:
    assert Turn([Text("hi")]).resolved_stop_reason == "end_turn"
    assert Turn([Text("hi"), ToolUse("bash", {"command": "ls"})]).resolved_stop_reason == "tool_use"
    assert Turn([], stop_reason="max_tokens").resolved_stop_reason == "max_tokens"
    assert Turn([ToolUse("bash")], stop_reason="pause_turn").resolved_stop_reason == "pause_turn"


def test_turn_content_is_frozen_to_a_tuple() -> None:
    blocks = [Text("a")]
    turn = Turn(blocks)
    blocks.append(Text("b"))
    assert turn.content == (Text("a"),)


def test_unknown_stop_reason_is_rejected() -> None:
    with pytest.raises(InvalidTurn):
        Turn([Text("x")], stop_reason="bogus")  # type: ignore[arg-type]


def test_turn_helpers() -> None:
    assert Turn.text("hi") == Turn((Text("hi"),))
    turn = Turn.tool_use("bash", {"command": "ls"}, preamble="Listing.")
    assert turn.content == (Text("Listing."), ToolUse("bash", {"command": "ls"}))
    assert turn.resolved_stop_reason == "tool_use"


def test_turn_from_dict_reads_every_block_kind() -> None:
    turn = Turn.from_dict(
        {
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "hello"},
                {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}},
            ],
            "stop_reason": "tool_use",
        }
    )
    assert turn.content == (
        Thinking("hmm", "sig"),
        RedactedThinking("opaque"),
        Text("hello"),
        ToolUse("bash", {"command": "ls"}, "toolu_1"),
    )
    assert turn.stop_reason == "tool_use"


def test_turn_from_dict_accepts_string_content_and_stop_sequence() -> None:
    turn = Turn.from_dict({"content": "done", "stop_reason": "stop_sequence", "stop_sequence": "END"})
    assert turn.content == (Text("done"),)
    assert turn.stop_sequence == "END"


@pytest.mark.parametrize(
    "data",
    [
        [],
        {"content": [], "extra": 1},
        {"content": 3},
        {"content": [{"type": "image"}]},
        {"content": [{"type": "text"}]},
        {"content": [{"type": "text", "text": 1}]},
        {"content": [{"type": "tool_use", "name": "x", "input": []}]},
        {"content": [{"type": "tool_use", "name": "x", "id": 5}]},
        {"content": [{"type": "thinking", "thinking": "t", "signature": 1}]},
        {"content": ["text"]},
        {"content": [], "stop_reason": "nope"},
        {"content": [], "stop_sequence": 1},
    ],
)
def test_turn_from_dict_rejects_bad_shapes(data: object) -> None:
    with pytest.raises(InvalidTurn):
        Turn.from_dict(data)  # type: ignore[arg-type]


def test_script_serves_turns_in_order_then_is_exhausted() -> None:
    script = Script(["one", Turn.tool_use("bash", {"command": "ls"})])
    assert len(script) == 2
    assert script.respond(REQUEST) == Turn.text("one")
    assert script.respond(REQUEST).resolved_stop_reason == "tool_use"
    assert script.served == 2
    assert script.remaining == 0
    with pytest.raises(ScriptExhausted) as info:
        script.respond(REQUEST)
    assert info.value.served == 2
    assert "2" in str(info.value)


def test_peek_does_not_consume() -> None:
    script = Script(["one"])
    assert script.peek(REQUEST) == Turn.text("one")
    assert script.remaining == 1
    assert script(REQUEST) == Turn.text("one")


def test_append_extends_a_running_script() -> None:
    script = Script()
    with pytest.raises(ScriptExhausted):
        script.peek()
    script.append("late")
    assert script.respond() == Turn.text("late")


def test_script_from_json() -> None:
    script = Script.from_json('["hi", {"content": [{"type": "tool_use", "name": "bash", "input": {}}]}]')
    assert script.respond() == Turn.text("hi")
    assert script.respond().content == (ToolUse("bash", {}),)


@pytest.mark.parametrize("text", ["{", '{"content": []}', '[{"content": 1}]'])
def test_script_from_json_rejects_bad_scripts(text: str) -> None:
    with pytest.raises(InvalidTurn):
        Script.from_json(text)


def test_errors_share_one_root_outside_the_daemons_trees() -> None:
    assert issubclass(ScriptExhausted, LocalModelError)
    assert issubclass(InvalidTurn, LocalModelError)
    # A test tool, not part of the control plane: its errors are no ControlPlaneError.
    assert LocalModelError.__bases__ == (Exception,)
