"""Fixtures for the git bundling tests: bare repositories served by an authenticated git smart-HTTP
server on 127.0.0.1, and (Docker tests) an edge's sandbox manager with its git service, with a
session-wide check that nothing labelled with a test edge id is left behind."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from edge_agent.sandbox import DockerRuntime, SandboxManager
from tests.integration.git._git_support import CANARY, EDGE_PREFIX, IMAGE, Edge, limits
from tests.support.docker_engine import destroy_all_sandboxes, docker_for_tests
from tests.support.git_server import GitHttpServer, make_repo

_counter = itertools.count(1)


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
