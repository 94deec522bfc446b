"""Fixtures for the Docker sandbox tests: the image (built if missing), a runtime, managers with
a test edge id, and a session-wide check that nothing labelled with a test edge id is left."""

from __future__ import annotations

import itertools
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest
from _sandbox_support import EDGE_PREFIX, IMAGE, LIMITS, ManagerFactory

from edge_agent.sandbox import DockerRuntime, SandboxManager

REPO = Path(__file__).resolve().parents[3]

_counter = itertools.count(1)


def _ours(labels: dict[str, str] | None) -> bool:
    return (labels or {}).get("outpost.edge_id", "").startswith(EDGE_PREFIX)


@pytest.fixture(scope="session")
def docker_api() -> Iterator[Any]:
    """A plain Docker SDK client for the tests' own checks (kill, inspect, list)."""
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        pytest.fail(
            f"Docker tests need a Docker engine (scripts/setup.sh starts one; or -m 'not docker'): {exc}"
        )
    subprocess.run(["bash", str(REPO / "packaging/sandbox/build.sh"), IMAGE], check=True, timeout=900)
    yield client
    # Nothing labelled with a test edge id may survive the suite; remove leftovers, then fail.
    containers = [
        c for c in client.containers.list(all=True, filters={"label": "outpost.managed=1"}) if _ours(c.labels)
    ]
    volumes = [
        v for v in client.volumes.list(filters={"label": "outpost.managed=1"}) if _ours(v.attrs.get("Labels"))
    ]
    for container in containers:
        container.remove(force=True)
    for volume in volumes:
        volume.remove(force=True)
    client.close()
    assert not containers, f"containers left behind: {[c.name for c in containers]}"
    assert not volumes, f"volumes left behind: {[v.name for v in volumes]}"


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
    if made:
        cleaner = SandboxManager(runtime, edge_id=edge_id, default_limits=LIMITS)
        await cleaner.destroy_all_for_tests()
        await cleaner.close()
    for manager in made:
        await manager.close()


@pytest.fixture
async def manager(make_manager: ManagerFactory) -> SandboxManager:
    return await make_manager()
