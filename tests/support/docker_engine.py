"""The Docker engine for integration tests: connect, make sure the sandbox image exists, and after
the suite remove — and fail on — anything left behind by the test edges whose ids start with a
given prefix; :func:`destroy_all_sandboxes`, one test edge's teardown; and
:func:`exists_in_session_sandbox`, to wait until a tool call has started in a session's sandbox."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest

from edge_agent.errors import SandboxUnavailable
from edge_agent.sandbox import SandboxManager
from edge_agent.sandbox.spec import LABEL_CLAIMED, LABEL_EDGE_ID, LABEL_MANAGED, LABEL_SESSION_ID

REPO = Path(__file__).resolve().parents[2]

__all__ = ["destroy_all_sandboxes", "docker_for_tests", "exists_in_session_sandbox", "session_container"]


async def destroy_all_sandboxes(manager: SandboxManager) -> None:
    """Close ``manager`` (its warm pool, channels and egress proxy), then remove every container,
    volume and network labelled with its edge id, through its runtime (still open)."""
    await manager.close()
    runtime = manager.runtime
    labels = {LABEL_MANAGED: "1", LABEL_EDGE_ID: manager.edge_id}
    for record in await runtime.list_containers(labels):
        with contextlib.suppress(SandboxUnavailable):
            await runtime.remove_container(record.id)
    for name in await runtime.list_volume_labels(labels):
        await runtime.remove_volume(name)
    for network in await runtime.list_networks(labels):
        with contextlib.suppress(SandboxUnavailable):
            await runtime.remove_network(network.name)


def session_container(client: docker.DockerClient, session_id: str) -> Any | None:
    """The running container of ``session_id``'s sandbox: labelled with the session, or a warm-pool
    member the session claimed (named by its claim volume); None while there is none."""
    label = f"{LABEL_SESSION_ID}={session_id}"
    containers = client.containers.list(filters={"label": label})
    if containers:
        return containers[0]
    for volume in client.volumes.list(filters={"label": label}):
        claimed = (volume.attrs.get("Labels") or {}).get(LABEL_CLAIMED)
        if claimed:
            with contextlib.suppress(docker.errors.NotFound):
                return client.containers.get(claimed)
    return None


async def exists_in_session_sandbox(client: docker.DockerClient, session_id: str, path: str) -> bool:
    """Whether ``path`` exists in ``session_id``'s running sandbox (e.g. the file a tool call's
    first command writes: the call has started). A condition for ``eventually``."""

    def check() -> bool:
        container = session_container(client, session_id)
        if container is None:
            return False
        try:
            code, _ = container.exec_run(["test", "-e", path], user="1000:1000")
        except docker.errors.APIError:  # e.g. the container is paused or just went away
            return False
        return bool(code == 0)

    return await asyncio.to_thread(check)


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
