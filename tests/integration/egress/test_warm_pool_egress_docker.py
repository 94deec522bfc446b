"""A warm pool of allowlist sandboxes: members wait on the egress network unknown to the proxy; a
claim registers the member's address with the claiming session's allowlist."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from _egress_support import LOOPBACK, ManagerFactory, Servers, Shell, limits

from edge_agent.egress import EgressMode

pytestmark = pytest.mark.docker


async def test_a_claimed_allowlist_member_gets_the_sessions_allowlist(
    make_manager: ManagerFactory, servers: Servers, docker_api: Any
) -> None:
    a_limits = limits(EgressMode.ALLOWLIST, f"{LOOPBACK}:{servers.allowed.port}")
    kinds: list[str] = []
    manager = await make_manager(
        default_limits=a_limits, warm_pool_size=1, on_provisioned=lambda kind, _s: kinds.append(kind)
    )
    deadline = time.monotonic() + 60  # a member: a container start and sandboxd, on a busy machine
    while manager.pooled() < 1:
        assert time.monotonic() < deadline, "the pool never filled"
        await asyncio.sleep(0.05)

    shell = Shell(manager, "sesn_pool_a", a_limits)
    await shell.install()
    assert kinds == ["claim"]
    assert await shell.net("get", f"http://{LOOPBACK}:{servers.allowed.port}/") == "200 allowed"
    assert (await shell.net("get", f"http://{LOOPBACK}:{servers.forbidden.port}/")).startswith(
        "403 egress.allowlist"
    )
    info = await manager.provision("sesn_pool_a", a_limits)
    networks = docker_api.api.inspect_container(info.sandbox_id)["NetworkSettings"]["Networks"]
    assert len(networks) == 1 and next(iter(networks)).startswith("outpost-egress-")
    await manager.destroy("sesn_pool_a")
