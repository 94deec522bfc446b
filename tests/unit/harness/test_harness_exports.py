"""The public exports of control_plane.harness are pinned."""

from __future__ import annotations

import control_plane.harness


def test_package_exports() -> None:
    assert sorted(control_plane.harness.__all__) == [
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
    for name in control_plane.harness.__all__:
        assert hasattr(control_plane.harness, name)


def test_mcp_package_exports() -> None:
    import control_plane.mcp

    assert sorted(control_plane.mcp.__all__) == [
        "Credentials",
        "DirectMcpClient",
        "MAX_TOOL_NAME_CHARS",
        "MCP_AUTHENTICATION_FAILED",
        "MCP_CONNECTION_FAILED",
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
    for name in control_plane.mcp.__all__:
        assert hasattr(control_plane.mcp, name)
