"""The hardened defaults are in effect inside a real sandbox."""

from __future__ import annotations

from typing import Any

import pytest
from _sandbox_support import LIMITS

from edge_agent.sandbox import SandboxManager
from tests.support.sandbox_calls import run_tool

pytestmark = pytest.mark.docker

SID = "sesn_hard"


async def sh(manager: SandboxManager, command: str) -> tuple[str, bool]:
    result = await run_tool(manager, SID, "bash", {"command": command}, timeout_s=30, limits=LIMITS)
    return result.plain_text, result.is_error


async def test_inside_the_sandbox(manager: SandboxManager) -> None:
    assert await sh(manager, "id -u; id -g") == ("1000\n1000", False)
    assert await sh(manager, "grep CapEff /proc/self/status") == ("CapEff:\t0000000000000000", False)
    assert await sh(manager, "grep NoNewPrivs /proc/self/status") == ("NoNewPrivs:\t1", False)
    assert await sh(manager, "ls /sys/class/net") == ("lo", False)
    text, is_error = await sh(manager, "touch /rootfs-write")
    assert is_error and "Read-only file system" in text
    assert (await sh(manager, "touch /tmp/t ~/h /workspace/w && echo ok")) == ("ok", False)
    assert (await sh(manager, "stat -c %a /tmp"))[0] == "1777"
    assert (await sh(manager, "ps -o comm= -p 1"))[0] == "docker-init"


async def test_container_config(manager: SandboxManager, docker_api: Any) -> None:
    container_id = (await manager.provision(SID, LIMITS)).sandbox_id
    info = docker_api.api.inspect_container(container_id)
    host = info["HostConfig"]
    assert info["Config"]["User"] == "1000:1000"
    assert host["CapDrop"] == ["ALL"] and not host["CapAdd"]
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["Privileged"] is False and host["ReadonlyRootfs"] is True and host["Init"] is True
    assert host["NetworkMode"] == "none"
    assert host["PidsLimit"] == LIMITS.pids
    assert host["Memory"] == host["MemorySwap"] == LIMITS.memory_bytes
    assert host["NanoCpus"] == int(LIMITS.cpus * 1e9)
    assert [m["Destination"] for m in info["Mounts"]] == ["/workspace"]


async def test_pids_limit_stops_a_fork_bomb(manager: SandboxManager) -> None:
    text, _ = await sh(manager, "for i in $(seq 400); do sleep 2 & done 2>&1 | tail -1; wait")
    assert "fork" in text.lower() or "resource temporarily unavailable" in text.lower()
    assert await sh(manager, "echo still usable") == ("still usable", False)
