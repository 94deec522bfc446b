"""The demo and echo responders, and the helpers that read a request."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Mapping
from typing import Any

from scripted_model.responders import (
    DEMO_PROGRAM,
    DemoResponder,
    demo_responder,
    echo_responder,
    last_prompt_text,
    offered_tool_names,
    thinking_enabled,
    tool_result_text,
    tool_results_since_prompt,
)
from scripted_model.script import Text, Thinking, ToolUse, Turn
from scripted_model.wire import render_content

TOOLS = [
    {"name": "bash", "description": "run", "input_schema": {"type": "object"}},
    {"name": "write", "description": "write", "input_schema": {"type": "object"}},
]


def request(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 1000, "messages": messages, "tools": TOOLS, **extra}


def run_program(source: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(source, "hello.py", "exec"), {})
    return out.getvalue()


def fake_tool(block: Mapping[str, Any], files: dict[str, str]) -> dict[str, Any]:
    """A stand-in sandbox: ``write`` stores the file, ``bash`` runs ``python3 <file>``."""
    tool_input = block["input"]
    if block["name"] == "write":
        files[tool_input["file_path"]] = tool_input["content"]
        output = f"wrote {len(tool_input['content'])} bytes to {tool_input['file_path']}"
    else:
        output = run_program(files[tool_input["command"].split()[-1]])
    return {"type": "tool_result", "tool_use_id": block["id"], "content": output}


def drive(responder: DemoResponder, messages: list[dict[str, Any]], **extra: Any) -> list[Turn]:
    """Play the agent loop against the responder until it ends its turn."""
    files: dict[str, str] = {}
    turns = []
    for _ in range(10):
        turn = responder(request(messages, **extra))
        turns.append(turn)
        content = render_content(turn)
        messages.append({"role": "assistant", "content": content})
        if turn.resolved_stop_reason != "tool_use":
            return turns
        results = [fake_tool(b, files) for b in content if b["type"] == "tool_use"]
        messages.append({"role": "user", "content": results})
    raise AssertionError("the demo did not end its turn")


def test_demo_program_prints_what_the_demo_promises() -> None:
    assert (
        run_program(DEMO_PROGRAM) == "Hello from the Outpost sandbox!\nThe first ten squares add up to 385.\n"
    )


def test_demo_writes_then_runs_then_quotes_the_output() -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Show me what you can do."}]
    write, bash, final = drive(demo_responder, messages)
    assert write.resolved_stop_reason == "tool_use"
    assert isinstance(write.content[0], Text)
    assert write.content[1] == ToolUse("write", {"file_path": "hello.py", "content": DEMO_PROGRAM})
    assert bash.content[1] == ToolUse("bash", {"command": "python3 hello.py"})
    assert final.resolved_stop_reason == "end_turn"
    (text,) = final.content
    assert isinstance(text, Text)
    assert "The first ten squares add up to 385." in text.text
    assert "python3 hello.py" in text.text


def test_demo_is_decided_by_the_request_alone() -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    drive(demo_responder, messages)
    # Replaying any prefix of the conversation gives the same answer again.
    for end in range(1, len(messages), 2):
        replayed = DemoResponder()(request(messages[:end]))
        assert render_content(replayed, new_tool_id=lambda: "x") == [
            {**b, "id": "x"} if b["type"] == "tool_use" else b for b in messages[end]["content"]
        ]


def test_a_new_prompt_starts_the_demo_over() -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "first"}]
    drive(demo_responder, messages)
    messages.append({"role": "user", "content": [{"type": "text", "text": "again"}]})
    turn = demo_responder(request(messages))
    assert turn.content[1] == ToolUse("write", {"file_path": "hello.py", "content": DEMO_PROGRAM})


def test_demo_reports_a_failed_tool_call() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "write", "input": {}}]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "disk full", "is_error": True}
            ],
        },
    ]
    turn = demo_responder(request(messages))
    assert turn.resolved_stop_reason == "end_turn"
    assert isinstance(turn.content[0], Text)
    assert "disk full" in turn.content[0].text


def test_demo_without_its_tools_answers_in_text() -> None:
    turn = demo_responder({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "go"}]})
    assert turn.resolved_stop_reason == "end_turn"
    assert isinstance(turn.content[0], Text)
    assert "`bash` and `write`" in turn.content[0].text


def test_demo_thinks_first_when_thinking_is_enabled() -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    turns = drive(demo_responder, messages, thinking={"type": "enabled", "budget_tokens": 1024})
    assert len(turns) == 3
    assert all(isinstance(t.content[0], Thinking) for t in turns)


def test_demo_tool_names_and_command_are_configurable() -> None:
    responder = DemoResponder(
        write_tool="write", bash_tool="bash", file_path="demo/x.py", command="python x.py"
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    turn = responder(request(messages))
    assert isinstance(turn.content[1], ToolUse)
    assert turn.content[1].input["file_path"] == "demo/x.py"
    assert responder.run_command == "python x.py"


def test_echo_responder() -> None:
    turn = echo_responder(request([{"role": "user", "content": [{"type": "text", "text": "ping"}]}]))
    assert turn == Turn.text("You said: ping")


def test_request_helpers() -> None:
    body = request(
        [
            {"role": "user", "content": "old"},
            {"role": "assistant", "content": "ok"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "new "}, {"type": "text", "text": "prompt"}],
            },
            {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "bash", "input": {}}]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "a", "content": [{"type": "text", "text": "out"}]}
                ],
            },
        ],
        thinking={"type": "adaptive"},
    )
    assert last_prompt_text(body) == "new prompt"
    results = tool_results_since_prompt(body)
    assert [tool_result_text(r) for r in results] == ["out"]
    assert offered_tool_names(body) == {"bash", "write"}
    assert thinking_enabled(body)
    assert not thinking_enabled({"thinking": {"type": "disabled"}})
    assert last_prompt_text({"messages": "nonsense"}) is None
    assert tool_result_text({"type": "tool_result"}) == ""
