"""Sandbox names, labels and the hardened container configuration."""

from __future__ import annotations

import re

from edge_agent.sandbox.docker_runtime import container_config
from edge_agent.sandbox.spec import (
    SandboxLimits,
    SandboxSpec,
    container_name,
    sandbox_labels,
    sanitize_name,
    volume_name,
)

_DOCKER_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]+$")


def test_sanitize_keeps_safe_ids() -> None:
    assert sanitize_name("sesn_01ABC-x.y") == "sesn_01ABC-x.y"


def test_sanitize_unsafe_and_long_ids_are_distinct_and_valid() -> None:
    ids = ["a/b", "a:b", "a b", "../../etc", "-x", "é", "x" * 200, "x" * 201, ""]
    names = [sanitize_name(i) for i in ids]
    assert len(set(names)) == len(ids)
    for name in names:
        assert _DOCKER_NAME.match(name), name
        assert len(name) <= 48


def test_names_and_labels() -> None:
    assert volume_name("outpost", "sesn_1") == "outpost-ws-sesn_1"
    name = container_name("outpost", "sesn_1")
    assert name.startswith("outpost-sb-sesn_1-") and name != container_name("outpost", "sesn_1")
    assert sandbox_labels("edge-1", "sesn_1") == {
        "outpost.managed": "1",
        "outpost.edge_id": "edge-1",
        "outpost.session_id": "sesn_1",
    }


def test_container_config_is_hardened() -> None:
    limits = SandboxLimits(image="outpost-sandbox:1", cpus=1.5, memory_bytes=512 << 20, pids=128)
    spec = SandboxSpec.for_session(prefix="outpost", edge_id="e", session_id="s", limits=limits)
    config = container_config(spec)
    host = config["HostConfig"]
    assert config["User"] == "1000:1000"
    assert config["WorkingDir"] == "/workspace"
    assert config["NetworkDisabled"] is True
    assert config["Labels"] == sandbox_labels("e", "s")
    assert host["CapDrop"] == ["ALL"]
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["Privileged"] is False
    assert host["ReadonlyRootfs"] is True
    assert host["Init"] is True
    assert host["NetworkMode"] == "none"
    assert host["PidsLimit"] == 128
    assert host["Memory"] == host["MemorySwap"] == 512 << 20
    assert host["NanoCpus"] == 1_500_000_000
    assert "mode=1777" in host["Tmpfs"]["/tmp"]
    assert "uid=1000" in host["Tmpfs"]["/home/agent"]
    assert host["Mounts"] == [
        {"Type": "volume", "Source": "outpost-ws-s", "Target": "/workspace", "ReadOnly": False}
    ]
    assert "Binds" not in host and "Devices" not in host and "CapAdd" not in host
