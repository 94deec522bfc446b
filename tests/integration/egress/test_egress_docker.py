"""Egress control end to end: real sandboxes, the real proxy, servers on the host's loopback.

The sandbox cannot reach 127.0.0.1 of the host directly (its own loopback is its own), so every
200 below went through the proxy, and every refusal names the rule that refused it.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest
from _egress_support import LOOPBACK, ManagerFactory, Servers, Shell, limits

from edge_agent.egress import EgressMode
from edge_agent.errors import PolicyDenied
from edge_agent.policy import Policy

pytestmark = pytest.mark.docker

ALLOWLIST = EgressMode.ALLOWLIST


def allowlist_a(servers: Servers) -> Any:
    return limits(
        ALLOWLIST,
        f"{LOOPBACK}:{servers.allowed.port}",  # the IP literal: the only way to reach loopback
        f"{LOOPBACK}:{servers.echo_port}",
        "allowed.test",  # -> 127.0.0.1 (test resolver): allowed only where the IP entry allows
        "evil.test",  # -> 127.0.0.1 too: a DNS name pointing at loopback
    )


async def sandbox(manager: Any, session_id: str, sandbox_limits: Any) -> Shell:
    shell = Shell(manager, session_id, sandbox_limits)
    await shell.install()
    return shell


def address_of(docker_api: Any, container_id: str) -> tuple[str, str]:
    """(network name, IPv4 address) of a container on exactly one network."""
    networks = docker_api.api.inspect_container(container_id)["NetworkSettings"]["Networks"]
    ((name, net),) = networks.items()
    return name, net["IPAddress"]


async def test_allowlist_decisions_inside_the_sandbox(
    make_manager: ManagerFactory, servers: Servers, docker_api: Any
) -> None:
    manager = await make_manager()
    a_limits = allowlist_a(servers)
    info = await manager.provision("sesn_a", a_limits)
    a = await sandbox(manager, "sesn_a", a_limits)
    proxy = manager.egress.proxy
    assert proxy is not None
    url = f"http://{proxy.host}:{proxy.port}"
    assert await a.run('echo $HTTP_PROXY $https_proxy; echo "[${NO_PROXY-unset}]"') == f"{url} {url}\n[]"
    assert await a.run("ls /sys/class/net | sort | tr '\\n' ' '") == "eth0 lo"

    a_ = servers.allowed.port
    f_ = servers.forbidden.port
    assert await a.net("get", f"http://{LOOPBACK}:{a_}/x") == "200 allowed"
    assert await a.net("get", f"http://allowed.test:{a_}/") == "200 allowed"
    assert await a.net("get", f"http://{LOOPBACK}:{f_}/") == (
        f"403 egress.allowlist: {LOOPBACK}:{f_} is not on this sandbox's allowlist"
    )
    assert (await a.net("get", f"http://evil.test:{f_}/")).startswith(
        "403 egress.resolved_address: evil.test resolves to 127.0.0.1 (loopback)"
    )
    assert (await a.net("get", "http://elsewhere.test/")).startswith("403 egress.allowlist")
    # TLS-style tunnel: raw CONNECT, then bytes through to the echo server.
    assert await a.net("connect", f"{LOOPBACK}:{servers.echo_port}") == (
        "HTTP/1.1 200 Connection established ping-through-tunnel"
    )
    assert (await a.net("connect", f"{LOOPBACK}:{f_}")).startswith("HTTP/1.1 403 Forbidden egress.allowlist")
    assert servers.forbidden.heads == []  # nothing from this sandbox ever reached it
    hosts = [
        line for head in servers.allowed.heads for line in head.split(b"\r\n") if line.startswith(b"Host:")
    ]
    assert hosts == [
        b"Host: 127.0.0.1:%d" % a_,
        b"Host: allowed.test:%d" % a_,
    ]  # forced to the checked authority

    # Direct connections go nowhere: not the host's loopback (the sandbox's own), not the host
    # through the gateway on a port nobody listens on.
    network, _ = address_of(docker_api, info.sandbox_id)
    assert docker_api.api.inspect_network(network)["Internal"] is True
    assert await a.net("direct", LOOPBACK, a_) == "closed ConnectionRefusedError"
    with socket.socket() as reserved:  # bound, never listening: no one answers on this port
        reserved.bind((proxy.host, 0))
        assert (await a.net("direct", proxy.host, reserved.getsockname()[1])).startswith("closed")


async def test_sessions_get_their_own_allowlists_and_no_path_to_each_other(
    make_manager: ManagerFactory, servers: Servers, docker_api: Any
) -> None:
    manager = await make_manager()
    a_limits = allowlist_a(servers)
    b_limits = limits(ALLOWLIST, f"{LOOPBACK}:{servers.forbidden.port}")
    a = await sandbox(manager, "sesn_a", a_limits)
    b = await sandbox(manager, "sesn_b", b_limits)
    assert await b.net("get", f"http://{LOOPBACK}:{servers.forbidden.port}/") == "200 forbidden"
    assert (await b.net("get", f"http://{LOOPBACK}:{servers.allowed.port}/")).startswith(
        "403 egress.allowlist"
    )
    assert (await a.net("get", f"http://{LOOPBACK}:{servers.forbidden.port}/")).startswith("403")
    assert await a.net("get", f"http://{LOOPBACK}:{servers.allowed.port}/") == "200 allowed"
    assert len(servers.forbidden.heads) == 1  # only b's request

    # b listens; it can reach itself, a cannot reach it (ICC is off on the internal network).
    b_info = await manager.provision("sesn_b", b_limits)
    _, b_ip = address_of(docker_api, b_info.sandbox_id)
    await b.run("nohup python3 /workspace/net.py serve 8000 60 >/dev/null 2>&1 &")
    deadline = time.monotonic() + 15
    while await b.net("direct", b_ip, 8000) != "open":
        assert time.monotonic() < deadline, "the listener in b never came up"
    assert (await a.net("direct", b_ip, 8000)).startswith("closed")


async def test_none_mode_has_only_loopback(make_manager: ManagerFactory) -> None:
    manager = await make_manager()
    shell = Shell(manager, "sesn_none", limits())
    assert await shell.run("ls /sys/class/net") == "lo"
    assert await shell.run("echo ${HTTP_PROXY-unset}") == "unset"
    assert manager.egress.proxy is None  # nothing listens when no sandbox needs it


async def test_unrestricted_needs_the_policy_and_its_sandboxes_are_unknown_to_the_proxy(
    make_manager: ManagerFactory, servers: Servers, docker_api: Any
) -> None:
    with pytest.raises(PolicyDenied) as info:
        Policy().resolve(egress_mode="unrestricted")
    assert info.value.rule == "egress.max_mode"

    manager = await make_manager()
    await sandbox(manager, "sesn_a", allowlist_a(servers))
    proxy = manager.egress.proxy
    assert proxy is not None
    open_limits = limits(EgressMode.UNRESTRICTED)
    opened = await sandbox(manager, "sesn_open", open_limits)
    container = (await manager.provision("sesn_open", open_limits)).sandbox_id
    network, _ = address_of(docker_api, container)
    details = docker_api.api.inspect_network(network)
    assert details["Internal"] is False
    assert details["Options"]["com.docker.network.bridge.enable_icc"] == "false"
    assert await opened.run("echo ${HTTP_PROXY-unset}") == "unset"
    # It can reach the proxy's address, but the proxy does not know it: refused by source.
    reply = await opened.run(
        f"HTTP_PROXY=http://{proxy.host}:{proxy.port} python3 /workspace/net.py get "
        f"http://{LOOPBACK}:{servers.allowed.port}/"
    )
    assert reply.startswith("403 egress.unknown_source")


async def test_egress_is_fixed_at_creation_and_a_new_spec_replaces_the_container(
    make_manager: ManagerFactory, servers: Servers
) -> None:
    manager = await make_manager()
    first = await manager.provision("sesn_x", limits())
    shell = Shell(manager, "sesn_x", limits())
    await shell.run("echo kept > /workspace/state")
    a_limits = allowlist_a(servers)
    second = await manager.provision("sesn_x", a_limits)
    assert not second.reused and second.sandbox_id != first.sandbox_id
    again = await manager.provision("sesn_x", a_limits)
    assert again.reused and again.sandbox_id == second.sandbox_id
    shell = await sandbox(manager, "sesn_x", a_limits)
    assert await shell.run("cat /workspace/state") == "kept"
    assert await shell.net("get", f"http://{LOOPBACK}:{servers.allowed.port}/") == "200 allowed"
    proxy = manager.egress.proxy
    assert proxy is not None and len(proxy.granted()) == 1
    await manager.provision("sesn_x", limits())  # back to none: the proxy forgets the address
    assert proxy.granted() == {}


async def test_restart_adopts_allowlist_sandboxes_and_reconcile_removes_unused_networks(
    make_manager: ManagerFactory, servers: Servers, docker_api: Any
) -> None:
    a_limits = allowlist_a(servers)
    first = await make_manager()
    info = await first.provision("sesn_a", a_limits)
    await sandbox(first, "sesn_a", a_limits)
    assert first.egress.proxy is not None
    port = first.egress.proxy.port
    await first.close()  # the edge stops; its sandbox and network stay

    second = await make_manager()  # reconcile: adopt the sandbox, rebind the proxy's port
    proxy = second.egress.proxy
    assert proxy is not None and proxy.port == port
    assert list(proxy.granted().values()) == ["sesn_a"]
    shell = Shell(second, "sesn_a", a_limits)
    assert await shell.net("get", f"http://{LOOPBACK}:{servers.allowed.port}/") == "200 allowed"
    assert (await second.provision("sesn_a", a_limits)).sandbox_id == info.sandbox_id

    network, _ = address_of(docker_api, info.sandbox_id)
    assert await second.destroy("sesn_a")
    assert proxy.granted() == {}
    report = await second.reconcile()
    assert report.networks_removed == [network]
    assert second.egress.proxy is None
    assert not docker_api.networks.list(names=[network])
