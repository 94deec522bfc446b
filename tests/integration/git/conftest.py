"""Fixtures for the git bundling tests: bare repositories served by an authenticated git smart-HTTP
server on 127.0.0.1, and (Docker tests) an edge's sandbox manager with its git service, with a
session-wide check that nothing labelled with a test edge id is left behind."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from _git_server import GitHttpServer, make_repo

from edge_agent.egress import EgressSpec
from edge_agent.git import EdgeCredentials, GitConfig, GitService
from edge_agent.git.policy import RepositoryPolicy
from edge_agent.sandbox import DockerRuntime, SandboxLimits, SandboxManager
from tests.support.docker_engine import destroy_all_sandboxes, docker_for_tests

IMAGE = "outpost-sandbox:1"
EDGE_PREFIX = f"test-git-{uuid.uuid4().hex[:8]}"
CANARY = "canary-git-token-" + uuid.uuid4().hex[:12]
"""The upstream's credential: it must never be found inside a sandbox."""

_counter = itertools.count(1)

# The test git server listens on 127.0.0.1 over plain http: the edge's repositories rule (which by
# default allows no repository, https only, public addresses only) lets exactly that through.
LOOPBACK_REPOS = RepositoryPolicy(
    allowed_hosts=("127.0.0.1",), allow_http=True, allow_networks=("127.0.0.0/8",)
)


@pytest.fixture
def repos(tmp_path: Path) -> Path:
    root = tmp_path / "upstream"
    root.mkdir()
    make_repo(root, "app.git", {"README.md": "hello from upstream\n", "src/main.py": "print('hi')\n"})
    return root


@pytest.fixture
def git_server(repos: Path) -> Iterator[GitHttpServer]:
    server = GitHttpServer(repos, CANARY).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def docker_api() -> Iterator[Any]:
    """A plain Docker SDK client for the tests' own checks; nothing of this suite's edges may survive it."""
    yield from docker_for_tests(EDGE_PREFIX, IMAGE)


def limits() -> SandboxLimits:
    return SandboxLimits(image=IMAGE, cpus=1.0, memory_bytes=256 * 1024 * 1024, pids=128, egress=EgressSpec())


@pytest.fixture
async def edge(docker_api: Any, tmp_path: Path) -> AsyncIterator[Edge]:
    """A sandbox manager with a git service, for one test's edge id; everything it made is
    removed afterwards."""
    edge_id = f"{EDGE_PREFIX}-{next(_counter)}"
    runtime = DockerRuntime.from_env()
    made = Edge(runtime, edge_id, tmp_path / "edge")
    yield made
    await made.close()
    cleaner = SandboxManager(runtime, edge_id=edge_id, default_limits=limits())
    await destroy_all_sandboxes(cleaner)
    await cleaner.close()
    await runtime.close()


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
