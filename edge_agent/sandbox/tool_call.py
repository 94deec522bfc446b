"""A sandbox tool call, parsed and checked once, at the edge's door: :class:`ToolCall`.

The dispatcher builds one from each ``Execute`` request (:meth:`ToolCall.from_json`) before
anything else happens to it: the input is decoded, must be an object, and is checked against the
tool's schema (:mod:`.toolset`). A call that fails raises :class:`~edge_agent.errors.InvalidToolInput`
with the message the model sees as its tool error. Past the door nobody decodes or checks the
input again.

One deadline per call. :attr:`ToolCall.deadline` is the instant (on the event loop's clock,
:func:`time.monotonic`) at which the edge gives up on the call: the earliest of the request's
deadline and the tool's own timeout (:attr:`ToolCall.timeout_ms`: the bash input's
``timeout_ms`` or the default, capped by the request's ``timeout_ms``) plus
:data:`ANSWER_GRACE_S` for the answer to come back. It is passed down as it is: making the
sandbox ready counts against it, and the channel waits for the daemon until it, telling the daemon
a timeout that ends a little before it (so that the daemon reports its own timeout, with the
partial output, before the edge gives up).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidToolInput
from .toolset import request_timeout_ms, validate_input

__all__ = ["ANSWER_GRACE_S", "ToolCall"]

#: How much longer than the tool's own timeout the edge waits for the daemon's answer.
ANSWER_GRACE_S = 5.0


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One checked sandbox tool call. Build it with :meth:`from_json` (the wire) or :meth:`of`."""

    session_id: str
    tool: str
    input: Mapping[str, Any]  # matches the tool's schema (a copy of the caller's)
    timeout_ms: int  # the tool's own time: what the daemon is told, and what its timeout names
    deadline: float  # when the edge gives up on the call (loop clock), provisioning included

    @classmethod
    def from_json(
        cls,
        session_id: str,
        tool: str,
        input_json: str,
        *,
        now: float,
        timeout_ms: int = 0,
        deadline: float | None = None,
    ) -> ToolCall:
        """The call of an ``Execute`` request. ``input_json``: the input as JSON text ("" = {});
        ``timeout_ms``: the request's cap on the tool's time (0 = none); ``deadline``: the
        request's deadline on the loop clock (None = none); ``now``: the loop clock now.

        Raises :class:`InvalidToolInput` for input that is not JSON, not an object, or does not
        match the tool's schema (an unknown tool, field or value)."""
        try:
            tool_input = json.loads(input_json) if input_json else {}
        except json.JSONDecodeError as exc:
            raise InvalidToolInput(f"tool input is not valid JSON: {exc.msg}") from None
        if not isinstance(tool_input, dict):
            raise InvalidToolInput("tool input must be a JSON object")
        return cls.of(session_id, tool, tool_input, now=now, timeout_ms=timeout_ms, deadline=deadline)

    @classmethod
    def of(
        cls,
        session_id: str,
        tool: str,
        tool_input: Mapping[str, Any],
        *,
        now: float,
        timeout_ms: int = 0,
        deadline: float | None = None,
    ) -> ToolCall:
        """A call whose input is already decoded; checked as :meth:`from_json` checks it."""
        problem = validate_input(tool, tool_input)
        if problem is not None:
            raise InvalidToolInput(problem)
        own_ms = request_timeout_ms(tool, tool_input, timeout_ms / 1000 if timeout_ms > 0 else None)
        until = now + own_ms / 1000 + ANSWER_GRACE_S
        if deadline is not None:
            until = min(until, deadline)
        return cls(session_id, tool, dict(tool_input), own_ms, until)
