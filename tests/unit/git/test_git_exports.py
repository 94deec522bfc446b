"""The public exports of edge_agent.git are pinned."""

from __future__ import annotations

import edge_agent.git


def test_exports() -> None:
    assert sorted(edge_agent.git.__all__) == [
        "EdgeCredentials",
        "GitCloner",
        "GitConfig",
        "GitCredential",
        "GitCredentialConfig",
        "GitRelay",
        "GitService",
        "RelayRoutes",
        "RemoteUrl",
        "RepositoryPolicy",
        "WorkspaceBackend",
        "classify",
        "git_environment",
        "load_or_create_key",
        "parse_remote",
        "redact",
        "relay_url",
    ]
    for name in edge_agent.git.__all__:
        assert getattr(edge_agent.git, name).__module__.startswith("edge_agent.git."), name
