"""Responders for the local model, and helpers to read a Messages API request.

A responder decides from the request alone (the conversation it carries), never from state of its own,
so a restarted control plane replaying the same conversation gets the same answers.

:data:`demo_responder` drives the offline demo: asked anything, it writes a small Python program with the
``write`` tool, runs it with the ``bash`` tool, and answers by quoting the output it saw.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scripted_model.script import Block, Text, Thinking, ToolUse, Turn

__all__ = [
    "DEMO_PROGRAM",
    "DemoResponder",
    "demo_responder",
    "echo_responder",
    "last_prompt_text",
    "message_blocks",
    "offered_tool_names",
    "thinking_enabled",
    "tool_result_text",
    "tool_results_since_prompt",
]

DEMO_PROGRAM = '''\
"""A tiny program written by the Outpost offline demo model."""

squares = [n * n for n in range(1, 11)]
print("Hello from the Outpost sandbox!")
print(f"The first ten squares add up to {sum(squares)}.")
'''
"""The program the demo responder writes. Its output is two lines ending in ``385.``"""


def message_blocks(message: Any) -> list[Mapping[str, Any]]:
    """The content blocks of a message; string content counts as one text block."""
    if not isinstance(message, Mapping):
        return []
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b for b in content if isinstance(b, Mapping)]
    return []


def _messages(request: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    messages = request.get("messages")
    if not isinstance(messages, list):
        return []
    return [m for m in messages if isinstance(m, Mapping)]


def _is_prompt(message: Mapping[str, Any]) -> bool:
    """A user message that carries no tool results: the start of a new user turn."""
    return message.get("role") == "user" and not any(
        b.get("type") == "tool_result" for b in message_blocks(message)
    )


def _last_prompt_index(messages: Sequence[Mapping[str, Any]]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        if _is_prompt(messages[index]):
            return index
    return None


def last_prompt_text(request: Mapping[str, Any]) -> str | None:
    """The text of the last user message that is not a tool-result message, or None."""
    messages = _messages(request)
    index = _last_prompt_index(messages)
    if index is None:
        return None
    return "".join(str(b.get("text", "")) for b in message_blocks(messages[index]) if b.get("type") == "text")


def tool_results_since_prompt(request: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The ``tool_result`` blocks sent after the last user prompt, oldest first."""
    messages = _messages(request)
    index = _last_prompt_index(messages)
    start = 0 if index is None else index + 1
    return [
        b
        for m in messages[start:]
        if m.get("role") == "user"
        for b in message_blocks(m)
        if b.get("type") == "tool_result"
    ]


def tool_result_text(block: Mapping[str, Any]) -> str:
    """The text of a ``tool_result`` block (string content, or its text sub-blocks joined)."""
    content = block.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(b.get("text", "")) for b in content if isinstance(b, Mapping) and b.get("type") == "text"
        )
    return ""


def offered_tool_names(request: Mapping[str, Any]) -> frozenset[str]:
    """The names of the tools the request offers."""
    tools = request.get("tools")
    if not isinstance(tools, list):
        return frozenset()
    return frozenset(str(t["name"]) for t in tools if isinstance(t, Mapping) and "name" in t)


def thinking_enabled(request: Mapping[str, Any]) -> bool:
    """Whether the request turns extended thinking on (``enabled`` or ``adaptive``)."""
    thinking = request.get("thinking")
    return isinstance(thinking, Mapping) and thinking.get("type") in ("enabled", "adaptive")


def echo_responder(request: Mapping[str, Any]) -> Turn:
    """Answer every request with ``You said: <last prompt text>``."""
    return Turn.text(f"You said: {last_prompt_text(request) or ''}")


@dataclass(frozen=True)
class DemoResponder:
    """Write a program, run it, report its output; decided from the request alone.

    The stage is the number of tool results sent since the last user prompt:

    - 0: a short text and a ``write`` tool_use creating :attr:`file_path` with :attr:`program`;
    - 1: a short text and a ``bash`` tool_use running :attr:`command`;
    - 2 or more: a final text quoting the last tool result, ``end_turn``.

    If the last tool result is an error, the turn ends with a text quoting the error. If the request does
    not offer both tools, the answer is a text saying so. When the request enables thinking, each turn
    starts with a short thinking block.
    """

    write_tool: str = "write"
    bash_tool: str = "bash"
    file_path: str = "hello.py"
    program: str = DEMO_PROGRAM
    command: str | None = None

    @property
    def run_command(self) -> str:
        """The shell command of the ``bash`` step."""
        return self.command if self.command is not None else f"python3 {self.file_path}"

    def __call__(self, request: Mapping[str, Any]) -> Turn:
        missing = sorted({self.write_tool, self.bash_tool} - offered_tool_names(request))
        if missing:
            return self._turn(
                request,
                "The request offers no such tools; I stop here.",
                Text(
                    "(Outpost local demo model) I need the "
                    + " and ".join(f"`{name}`" for name in missing)
                    + " tool(s) to run the demo, and this request does not offer them."
                ),
            )
        results = tool_results_since_prompt(request)
        if results and results[-1].get("is_error"):
            output = tool_result_text(results[-1]).rstrip("\n")
            return self._turn(
                request,
                "The tool call failed; report the error instead of going on.",
                Text(f"The tool call failed, so I stopped. The error was:\n\n```\n{output}\n```"),
            )
        if not results:
            return self._turn(
                request,
                "The user wants to see the sandbox work. I will write a small Python program first.",
                Text(f"I'll write a small Python program to `{self.file_path}` and then run it."),
                ToolUse(self.write_tool, {"file_path": self.file_path, "content": self.program}),
            )
        if len(results) == 1:
            return self._turn(
                request,
                "The file is written. Now run it.",
                Text("The file is written. Now let me run it."),
                ToolUse(self.bash_tool, {"command": self.run_command}),
            )
        output = tool_result_text(results[-1]).rstrip("\n")
        quoted = f"```\n{output}\n```" if output else "(no output)"
        return self._turn(
            request,
            "The program ran. Report what it printed.",
            Text(f"I ran `{self.run_command}` in the sandbox. It printed:\n\n{quoted}"),
        )

    @staticmethod
    def _turn(request: Mapping[str, Any], thought: str, *blocks: Block) -> Turn:
        content: list[Block] = [Thinking(thought)] if thinking_enabled(request) else []
        content.extend(blocks)
        return Turn(content)


demo_responder = DemoResponder()
"""The offline demo's responder, with the agent toolset's tool names ``write`` and ``bash``."""
