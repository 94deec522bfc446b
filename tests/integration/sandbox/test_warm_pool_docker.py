"""The warm pool against a real Docker engine: fill, claim, refill, never reuse, restart, capacity."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import docker.errors
import pytest
from _sandbox_support import LIMITS, ManagerFactory

from edge_agent.errors import CapacityExhausted
from edge_agent.sandbox import DockerRuntime, SandboxManager
from tests.support import eventually
from tests.support.sandbox_calls import run_tool

pytestmark = pytest.mark.docker

# Filling starts a container and sandboxd: seconds on a busy 2-core machine.
FILL_TIMEOUT_S = 60.0


async def bash(manager: SandboxManager, sid: str, command: str, limits: Any = LIMITS) -> str:
    result = await run_tool(manager, sid, "bash", {"command": command}, limits=limits)
    assert not result.is_error, result.plain_text
    return result.plain_text


def pool_members(docker_api: Any, edge_id: str) -> dict[str, dict[str, Any]]:
    """Container id -> inspect result, for this edge's containers that carry a pool token."""
    rows = docker_api.api.containers(
        all=True, filters={"label": [f"outpost.edge_id={edge_id}", "outpost.pool"]}
    )
    return {row["Id"]: docker_api.api.inspect_container(row["Id"]) for row in rows}


def state(docker_api: Any, container_id: str) -> str | None:
    try:
        return str(docker_api.api.inspect_container(container_id)["State"]["Status"])
    except docker.errors.NotFound:
        return None


def volume_labels(docker_api: Any, name: str) -> dict[str, str] | None:
    try:
        return dict(docker_api.volumes.get(name).attrs["Labels"] or {})
    except docker.errors.NotFound:
        return None


async def filled(manager: SandboxManager, size: int) -> None:
    await eventually(lambda: manager.pooled() == size, FILL_TIMEOUT_S, what=f"a pool of {size}")


async def test_pool_fills_with_paused_members_of_no_session(
    make_manager: ManagerFactory, docker_api: Any, edge_id: str
) -> None:
    manager = await make_manager(warm_pool_size=2)
    await filled(manager, 2)
    members = pool_members(docker_api, edge_id)
    assert len(members) == 2
    for info in members.values():
        assert info["State"]["Status"] == "paused"
        labels = info["Config"]["Labels"]
        assert "outpost.session_id" not in labels
        assert info["HostConfig"]["CapDrop"] == ["ALL"] and info["HostConfig"]["ReadonlyRootfs"]
        [mount] = [m for m in info["Mounts"] if m["Destination"] == "/workspace"]
        assert mount["Name"] == labels["outpost.workspace"]  # a volume of its own
    assert manager.in_use() == 0  # what the control plane is told: no session holds a sandbox


async def test_claim_resumes_a_member_runs_the_tool_and_the_pool_refills(
    make_manager: ManagerFactory, docker_api: Any, edge_id: str
) -> None:
    kinds: list[str] = []
    manager = await make_manager(warm_pool_size=1, on_provisioned=lambda kind, _s: kinds.append(kind))
    await filled(manager, 1)
    [member] = pool_members(docker_api, edge_id)
    assert state(docker_api, member) == "paused"

    assert (await bash(manager, "sesn_claim", "echo hi > f && cat f && id -u")).split() == ["hi", "1000"]
    assert kinds == ["claim"]
    info = await manager.provision("sesn_claim", LIMITS)
    assert info.sandbox_id == member and info.reused
    assert state(docker_api, member) == "running"

    def renamed() -> bool:  # after the session, in the background
        return str(docker_api.api.inspect_container(member)["Name"]).startswith("/outpost-sb-sesn_claim-")

    await eventually(renamed, what="the claimed container to be named after the session")
    claim = volume_labels(docker_api, "outpost-claim-sesn_claim")
    assert claim is not None
    assert claim["outpost.session_id"] == "sesn_claim" and claim["outpost.claimed"] == member
    assert manager.in_use() == 1

    await filled(manager, 1)  # refilled in the background, with a new container
    [refill] = [cid for cid in pool_members(docker_api, edge_id) if cid != member]
    assert state(docker_api, refill) == "paused"
    await manager.destroy("sesn_claim")


async def test_a_member_is_never_given_to_a_second_session(
    make_manager: ManagerFactory, docker_api: Any
) -> None:
    manager = await make_manager(warm_pool_size=1)
    await filled(manager, 1)
    await bash(manager, "sesn_one", "echo secret > mine.txt")
    first = (await manager.provision("sesn_one", LIMITS)).sandbox_id
    claim = volume_labels(docker_api, "outpost-claim-sesn_one")
    assert claim is not None
    workspace = claim["outpost.workspace"]

    assert await manager.destroy("sesn_one")
    assert state(docker_api, first) is None
    assert volume_labels(docker_api, workspace) is None  # the workspace went with the session
    assert volume_labels(docker_api, "outpost-claim-sesn_one") is None

    await filled(manager, 1)
    assert (await bash(manager, "sesn_two", "ls -A | wc -l")).strip() == "0"  # a fresh workspace
    second = (await manager.provision("sesn_two", LIMITS)).sandbox_id
    assert second != first
    # The same session id again is a new session: yet another container.
    await filled(manager, 1)
    await bash(manager, "sesn_one", "true")
    assert (await manager.provision("sesn_one", LIMITS)).sandbox_id not in {first, second}
    await manager.destroy("sesn_one")
    await manager.destroy("sesn_two")


