"""What the local model says: scripted turns, and responders that choose a turn from the request.

A :class:`Turn` is one assistant response: an ordered list of content blocks (:class:`Text`,
:class:`ToolUse`, :class:`Thinking`, :class:`RedactedThinking`) and a stop reason. The server asks a
*source* for the turn to serve for each request; a source is either

- a :class:`Script`, which hands out its turns in order, one per request, or
- a :data:`Responder`, any callable ``(request_json) -> Turn`` (or an awaitable of one), which can
  look at the conversation to decide.

Errors raised here::

    LocalModelError               the local model server or its script was misused
    ├── ScriptExhausted           a Script was asked for more turns than it holds
    └── InvalidTurn               a turn given as JSON does not have the expected shape

Nothing in this module does I/O or reads a clock.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, get_args

__all__ = [
    "Block",
    "InvalidTurn",
    "LocalModelError",
    "RedactedThinking",
    "Responder",
    "Script",
    "ScriptExhausted",
    "StopReason",
    "Text",
    "Thinking",
    "ToolUse",
    "Turn",
]

StopReason: TypeAlias = Literal[
    "end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal", "compaction"
]
"""The stop reasons a scripted turn may end with (a subset of the real API's)."""

_STOP_REASONS: frozenset[str] = frozenset(get_args(StopReason))


class LocalModelError(Exception):
    """The local model server or its script was misused."""


class ScriptExhausted(LocalModelError):
    """A :class:`Script` was asked for a turn after serving all of its turns."""

    def __init__(self, served: int) -> None:
        super().__init__(f"local model script exhausted: all {served} scripted turn(s) were served")
        self.served = served


class InvalidTurn(LocalModelError):
    """A turn or content block given as JSON does not have the expected shape."""


@dataclass(frozen=True)
class Text:
    """A ``text`` content block. Streamed as several ``text_delta`` chunks of a few words."""

    text: str


@dataclass(frozen=True)
class ToolUse:
    """A ``tool_use`` content block. Streamed as ``input_json_delta`` chunks of the JSON input.

    ``id`` defaults to a fresh ``toolu_…`` id per response, as the real API does; give one to pin it.
    """

    name: str
    input: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True)
class Thinking:
    """A ``thinking`` content block: ``thinking_delta`` chunks, then one ``signature_delta``.

    ``signature`` defaults to an opaque value derived from the text (stable across replays).
    """

    thinking: str
    signature: str | None = None


@dataclass(frozen=True)
class RedactedThinking:
    """A ``redacted_thinking`` content block, sent whole in its ``content_block_start``."""

    data: str


Block: TypeAlias = Text | ToolUse | Thinking | RedactedThinking
"""One content block of a scripted turn."""


@dataclass(frozen=True)
class Turn:
    """One assistant response.

    ``stop_reason=None`` means: ``"tool_use"`` when the turn holds a :class:`ToolUse` block, else
    ``"end_turn"`` (see :attr:`resolved_stop_reason`). ``stop_sequence`` is echoed when the stop reason is
    ``"stop_sequence"``.
    """

    content: Sequence[Block]
    stop_reason: StopReason | None = None
    stop_sequence: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "content", tuple(self.content))
        if self.stop_reason is not None and self.stop_reason not in _STOP_REASONS:
            raise InvalidTurn(f"unknown stop_reason {self.stop_reason!r}")

    @property
    def resolved_stop_reason(self) -> StopReason:
        """The stop reason sent on the wire."""
        if self.stop_reason is not None:
            return self.stop_reason
        return "tool_use" if any(isinstance(b, ToolUse) for b in self.content) else "end_turn"

    @classmethod
    def text(cls, text: str, *, stop_reason: StopReason | None = None) -> Turn:
        """A turn holding a single text block."""
        return cls((Text(text),), stop_reason=stop_reason)

    @classmethod
    def tool_use(cls, name: str, input: Mapping[str, Any], *, preamble: str | None = None) -> Turn:
        """A turn calling one tool, optionally after a short text block; stops with ``tool_use``."""
        blocks: list[Block] = [] if preamble is None else [Text(preamble)]
        blocks.append(ToolUse(name, dict(input)))
        return cls(blocks)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Turn:
        """Parse a turn written in the API's shape.

        ``{"content": [{"type": "text", "text": "hi"}, {"type": "tool_use", "name": "bash", "input":
        {...}}, {"type": "thinking", "thinking": "..."}], "stop_reason": "tool_use"}``; ``content`` may also
        be a plain string. Raises :class:`InvalidTurn`.
        """
        if not isinstance(data, Mapping):
            raise InvalidTurn(f"a turn must be an object, got {type(data).__name__}")
        unknown = set(data) - {"content", "stop_reason", "stop_sequence"}
        if unknown:
            raise InvalidTurn(f"unknown turn keys: {sorted(unknown)}")
        content = data.get("content", [])
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list):
            raise InvalidTurn("turn content must be a string or a list of blocks")
        stop_reason = data.get("stop_reason")
        if stop_reason is not None and stop_reason not in _STOP_REASONS:
            raise InvalidTurn(f"unknown stop_reason {stop_reason!r}")
        stop_sequence = data.get("stop_sequence")
        if stop_sequence is not None and not isinstance(stop_sequence, str):
            raise InvalidTurn("stop_sequence must be a string")
        return cls(
            tuple(_block_from_dict(b) for b in content),
            stop_reason=stop_reason,
            stop_sequence=stop_sequence,
        )


