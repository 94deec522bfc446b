"""Plain helpers of the git bundling tests (imported by the tests and their ``conftest``): the
test upstream's credential, the repositories rule that lets the loopback git server through, and
the edge side under test."""

from __future__ import annotations

import uuid
from pathlib import Path

from edge_agent.egress import EgressSpec
from edge_agent.git import EdgeCredentials, GitConfig, GitService
from edge_agent.git.policy import RepositoryPolicy
from edge_agent.sandbox import DockerRuntime, SandboxLimits, SandboxManager

IMAGE = "outpost-sandbox:1"
EDGE_PREFIX = f"test-git-{uuid.uuid4().hex[:8]}"
CANARY = "canary-git-token-" + uuid.uuid4().hex[:12]
"""The upstream's credential: it must never be found inside a sandbox."""

# The test git server listens on 127.0.0.1 over plain http: the edge's repositories rule (which by
# default allows no repository, https only, public addresses only) lets exactly that through.
LOOPBACK_REPOS = RepositoryPolicy(
    allowed_hosts=("127.0.0.1",), allow_http=True, allow_networks=("127.0.0.0/8",)
)


def limits() -> SandboxLimits:
    return SandboxLimits(image=IMAGE, cpus=1.0, memory_bytes=256 * 1024 * 1024, pids=128, egress=EgressSpec())


class Edge:
    """The edge side under test: a SandboxManager and its GitService (restartable)."""

    def __init__(self, runtime: DockerRuntime, edge_id: str, state_dir: Path) -> None:
        self.runtime = runtime
        self.edge_id = edge_id
        self.state_dir = state_dir
        self.manager: SandboxManager | None = None
        self.git: GitService | None = None

    async def start(self, config: GitConfig | None = None, *, key: bytes = b"k" * 32) -> SandboxManager:
        from edge_agent.git import RelayRoutes

        config = config or GitConfig()
        self.git = GitService(
            config,
            scratch_dir=self.state_dir / "git-scratch",
            routes=RelayRoutes(key),
            credentials=EdgeCredentials(config.credentials),
            policy=LOOPBACK_REPOS,
        )
        # idle_pause_s 60 (default 30): no sandbox is paused under a slow git test on a busy machine.
        self.manager = SandboxManager(
            self.runtime, edge_id=self.edge_id, default_limits=limits(), idle_pause_s=60, git=self.git
        )
        await self.manager.start()
        return self.manager

    async def close(self) -> None:
        if self.manager is not None:
            await self.manager.close()
            self.manager = None
        if self.git is not None:
            await self.git.close()
            self.git = None
