"""Sandbox lifecycle against a real Docker engine: provision, death, pause, reconcile, destroy."""

from __future__ import annotations

import asyncio
from typing import Any

import docker.errors
import pytest
from _sandbox_support import LIMITS, ManagerFactory

from edge_agent.errors import CapacityExhausted
from edge_agent.sandbox import SandboxManager
from tests.support import eventually
from tests.support.sandbox_calls import run_tool

pytestmark = pytest.mark.docker


async def bash(manager: SandboxManager, sid: str, command: str) -> Any:
    return await run_tool(manager, sid, "bash", {"command": command}, limits=LIMITS)


def state(docker_api: Any, container_id: str) -> str | None:
    try:
        return str(docker_api.api.inspect_container(container_id)["State"]["Status"])
    except docker.errors.NotFound:
        return None


def volume_exists(docker_api: Any, name: str) -> bool:
    try:
        docker_api.volumes.get(name)
    except docker.errors.NotFound:
        return False
    return True


async def test_provision_is_idempotent_and_labelled(
    manager: SandboxManager, docker_api: Any, edge_id: str
) -> None:
    first = await manager.provision("sesn_p", LIMITS)
    again = await manager.provision("sesn_p", LIMITS)
    assert (first.reused, again.reused) == (False, True)
    assert first.sandbox_id == again.sandbox_id and first.image == LIMITS.image
    assert manager.in_use() == 1
    ours = {"outpost.managed": "1", "outpost.edge_id": edge_id, "outpost.session_id": "sesn_p"}
    labels = docker_api.api.inspect_container(first.sandbox_id)["Config"]["Labels"]
    assert labels.items() >= ours.items()  # plus the image's own labels
    volume = docker_api.volumes.get("outpost-ws-sesn_p")
    assert volume.attrs["Labels"] == ours


async def test_capacity(make_manager: ManagerFactory) -> None:
    manager = await make_manager(max_sandboxes=1)
    await manager.provision("sesn_c1", LIMITS)
    with pytest.raises(CapacityExhausted):
        await manager.provision("sesn_c2", LIMITS)
    with pytest.raises(CapacityExhausted):
        await bash(manager, "sesn_c2", "true")
    assert manager.in_use() == 1


async def test_killed_container_is_a_tool_error_then_replaced(
    manager: SandboxManager, docker_api: Any
) -> None:
    sid = "sesn_kill"
    await run_tool(manager, sid, "write", {"file_path": "keep.txt", "content": "kept"}, limits=LIMITS)
    old = (await manager.provision(sid, LIMITS)).sandbox_id

    call = asyncio.create_task(bash(manager, sid, "sleep 60"))
    container = docker_api.containers.get(old)

    def sleeping() -> bool:
        return any("sleep 60" in " ".join(p) for p in container.top()["Processes"])

    await eventually(sleeping, what="the command to start")
    container.kill()
    result = await asyncio.wait_for(call, 10)
    assert result.is_error and "died" in result.plain_text

    after = await run_tool(manager, sid, "read", {"file_path": "keep.txt"}, limits=LIMITS)
    assert (after.plain_text, after.is_error) == ("kept", False)
    new = (await manager.provision(sid, LIMITS)).sandbox_id
    assert new != old
    assert state(docker_api, old) is None  # the dead one was removed
    assert manager.in_use() == 1


async def test_read_only_tool_is_retried_in_the_replacement(manager: SandboxManager, docker_api: Any) -> None:
    sid = "sesn_idle_kill"
    await bash(manager, sid, "echo data > f.txt")
    old = (await manager.provision(sid, LIMITS)).sandbox_id
    docker_api.containers.get(old).kill()
    await eventually(lambda: state(docker_api, old) != "running", what="the container to die")
    # Whether or not the edge noticed the death yet, a read is answered by the replacement.
    result = await run_tool(manager, sid, "read", {"file_path": "f.txt"}, limits=LIMITS)
    assert (result.plain_text, result.is_error) == ("data\n", False)
    assert (await bash(manager, sid, "cat f.txt")).plain_text == "data"
    assert (await manager.provision(sid, LIMITS)).sandbox_id != old


async def test_daemon_death_reopens_channel_in_same_container(manager: SandboxManager) -> None:
    sid = "sesn_daemon"
    before = (await manager.provision(sid, LIMITS)).sandbox_id
    died = await bash(manager, sid, "kill -9 $PPID; sleep 5")
    assert died.is_error and "died" in died.plain_text
    result = await bash(manager, sid, "echo fine")
    assert result.plain_text == "fine"
    assert (await manager.provision(sid, LIMITS)).sandbox_id == before


