"""Tool calls straight to a ``SandboxManager``, through the same door the dispatcher uses.

``run_tool(manager, session_id, tool, tool_input, limits=...)`` checks the input into a
:class:`~edge_agent.sandbox.ToolCall` (bad input answers the tool error the dispatcher would) with
the deadline the dispatcher would give a request without one, and runs it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from edge_agent.errors import InvalidToolInput
from edge_agent.sandbox import SandboxLimits, SandboxManager, ToolCall
from outpost_wire.results import ToolResult

__all__ = ["run_tool", "tool_call"]


def tool_call(
    session_id: str, tool: str, tool_input: Mapping[str, Any], *, timeout_s: float | None = None
) -> ToolCall:
    """The checked call; ``timeout_s`` caps the tool's own timeout, as an ``Execute``'s does."""
    return ToolCall.of(
        session_id,
        tool,
        tool_input,
        now=asyncio.get_running_loop().time(),
        timeout_ms=int(timeout_s * 1000) if timeout_s is not None else 0,
    )


async def run_tool(
    manager: SandboxManager,
    session_id: str,
    tool: str,
    tool_input: Mapping[str, Any],
    *,
    limits: SandboxLimits,
    timeout_s: float | None = None,
) -> ToolResult:
    try:
        call = tool_call(session_id, tool, tool_input, timeout_s=timeout_s)
    except InvalidToolInput as exc:
        return ToolResult.error(exc.message)
    return await manager.execute(call, limits)
