"""Errors of the control plane's MCP client, each naming its documented ``session.error`` type.

::

    ControlPlaneError (control_plane.errors)
    └── McpError                      .error_type: the documented type the failure maps to
        ├── McpConnectionFailed       mcp_connection_failed_error: unreachable, crashed, hung,
        │                             disconnected, or an unusable answer
        └── McpAuthenticationFailed   mcp_authentication_failed_error: HTTP 401 / 403, or no
                                      credentials could be had for the server

Messages never carry a credential: header values are scrubbed where an error is made, and URLs
are shown without their user info, query or fragment.
"""

from __future__ import annotations

from typing import Final

from control_plane.errors import ControlPlaneError

__all__ = [
    "MCP_AUTHENTICATION_FAILED",
    "MCP_CONNECTION_FAILED",
    "McpAuthenticationFailed",
    "McpConnectionFailed",
    "McpError",
]

MCP_CONNECTION_FAILED: Final = "mcp_connection_failed_error"
MCP_AUTHENTICATION_FAILED: Final = "mcp_authentication_failed_error"


class McpError(ControlPlaneError):
    """An MCP server could not be used. ``message`` is safe to show to the model and to log.

    ``not_sent``: the request never reached the server (the connection could not be made, or the
    server no longer knew the session), so nothing ran and retrying on a new session is safe."""

    error_type: str = MCP_CONNECTION_FAILED

    def __init__(self, message: str, *, not_sent: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.not_sent = not_sent


class McpConnectionFailed(McpError):
    error_type = MCP_CONNECTION_FAILED


class McpAuthenticationFailed(McpError):
    error_type = MCP_AUTHENTICATION_FAILED
