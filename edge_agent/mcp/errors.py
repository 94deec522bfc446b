"""Errors raised by the MCP hub: a closed set of codes, one class each.

::

    EdgeError                     (edge_agent.errors)
    └── McpError                  .mcp_code (McpErrorCode)                wire code
        ├── McpConnectionFailed   mcp_connection_failed_error             UNAVAILABLE
        ├── McpServerNotAllowed   mcp_server_not_allowed   (.rule)        POLICY_DENIED
        ├── McpToolNotAllowed     mcp_tool_not_allowed     (.rule)        POLICY_DENIED
        └── McpInvalidArguments   mcp_invalid_arguments                   INVALID_REQUEST

A tool that reports failure (MCP ``isError``) is not an error here: it is a result with
``is_error=True``. Exceptions of the mcp SDK, anyio and httpx are mapped to these once, in
:mod:`edge_agent.mcp._sdk`. Messages never carry header values, environment values or tool
arguments.
"""

from __future__ import annotations

import enum
from typing import ClassVar

from edge_agent.errors import EdgeError
from outpost_wire.errors import ErrorCode

__all__ = [
    "McpConnectionFailed",
    "McpError",
    "McpErrorCode",
    "McpInvalidArguments",
    "McpServerNotAllowed",
    "McpToolNotAllowed",
]


class McpErrorCode(enum.Enum):
    """The closed set of MCP hub error codes (what the control plane sees)."""

    CONNECTION_FAILED = "mcp_connection_failed_error"
    SERVER_NOT_ALLOWED = "mcp_server_not_allowed"
    TOOL_NOT_ALLOWED = "mcp_tool_not_allowed"
    INVALID_ARGUMENTS = "mcp_invalid_arguments"


class McpError(EdgeError):
    """Base class of the MCP hub's errors."""

    mcp_code: ClassVar[McpErrorCode]


class McpConnectionFailed(McpError):
    """The server is down, crashed, disconnected, refused our credentials, or did not answer in
    time. The hub restarts / reconnects it in the background; a later call may succeed."""

    code = ErrorCode.UNAVAILABLE
    mcp_code = McpErrorCode.CONNECTION_FAILED


class _PolicyRefusal(McpError):
    code = ErrorCode.POLICY_DENIED

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(f"{message} (policy rule: {rule})")
        self.rule = rule


class McpServerNotAllowed(_PolicyRefusal):
    """The server is not configured on this edge, or the policy does not list it."""

    mcp_code = McpErrorCode.SERVER_NOT_ALLOWED


class McpToolNotAllowed(_PolicyRefusal):
    """The policy does not allow this tool of an allowed server."""

    mcp_code = McpErrorCode.TOOL_NOT_ALLOWED


class McpInvalidArguments(McpError):
    """The arguments are not a JSON object, or the server rejected them as invalid params."""

    code = ErrorCode.INVALID_REQUEST
    mcp_code = McpErrorCode.INVALID_ARGUMENTS
