"""Fixtures for the Docker egress tests: the image, a runtime, managers whose proxy uses a test
resolver, loopback servers, and a session-wide check that no container, volume or network
labelled with a test edge id is left behind."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
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

REPO = Path(__file__).resolve().parents[3]

_counter = itertools.count(1)


def _ours(labels: dict[str, str] | None) -> bool:
    return (labels or {}).get("outpost.edge_id", "").startswith(EDGE_PREFIX)


@pytest.fixture(scope="session")
def docker_api() -> Iterator[Any]:
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        pytest.fail(f"Docker tests need a Docker engine (or -m 'not docker'): {exc}")
    subprocess.run(["bash", str(REPO / "packaging/sandbox/build.sh"), IMAGE], check=True, timeout=900)
    yield client
    label = {"label": "outpost.managed=1"}
    containers = [c for c in client.containers.list(all=True, filters=label) if _ours(c.labels)]
    volumes = [v for v in client.volumes.list(filters=label) if _ours(v.attrs.get("Labels"))]
    for container in containers:
        container.remove(force=True)
    for volume in volumes:
        volume.remove(force=True)
    networks = [n for n in client.networks.list(filters=label) if _ours(n.attrs.get("Labels"))]
    for network in networks:
        network.remove()
    client.close()
    assert not containers, f"containers left behind: {[c.name for c in containers]}"
    assert not volumes, f"volumes left behind: {[v.name for v in volumes]}"
    assert not networks, f"networks left behind: {[n.name for n in networks]}"


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
    await cleaner.destroy_all_for_tests()
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
