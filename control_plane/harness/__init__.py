"""The harness: the stateless brain that runs sessions from their event logs.

- :mod:`~control_plane.harness.step`: the pure step function (log in, next actions out);
- :mod:`~control_plane.harness.fold`: how the log is read (turns, conversation, tool uses);
- :mod:`~control_plane.harness.agent`: the agent's tools and permission policies;
- :mod:`~control_plane.harness.mcp_offer`: the MCP tools offered to the model (pure);
- :mod:`~control_plane.harness.mcp_calls`: listing and calling them through an ``McpBackend``;
- :mod:`~control_plane.harness.event_drafts`: event types and the drafts the harness appends;
- :mod:`~control_plane.harness.repository_errors`: a repository the edge could not clone, as a
  ``session.error``;
- :mod:`~control_plane.harness.driver`: performs decisions (model calls, tool calls, appends);
- :mod:`~control_plane.harness.model`: the model seam and the ``anthropic`` SDK implementation;
- :mod:`~control_plane.harness.lease`: the per-session lease keeper;
- :mod:`~control_plane.harness.runner`: :class:`Harness`, the ``SessionRunner``.
"""

from __future__ import annotations

from control_plane.harness.agent import AgentSpec
from control_plane.harness.config import HarnessConfig
from control_plane.harness.driver import ToolGateway
from control_plane.harness.lease import LeaseKeeper
from control_plane.harness.mcp_calls import McpBackend
from control_plane.harness.mcp_offer import McpOffer
from control_plane.harness.model import (
    AnthropicModelClient,
    BlockStart,
    ModelClient,
    ModelError,
    ModelRetryableError,
    ModelTerminalError,
    StreamEvent,
    TextDelta,
)
from control_plane.harness.runner import Harness
from control_plane.harness.step import CallModel, Decision, DispatchMcpTool, DispatchTool, step

__all__ = [
    "AgentSpec",
    "AnthropicModelClient",
    "BlockStart",
    "CallModel",
    "Decision",
    "DispatchMcpTool",
    "DispatchTool",
    "Harness",
    "HarnessConfig",
    "LeaseKeeper",
    "McpBackend",
    "McpOffer",
    "ModelClient",
    "ModelError",
    "ModelRetryableError",
    "ModelTerminalError",
    "StreamEvent",
    "TextDelta",
    "ToolGateway",
    "step",
]
