"""The public surface of edge_agent.mcp, pinned."""

from __future__ import annotations

import edge_agent.mcp as mcp_package


def test_exports() -> None:
    assert sorted(mcp_package.__all__) == [
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
    for name in mcp_package.__all__:
        assert hasattr(mcp_package, name)


def test_error_codes_are_a_closed_set() -> None:
    assert {code.value for code in mcp_package.McpErrorCode} == {
        "mcp_connection_failed_error",
        "mcp_server_not_allowed",
        "mcp_tool_not_allowed",
        "mcp_invalid_arguments",
    }
