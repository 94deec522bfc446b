"""Fixtures for the Docker egress tests: the image, a runtime, managers whose proxy uses a test
resolver, loopback servers, and a session-wide check that no container, volume or network
labelled with a test edge id is left behind."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from _egress_support import (
    EDGE_PREFIX,
    IMAGE,
    LOOPBACK,
    HttpServer,
    ManagerFactory,
    Servers,
    echo,
    fake_resolver,
    limits,
)

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
        kwargs.setdefault("default_limits", limits())
        kwargs.setdefault("idle_pause_s", 60.0)
        kwargs.setdefault("egress_resolver", fake_resolver)
        manager = SandboxManager(runtime, **kwargs)
        await manager.start()
        made.append(manager)
        return manager

    yield make
    for manager in made:
        await manager.close()
    cleaner = SandboxManager(runtime, edge_id=edge_id, default_limits=limits())
    await destroy_all_sandboxes(cleaner)
    await cleaner.close()


@pytest.fixture
async def servers() -> AsyncIterator[Servers]:
    """Two HTTP servers and a TCP echo server on the host's loopback (unreachable from sandboxes
    except through the proxy)."""
    allowed, forbidden = await HttpServer("allowed").start(), await HttpServer("forbidden").start()
    echo_server = await asyncio.start_server(echo, LOOPBACK, 0)
    yield Servers(allowed, forbidden, int(echo_server.sockets[0].getsockname()[1]))
    for server in (allowed.server, forbidden.server, echo_server):
        assert server is not None
        server.close()
