"""The edge's private MCP servers: configuration, policy, and the :class:`McpHub` that fronts them.

Credentials for the servers (headers, environment) are read from the edge's own files and
environment and never leave the edge. :mod:`edge_agent.mcp._sdk` is the only module that touches
the mcp SDK (a result's content goes through :mod:`outpost_wire.mcp_content`, shared with the
control plane).
"""

from __future__ import annotations

from .config import (
    HttpTransportConfig,
    McpPolicy,
    McpServerConfig,
    McpServerPolicy,
    McpServers,
    SecretSource,
    StdioTransportConfig,
)
from .errors import (
    McpConnectionFailed,
    McpError,
    McpErrorCode,
    McpInvalidArguments,
    McpServerNotAllowed,
    McpToolNotAllowed,
)
from .hub import McpHub
from .models import (
    ContentBlock,
    DocumentBlock,
    ImageBlock,
    McpCallResult,
    McpCatalog,
    McpServerEntry,
    McpTool,
    ServerStatus,
    TextBlock,
)

__all__ = [
    "ContentBlock",
    "DocumentBlock",
    "HttpTransportConfig",
    "ImageBlock",
    "McpCallResult",
    "McpCatalog",
    "McpConnectionFailed",
    "McpError",
    "McpErrorCode",
    "McpHub",
    "McpInvalidArguments",
    "McpPolicy",
    "McpServerConfig",
    "McpServerEntry",
    "McpServerNotAllowed",
    "McpServerPolicy",
    "McpServers",
    "McpTool",
    "McpToolNotAllowed",
    "SecretSource",
    "ServerStatus",
    "StdioTransportConfig",
    "TextBlock",
]