async def test_a_claimed_workspace_survives_a_replacement(manager_factory_pool: SandboxManager) -> None:
    manager = manager_factory_pool
    await bash(manager, "sesn_keep", "echo kept > keep.txt")
    old = (await manager.provision("sesn_keep", LIMITS)).sandbox_id
    runtime_kill = manager._runtime.kill
    await runtime_kill(old)
    result = await run_tool(manager, "sesn_keep", "read", {"file_path": "keep.txt"}, limits=LIMITS)
    assert not result.is_error and "kept" in result.plain_text  # a read-only tool is retried
    assert (await manager.provision("sesn_keep", LIMITS)).sandbox_id != old
    await manager.destroy("sesn_keep")


@pytest.fixture
async def manager_factory_pool(make_manager: ManagerFactory) -> SandboxManager:
    manager = await make_manager(warm_pool_size=1)
    await filled(manager, 1)
    return manager


async def test_restart_removes_stale_members_and_keeps_claimed_sandboxes(
    make_manager: ManagerFactory, docker_api: Any, edge_id: str
) -> None:
    # The first edge process has its own Docker connection: closing that first leaves everything
    # in place, as a kill -9 would.
    crashed_runtime = DockerRuntime.from_env()
    crashed = SandboxManager(crashed_runtime, edge_id=edge_id, default_limits=LIMITS, warm_pool_size=1)
    await crashed.start()
    try:
        await filled(crashed, 1)
        await bash(crashed, "sesn_restart", "echo before > f")
        claimed = (await crashed.provision("sesn_restart", LIMITS)).sandbox_id
        await filled(crashed, 1)
        stale = [cid for cid in pool_members(docker_api, edge_id) if cid != claimed]
        assert len(stale) == 1
        stale_volume = docker_api.api.inspect_container(stale[0])["Config"]["Labels"]["outpost.workspace"]
    finally:
        await crashed_runtime.close()
        await crashed.close()
    assert state(docker_api, stale[0]) == "paused"  # left behind by the "crash"

    manager = await make_manager(warm_pool_size=0)
    assert state(docker_api, stale[0]) is None  # removed, never adopted
    assert volume_labels(docker_api, stale_volume) is None
    assert manager.in_use() == 1  # the claimed one is the session's, adopted
    assert (await bash(manager, "sesn_restart", "cat f")).strip() == "before"
    assert (await manager.provision("sesn_restart", LIMITS)).sandbox_id == claimed
    assert await manager.destroy("sesn_restart")
    assert state(docker_api, claimed) is None
    assert not docker_api.volumes.list(filters={"label": f"outpost.edge_id={edge_id}"})


async def test_pool_off_is_as_before(make_manager: ManagerFactory, docker_api: Any, edge_id: str) -> None:
    kinds: list[str] = []
    manager = await make_manager(on_provisioned=lambda kind, _s: kinds.append(kind))
    await bash(manager, "sesn_off", "true")
    assert kinds == ["cold"] and manager.pooled() == 0
    assert not pool_members(docker_api, edge_id)
    labels = [f"outpost.edge_id={edge_id}", "outpost.session_id=sesn_off"]
    assert len(docker_api.api.containers(filters={"label": labels})) == 1
    await manager.destroy("sesn_off")


async def test_capacity_pool_members_use_only_free_slots(
    make_manager: ManagerFactory, docker_api: Any, edge_id: str
) -> None:
    kinds: list[str] = []
    manager = await make_manager(
        max_sandboxes=2, warm_pool_size=5, on_provisioned=lambda kind, _s: kinds.append(kind)
    )
    await filled(manager, 2)  # capped by max_sandboxes
    await bash(manager, "sesn_cap1", "true")
    assert manager.in_use() == 1
    await filled(manager, 1)  # one slot left for the pool
    assert len(pool_members(docker_api, edge_id)) == 2  # the claimed one and the new member

    # Another spec cannot claim: its cold start takes the pool's slot instead of being refused.
    other = replace(LIMITS, cpus=0.5)
    await bash(manager, "sesn_cap2", "true", limits=other)
    assert kinds == ["claim", "cold"]
    assert manager.in_use() == 2 and manager.pooled() == 0
    with pytest.raises(CapacityExhausted):
        await manager.provision("sesn_cap3", LIMITS)

    await manager.destroy("sesn_cap1")
    await filled(manager, 1)  # a slot is free again; the pool now makes sandboxes like the last spec
    await bash(manager, "sesn_cap3", "true", limits=other)
    assert kinds == ["claim", "cold", "claim"]
    await asyncio.gather(manager.destroy("sesn_cap2"), manager.destroy("sesn_cap3"))
