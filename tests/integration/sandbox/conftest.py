"""Fixtures for the Docker sandbox tests: the image (built if missing), a runtime, managers with
a test edge id, and a session-wide check that nothing labelled with a test edge id is left."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from _sandbox_support import EDGE_PREFIX, IMAGE, LIMITS, ManagerFactory

from edge_agent.sandbox import DockerRuntime, SandboxManager
from tests.support.docker_engine import destroy_all_sandboxes, docker_for_tests

_counter = itertools.count(1)


@pytest.fixture(scope="session")
def docker_api() -> Iterator[Any]:
    """A plain Docker SDK client for the tests' own checks; nothing of this suite's edges may survive it."""
    yield from docker_for_tests(EDGE_PREFIX, IMAGE)


@pytest.fixture
def edge_id() -> str:
    return f"{EDGE_PREFIX}-{next(_counter)}"


@pytest.fixture
async def runtime(docker_api: Any) -> AsyncIterator[DockerRuntime]:
    rt = DockerRuntime.from_env()
    yield rt
    await rt.close()


@pytest.fixture
async def make_manager(runtime: DockerRuntime, edge_id: str) -> AsyncIterator[ManagerFactory]:
    """Start managers for this test's edge id; all are closed and everything they made removed."""
    made: list[SandboxManager] = []

    async def make(**kwargs: Any) -> SandboxManager:
        kwargs.setdefault("edge_id", edge_id)
        kwargs.setdefault("default_limits", LIMITS)
        kwargs.setdefault("idle_pause_s", 60.0)
        manager = SandboxManager(runtime, **kwargs)
        await manager.start()
        made.append(manager)
        return manager

    yield make
    for manager in made:  # first: a manager with a warm pool may still be making a member
        await manager.close()
    if made:
        cleaner = SandboxManager(runtime, edge_id=edge_id, default_limits=LIMITS)
        await destroy_all_sandboxes(cleaner)
        await cleaner.close()


@pytest.fixture
async def manager(make_manager: ManagerFactory) -> SandboxManager:
    return await make_manager()