def _block_from_dict(data: Any) -> Block:
    if not isinstance(data, Mapping):
        raise InvalidTurn(f"a content block must be an object, got {type(data).__name__}")
    kind = data.get("type")
    try:
        if kind == "text":
            return Text(_str(data, "text"))
        if kind == "tool_use":
            tool_input = data.get("input", {})
            if not isinstance(tool_input, Mapping):
                raise InvalidTurn("tool_use input must be an object")
            tool_id = data.get("id")
            if tool_id is not None and not isinstance(tool_id, str):
                raise InvalidTurn("tool_use id must be a string")
            return ToolUse(_str(data, "name"), dict(tool_input), tool_id)
        if kind == "thinking":
            signature = data.get("signature")
            if signature is not None and not isinstance(signature, str):
                raise InvalidTurn("thinking signature must be a string")
            return Thinking(_str(data, "thinking"), signature)
        if kind == "redacted_thinking":
            return RedactedThinking(_str(data, "data"))
    except KeyError as exc:
        raise InvalidTurn(f"{kind} block lacks {exc.args[0]!r}") from None
    raise InvalidTurn(f"unsupported content block type {kind!r}")


def _str(data: Mapping[str, Any], key: str) -> str:
    value = data[key]
    if not isinstance(value, str):
        raise InvalidTurn(f"{key!r} must be a string")
    return value


Responder: TypeAlias = Callable[[Mapping[str, Any]], Turn | Awaitable[Turn]]
"""Chooses the turn for one request, given the request's JSON body.

May be async (return an awaitable), e.g. to hold a model turn until a test says go. The server calls it
once per request that passes authentication, error injection and validation. A responder that should
survive a control-plane restart must decide from the request alone, not from state of its own.
"""


class Script:
    """Turns served in order, one per request; then :class:`ScriptExhausted`.

    Strings are shorthand for :meth:`Turn.text`. Only requests that reach the script consume a turn:
    authentication failures, injected errors and invalid requests do not.
    """

    def __init__(self, turns: Iterable[Turn | str] = ()) -> None:
        self._turns: list[Turn] = [_as_turn(t) for t in turns]
        self._served = 0

    @classmethod
    def from_json(cls, text: str) -> Script:
        """Parse a JSON list of turns (see :meth:`Turn.from_dict`). Raises :class:`InvalidTurn`."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidTurn(f"script is not valid JSON: {exc}") from None
        if not isinstance(data, list):
            raise InvalidTurn("a script must be a JSON list of turns")
        return cls(t if isinstance(t, str) else Turn.from_dict(t) for t in data)

    def append(self, turn: Turn | str) -> None:
        """Add a turn at the end (a test may extend the script while the server runs)."""
        self._turns.append(_as_turn(turn))

    @property
    def served(self) -> int:
        """How many turns were handed out."""
        return self._served

    @property
    def remaining(self) -> int:
        """How many turns are left."""
        return len(self._turns) - self._served

    def peek(self, request: Mapping[str, Any] | None = None) -> Turn:
        """The turn the next request will get, without consuming it."""
        if self._served >= len(self._turns):
            raise ScriptExhausted(self._served)
        return self._turns[self._served]

    def respond(self, request: Mapping[str, Any] | None = None) -> Turn:
        """Consume and return the next turn. ``request`` is accepted to fit :data:`Responder`."""
        turn = self.peek(request)
        self._served += 1
        return turn

    def __call__(self, request: Mapping[str, Any]) -> Turn:
        return self.respond(request)

    def __len__(self) -> int:
        return len(self._turns)


def _as_turn(turn: Turn | str) -> Turn:
    return Turn.text(turn) if isinstance(turn, str) else turn