async def test_idle_sandbox_is_paused_and_resumed(make_manager: ManagerFactory, docker_api: Any) -> None:
    manager = await make_manager(idle_pause_s=0.3)
    sid = "sesn_pause"
    await bash(manager, sid, "cd /tmp && export KEEP=held")
    container_id = (await manager.provision(sid, LIMITS)).sandbox_id
    await eventually(lambda: state(docker_api, container_id) == "paused", what="the idle pause")
    # The held channel and its shell survive pause/unpause: cwd and env are still there.
    result = await bash(manager, sid, "echo $KEEP; pwd")
    assert (result.plain_text, result.is_error) == ("held\n/tmp", False)
    assert state(docker_api, container_id) in ("running", "paused")
    assert (await manager.provision(sid, LIMITS)).sandbox_id == container_id


async def test_reconcile_after_unclean_stop(make_manager: ManagerFactory, docker_api: Any) -> None:
    first = await make_manager()
    await bash(first, "sesn_r1", "echo one > one.txt")
    await bash(first, "sesn_r2", "true")
    await bash(first, "sesn_r3", "true")
    r1 = (await first.provision("sesn_r1", LIMITS)).sandbox_id
    r2 = (await first.provision("sesn_r2", LIMITS)).sandbox_id
    r3 = (await first.provision("sesn_r3", LIMITS)).sandbox_id
    docker_api.api.pause(r1)
    docker_api.api.kill(r2)
    await eventually(lambda: state(docker_api, r2) == "exited", what="r2 to exit")

    # `first` is dropped without close(), as after kill -9 of the edge.
    second = await make_manager()
    assert second.in_use() == 2
    report = await second.reconcile()  # idempotent: nothing more to do
    assert report.reattached == [] and report.removed == []
    assert (
        state(docker_api, r1) == "running"
        and state(docker_api, r2) is None
        and state(docker_api, r3) == "running"
    )
    result = await bash(second, "sesn_r1", "cat one.txt")
    assert (result.plain_text, result.is_error) == ("one", False)
    assert (await second.provision("sesn_r1", LIMITS)).sandbox_id == r1
    assert (await second.provision("sesn_r3", LIMITS)).reused
    # sesn_r2 lost its container, not its workspace volume: the next call gets a new container.
    assert volume_exists(docker_api, "outpost-ws-sesn_r2")
    assert not (await second.provision("sesn_r2", LIMITS)).reused


async def test_reconcile_report(
    make_manager: ManagerFactory, docker_api: Any, runtime: Any, edge_id: str
) -> None:
    first = await make_manager()
    alive = (await first.provision("sesn_a", LIMITS)).sandbox_id
    dead = (await first.provision("sesn_d", LIMITS)).sandbox_id
    docker_api.api.kill(dead)
    await eventually(lambda: state(docker_api, dead) == "exited", what="the container to exit")
    second = SandboxManager(runtime, edge_id=edge_id, default_limits=LIMITS)
    try:
        report = await second.reconcile()
        assert report.reattached == [alive]
        assert report.removed == [dead]
    finally:
        await second.close()


async def test_destroy_removes_container_and_volume(manager: SandboxManager, docker_api: Any) -> None:
    sid = "sesn_destroy"
    container_id = (await manager.provision(sid, LIMITS)).sandbox_id
    assert volume_exists(docker_api, "outpost-ws-sesn_destroy")
    assert await manager.destroy(sid) is True
    assert state(docker_api, container_id) is None
    assert not volume_exists(docker_api, "outpost-ws-sesn_destroy")
    assert manager.in_use() == 0
    assert await manager.destroy(sid) is False


async def test_destroy_paused_sandbox(make_manager: ManagerFactory, docker_api: Any) -> None:
    manager = await make_manager(idle_pause_s=0.2)
    container_id = (await manager.provision("sesn_dp", LIMITS)).sandbox_id
    await eventually(lambda: state(docker_api, container_id) == "paused", what="the idle pause")
    assert await manager.destroy("sesn_dp") is True
    assert state(docker_api, container_id) is None


async def test_close_keeps_containers(make_manager: ManagerFactory, docker_api: Any) -> None:
    manager = await make_manager()
    container_id = (await manager.provision("sesn_keep", LIMITS)).sandbox_id
    await manager.close()
    await manager.close()  # idempotent
    assert state(docker_api, container_id) == "running"
