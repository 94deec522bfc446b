"""EgressController against a fake network backend; the container config of each mode."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

import pytest

import edge_agent.egress as egress
from edge_agent.egress import EgressController, EgressMode, EgressSpec, NetworkRecord, proxy_env
from edge_agent.errors import SandboxUnavailable
from edge_agent.sandbox.docker_runtime import container_config
from edge_agent.sandbox.spec import SandboxLimits, SandboxSpec, network_name

EDGE = {"outpost.managed": "1", "outpost.edge_id": "e1"}
ALLOW = EgressSpec(EgressMode.ALLOWLIST, ("pypi.org",))


class FakeBackend:
    """Networks in a dict; the 'gateway' is loopback so the real proxy can bind it."""

    def __init__(self) -> None:
        self.networks: dict[str, NetworkRecord] = {}
        self.addresses: dict[tuple[str, str], str] = {}
        self.removed: list[str] = []

    async def ensure_network(
        self, name: str, *, internal: bool, labels: Mapping[str, str], options: Mapping[str, str]
    ) -> NetworkRecord:
        if name not in self.networks:
            self.networks[name] = NetworkRecord(f"id-{name}", name, internal, "127.0.0.1", labels, options)
        return self.networks[name]

    async def list_networks(self, labels: Mapping[str, str]) -> list[NetworkRecord]:
        return [n for n in self.networks.values() if all(n.labels.get(k) == v for k, v in labels.items())]

    async def remove_network(self, name: str) -> bool:
        self.removed.append(name)
        return self.networks.pop(name, None) is not None

    async def container_address(self, container_id: str, network: str) -> str:
        return self.addresses[(container_id, network)]


@pytest.fixture
async def ctl() -> AsyncIterator[tuple[EgressController, FakeBackend]]:
    backend = FakeBackend()
    controller = EgressController(
        backend, labels=EDGE, allowlist_network="op-egress-e1", open_network="op-open-e1"
    )
    yield controller, backend
    await controller.close()


async def test_attachments_per_mode(ctl: tuple[EgressController, FakeBackend]) -> None:
    controller, backend = ctl
    assert await controller.attachment(EgressSpec()) is None
    opened = await controller.attachment(EgressSpec(EgressMode.UNRESTRICTED))
    assert opened is not None and opened.network == "op-open-e1" and not opened.env
    assert controller.proxy is None  # no proxy until an allowlist sandbox needs one
    attached = await controller.attachment(ALLOW)
    assert attached is not None and controller.proxy is not None
    assert attached.network == "op-egress-e1"
    assert attached.proxy_url == f"http://127.0.0.1:{controller.proxy.port}"
    assert attached.env == proxy_env(attached.proxy_url)
    assert attached.env["NO_PROXY"] == "" and attached.env["https_proxy"] == attached.proxy_url
    internal, open_ = backend.networks["op-egress-e1"], backend.networks["op-open-e1"]
    assert internal.internal and not open_.internal
    assert internal.labels == {**EDGE, "outpost.network": "allowlist"}
    assert internal.options == open_.options == {"com.docker.network.bridge.enable_icc": "false"}
    assert (await controller.attachment(ALLOW)) == attached  # reused


@pytest.mark.parametrize(
    "record",
    [
        NetworkRecord("x", "op-egress-e1", False, "127.0.0.1", {**EDGE, "outpost.network": "allowlist"}),
        NetworkRecord("x", "op-egress-e1", True, "127.0.0.1", {"outpost.managed": "1"}),
        NetworkRecord(
            "x", "op-egress-e1", True, "127.0.0.1", {**EDGE, "outpost.network": "allowlist"}, {"x": "y"}
        ),
        NetworkRecord(
            "x",
            "op-egress-e1",
            True,
            "",
            {**EDGE, "outpost.network": "allowlist"},
            {"com.docker.network.bridge.enable_icc": "false"},
        ),
    ],
)
async def test_a_look_alike_network_is_refused(
    ctl: tuple[EgressController, FakeBackend], record: NetworkRecord
) -> None:
    controller, backend = ctl
    backend.networks[record.name] = record
    with pytest.raises(SandboxUnavailable):
        await controller.attachment(ALLOW)
    assert controller.proxy is None


async def test_grants_restore_and_collect(ctl: tuple[EgressController, FakeBackend]) -> None:
    controller, backend = ctl
    attached = await controller.attachment(ALLOW)
    assert attached is not None and controller.proxy is not None
    backend.addresses[("c1", "op-egress-e1")] = "172.30.0.2"
    assert await controller.grant_container("c1", "s1", ALLOW) == "172.30.0.2"
    assert controller.proxy.granted() == {"172.30.0.2": "s1"}
    # Restoring an adopted sandbox: same proxy URL, only the expected network.
    nets = {"op-egress-e1": "172.30.0.3"}
    assert await controller.restore("s2", ALLOW, proxy_url=attached.proxy_url, networks=nets) == (
        "op-egress-e1",
        "172.30.0.3",
    )
    with pytest.raises(SandboxUnavailable, match="no longer served"):
        await controller.restore("s3", ALLOW, proxy_url="http://127.0.0.1:1", networks=nets)
    with pytest.raises(SandboxUnavailable, match="expected only"):
        await controller.restore(
            "s3", ALLOW, proxy_url=attached.proxy_url, networks={**nets, "bridge": "172.17.0.2"}
        )
    with pytest.raises(SandboxUnavailable, match="expected only"):
        await controller.restore("s3", EgressSpec(), proxy_url="", networks={"bridge": "172.17.0.2"})
    assert await controller.restore("s3", EgressSpec(), proxy_url="", networks={}) == ("", "")
    assert await controller.restore("s3", EgressSpec(), proxy_url="", networks={"none": ""}) == ("", "")
    # Collect keeps networks in use and a network whose proxy still has grants.
    assert await controller.collect({"op-open-e1"}) == []
    controller.revoke("172.30.0.2", "s1")
    controller.revoke("172.30.0.3", "s2")
    assert await controller.collect(set()) == ["op-egress-e1"]
    assert controller.proxy is None


async def test_the_proxy_rebinds_its_previous_port(ctl: tuple[EgressController, FakeBackend]) -> None:
    controller, backend = ctl
    first = await controller.attachment(ALLOW)
    assert first is not None
    await controller.close()
    again = await controller.attachment(ALLOW, preferred_proxy=first.proxy_url)
    assert again is not None and again.proxy_url == first.proxy_url
    await controller.destroy_all()
    assert controller.proxy is None and backend.networks == {}


def test_container_config_per_mode() -> None:
    limits = SandboxLimits(image="img:1", cpus=1, memory_bytes=1 << 29, pids=64)
    none = container_config(SandboxSpec.for_session(prefix="op", edge_id="e", session_id="s", limits=limits))
    assert none["HostConfig"]["NetworkMode"] == "none" and none["NetworkDisabled"] is True
    assert "NetworkingConfig" not in none and "outpost.egress" not in none["Labels"]
    allow = SandboxLimits(image="img:1", cpus=1, memory_bytes=1 << 29, pids=64, egress=ALLOW)
    url = "http://172.30.0.1:4000"
    spec = SandboxSpec.for_session(
        prefix="op",
        edge_id="e",
        session_id="s",
        limits=allow,
        network="op-egress-e",
        env=proxy_env(url),
        proxy_url=url,
    )
    config = container_config(spec)
    assert config["HostConfig"]["NetworkMode"] == "op-egress-e" and config["NetworkDisabled"] is False
    assert config["NetworkingConfig"] == {"EndpointsConfig": {"op-egress-e": {}}}
    assert f"HTTPS_PROXY={url}" in config["Env"] and "NO_PROXY=" in config["Env"]
    assert EgressSpec.from_label(config["Labels"]["outpost.egress"]) == ALLOW
    assert config["Labels"]["outpost.egress_proxy"] == url
    assert config["HostConfig"]["CapDrop"] == ["ALL"]
    assert network_name("op", "edge/1", EgressMode.ALLOWLIST).startswith("op-egress-edge-1-")
    assert network_name("op", "e", EgressMode.UNRESTRICTED) == "op-open-e"


def test_exports() -> None:
    assert sorted(egress.__all__) == [
        "Allowlist",
        "Attachment",
        "EgressController",
        "EgressMode",
        "EgressProxy",
        "EgressSpec",
        "HostPattern",
        "LocalHandler",
        "LocalService",
        "NetworkRecord",
        "ProxyLimits",
        "Resolver",
        "normalize_host",
        "parse_pattern",
        "proxy_env",
        "refusal_reason",
        "system_resolver",
    ]
    for name in set(egress.__all__) - {"Resolver", "LocalHandler"}:  # Callable aliases
        assert getattr(egress, name).__module__.startswith("edge_agent.egress."), name
