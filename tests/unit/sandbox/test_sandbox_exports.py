"""The public surface of edge_agent.sandbox, pinned."""

from __future__ import annotations

import edge_agent.sandbox as sandbox


def test_exports() -> None:
    assert sorted(sandbox.__all__) == [
        "ContainerRuntime",
        "DaemonChannel",
        "DockerRuntime",
        "ReconcileReport",
        "SandboxInfo",
        "SandboxLimits",
        "SandboxManager",
        "SandboxSpec",
        "ToolCall",
    ]
    for name in sandbox.__all__:
        assert getattr(sandbox, name).__module__.startswith("edge_agent.sandbox.")
