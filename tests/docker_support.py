"""The Docker engine for integration tests: connect, make sure the sandbox image exists, and after
the suite remove — and fail on — anything left behind by the test edges whose ids start with a
given prefix."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest

REPO = Path(__file__).resolve().parents[1]

__all__ = ["docker_for_tests"]


def docker_for_tests(edge_prefix: str, image: str) -> Iterator[Any]:
    """Use as the body of a session-scoped fixture: ``yield from docker_for_tests(PREFIX, IMAGE)``."""
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        pytest.fail(
            f"Docker tests need a Docker engine (scripts/setup.sh starts one; or -m 'not docker'): {exc}"
        )
    subprocess.run(["bash", str(REPO / "packaging/sandbox/build.sh"), image], check=True, timeout=900)
    yield client

    def ours(labels: dict[str, str] | None) -> bool:
        return (labels or {}).get("outpost.edge_id", "").startswith(edge_prefix)

    label = {"label": "outpost.managed=1"}
    containers = [c for c in client.containers.list(all=True, filters=label) if ours(c.labels)]
    volumes = [v for v in client.volumes.list(filters=label) if ours(v.attrs.get("Labels"))]
    for container in containers:
        container.remove(force=True)
    for volume in volumes:
        volume.remove(force=True)
    networks = [n for n in client.networks.list(filters=label) if ours(n.attrs.get("Labels"))]
    for network in networks:
        network.remove()
    client.close()
    assert not containers, f"containers left behind: {[c.name for c in containers]}"
    assert not volumes, f"volumes left behind: {[v.name for v in volumes]}"
    assert not networks, f"networks left behind: {[n.name for n in networks]}"
