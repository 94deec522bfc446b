"""The control plane's MCP client: the tools of an agent's ``mcp_servers``, and calls to them.

- :mod:`~control_plane.mcp.names`: deterministic model-facing tool names (``mcp__<server>__<tool>``);
- :mod:`~control_plane.mcp.models`: server references, tool lists and call outcomes (data);
- :mod:`~control_plane.mcp.router`: :class:`McpRouter`, ``edge://`` servers through the edge
  gateway, ``http(s)://`` servers through :class:`DirectMcpClient`;
- :mod:`~control_plane.mcp.direct`: the pooled, credentialed Streamable-HTTP client;
- :mod:`~control_plane.mcp.client_session`: one SDK session (the only module importing ``mcp``);
- :mod:`~control_plane.mcp.errors`: the error tree (typed as documented ``session.error`` types);
- :mod:`~control_plane.mcp.config`: :class:`McpConfig`.
"""

from __future__ import annotations

from control_plane.mcp.config import McpConfig
from control_plane.mcp.direct import DirectMcpClient
from control_plane.mcp.errors import (
    MCP_AUTHENTICATION_FAILED,
    MCP_CONNECTION_FAILED,
    McpAuthenticationFailed,
    McpConnectionFailed,
    McpError,
)
from control_plane.mcp.models import (
    Credentials,
    McpOutcome,
    McpServerRef,
    McpToolInfo,
    ServerTools,
    no_credentials,
)
from control_plane.mcp.names import MAX_TOOL_NAME_CHARS, ToolNameMap, tool_name
from control_plane.mcp.router import McpGateway, McpRouter

__all__ = [
    "MAX_TOOL_NAME_CHARS",
    "MCP_AUTHENTICATION_FAILED",
    "MCP_CONNECTION_FAILED",
    "Credentials",
    "DirectMcpClient",
    "McpAuthenticationFailed",
    "McpConfig",
    "McpConnectionFailed",
    "McpError",
    "McpGateway",
    "McpOutcome",
    "McpRouter",
    "McpServerRef",
    "McpToolInfo",
    "ServerTools",
    "ToolNameMap",
    "no_credentials",
    "tool_name",
]
