"""Warm-pool members: made like a session's sandbox, without a session; claims and workspaces."""

from __future__ import annotations

from dataclasses import replace

import pytest

from edge_agent.config import EdgeConfig, SandboxConfig
from edge_agent.egress import EgressMode, EgressSpec
from edge_agent.sandbox.docker_runtime import container_config
from edge_agent.sandbox.spec import (
    SandboxLimits,
    SandboxSpec,
    claim_labels,
    claim_volume_name,
    volume_name,
)

LIMITS = SandboxLimits(image="outpost-sandbox:1", cpus=1.0, memory_bytes=512 << 20, pids=128)


def test_a_member_has_no_session_and_a_volume_of_its_own() -> None:
    spec = SandboxSpec.for_pool(prefix="outpost", edge_id="edge-1", pool_token="tok", limits=LIMITS)
    assert spec.name.startswith("outpost-wp-") and spec.volume == spec.name
    assert spec.labels == {
        "outpost.managed": "1",
        "outpost.edge_id": "edge-1",
        "outpost.pool": "tok",
        "outpost.workspace": spec.name,
    }
    other = SandboxSpec.for_pool(prefix="outpost", edge_id="edge-1", pool_token="tok", limits=LIMITS)
    assert other.name != spec.name
    assert not spec.name.startswith(volume_name("outpost", ""))  # -wp- never clashes with -ws-


def test_a_member_is_as_hardened_as_a_sessions_sandbox() -> None:
    egress = EgressSpec(EgressMode.ALLOWLIST, ("example.com",))
    limits = replace(LIMITS, egress=egress)
    proxy = {"HTTP_PROXY": "http://10.0.0.1:3128"}
    member = SandboxSpec.for_pool(
        prefix="outpost", edge_id="e", pool_token="t", limits=limits, network="net", env=proxy, proxy_url="u"
    )
    session = SandboxSpec.for_session(
        prefix="outpost", edge_id="e", session_id="s", limits=limits, network="net", env=proxy, proxy_url="u"
    )
    a, b = container_config(member), container_config(session)
    mounts_a, mounts_b = a["HostConfig"].pop("Mounts"), b["HostConfig"].pop("Mounts")
    labels_a, labels_b = a.pop("Labels"), b.pop("Labels")
    assert a == b  # image, user, limits, capabilities, read-only root, network, proxy environment
    assert [m["Target"] for m in mounts_a] == [m["Target"] for m in mounts_b] == ["/workspace"]
    assert labels_a["outpost.egress"] == labels_b["outpost.egress"]


def test_a_claimed_workspace_is_named_on_replacement_containers() -> None:
    spec = SandboxSpec.for_session(
        prefix="outpost", edge_id="e", session_id="sesn_1", limits=LIMITS, volume="outpost-wp-abc"
    )
    assert spec.volume == "outpost-wp-abc" and spec.labels["outpost.workspace"] == "outpost-wp-abc"
    plain = SandboxSpec.for_session(prefix="outpost", edge_id="e", session_id="sesn_1", limits=LIMITS)
    assert plain.volume == "outpost-ws-sesn_1" and "outpost.workspace" not in plain.labels


def test_claim_volume() -> None:
    assert claim_volume_name("outpost", "sesn_1") == "outpost-claim-sesn_1"
    assert claim_labels("e", "sesn_1", "c0ffee", "outpost-wp-abc") == {
        "outpost.managed": "1",
        "outpost.edge_id": "e",
        "outpost.session_id": "sesn_1",
        "outpost.claimed": "c0ffee",
        "outpost.workspace": "outpost-wp-abc",
    }


def test_pool_size_config() -> None:
    assert EdgeConfig().sandbox.warm_pool_size == 1
    assert SandboxConfig(warm_pool_size=0).warm_pool_size == 0
    with pytest.raises(ValueError, match="warm_pool_size"):
        SandboxConfig(warm_pool_size=-1)
