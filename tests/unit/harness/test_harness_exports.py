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
        "DispatchTool",
        "Harness",
        "HarnessConfig",
        "LeaseKeeper",
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
