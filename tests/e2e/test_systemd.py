"""The systemd units under a real systemd: `systemd-analyze verify`, then packaging/install-edge.sh in
a container running systemd as PID 1, registration through the unit's user and paths, Type=notify
readiness, a tool call in a sibling sandbox (the host's Docker socket is mounted), and a clean drain
on `systemctl stop`.

The control plane runs in this process, bound to the Docker bridge gateway only."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from tests.e2e.bridge import (
    EDGE_CONFIG,
    bridge_control_plane,
    connected_edge_ids,
    enrollment_token,
    run,
    wheelhouse,
)
from tests.e2e.conftest import REPO, text_of

pytestmark = pytest.mark.docker

IMAGE = "outpost-systemd-test:1"
# Cached by Docker's layer cache: only the first build runs apt.
DOCKERFILE = """\
FROM outpost-sandbox:1
USER root
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
systemd systemd-sysv dbus python3-venv && apt-get clean && rm -rf /var/lib/apt/lists/*
RUN systemctl mask getty.target console-getty.service systemd-logind.service \
systemd-firstboot.service systemd-networkd.service systemd-resolved.service \
&& systemctl set-default multi-user.target
ENV container=docker
STOPSIGNAL SIGRTMIN+3
CMD ["/sbin/init"]
"""
SYSTEMD_FLAGS = (
    "--cap-add=SYS_ADMIN",
    "--security-opt=seccomp=unconfined",
    "--tmpfs=/run",
    "--tmpfs=/run/lock",
    "--cgroupns=host",
    "--volume=/sys/fs/cgroup:/sys/fs/cgroup:rw",
)


class Box:
    """A container running systemd as PID 1."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def sh(self, script: str, *, check: bool = True, input: bytes | None = None) -> str:
        args = ("docker", "exec", *(("-i",) if input is not None else ()), self.name, "sh", "-c", script)
        return await run(*args, check=check, input=input)

    async def show(self, unit: str, *props: str) -> dict[str, str]:
        out = await self.sh(f"systemctl show {unit} " + " ".join(f"-p {p}" for p in props))
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


@pytest.fixture
async def box(docker_client: object, tmp_path: Path) -> AsyncIterator[Box]:
    await run("docker", "build", "--quiet", "-t", IMAGE, "-", input=DOCKERFILE.encode())
    name = f"outpost-e2e-systemd-{uuid.uuid4().hex[:8]}"
    await run(
        "docker",
        "run",
        "--detach",
        f"--name={name}",
        *SYSTEMD_FLAGS,
        "--volume=/var/run/docker.sock:/var/run/docker.sock",
        IMAGE,
    )
    b = Box(name)
    try:
        deadline = time.monotonic() + 60
        while True:
            state = (await b.sh("systemctl is-system-running", check=False)).strip()
            if state in ("running", "degraded"):
                break
            assert time.monotonic() < deadline, f"systemd in {name} did not boot: {state}"
            await asyncio.sleep(0.2)
        yield b
    finally:
        await run("docker", "rm", "--force", "--volumes", name, check=False)


async def _copy_units(box: Box) -> None:
    await box.sh("mkdir -p /src/packaging /src/systemd")
    for rel in (
        "packaging/install-edge.sh",
        "systemd/outpost-edge.service",
        "systemd/outpost-control.service",
    ):
        await run("docker", "cp", str(REPO / rel), f"{box.name}:/src/{rel}")


async def test_units_verify_clean_under_systemd(box: Box, tmp_path: Path) -> None:
    await _copy_units(box)
    # ExecStart must exist for verify: install the package the documented way first.
    await run("docker", "cp", str(wheelhouse(tmp_path / "wheels")), f"{box.name}:/src/wheels")
    gid = os.stat("/var/run/docker.sock").st_gid
    await box.sh(f"groupadd --gid {gid} docker && /src/packaging/install-edge.sh --wheels /src/wheels")
    for unit in ("outpost-edge.service", "outpost-control.service"):
        out = await box.sh(
            f"cp /src/systemd/{unit} /etc/systemd/system/ && systemd-analyze verify {unit} 2>&1"
        )
        assert out.strip() == "", f"systemd-analyze verify {unit}:\n{out}"


async def test_edge_under_systemd_ready_serves_and_drains(box: Box, tmp_path: Path) -> None:
    await _copy_units(box)
    await run("docker", "cp", str(wheelhouse(tmp_path / "wheels")), f"{box.name}:/src/wheels")
    gid = os.stat("/var/run/docker.sock").st_gid
    await box.sh(f"groupadd --gid {gid} docker && /src/packaging/install-edge.sh --wheels /src/wheels")
    assert (await box.sh("systemctl is-enabled outpost-edge")).strip() == "enabled"
    await box.sh("cat > /etc/outpost-edge/config.yaml", input=yaml.safe_dump(EDGE_CONFIG).encode())

    async with bridge_control_plane(tmp_path / "cp") as (_cp, api, environment):
        token = await enrollment_token(api, environment)
        await box.sh("umask 077 && cat > /root/enroll-token", input=token["token"].encode())
        out = await box.sh(
            "/src/packaging/install-edge.sh register --control-plane "
            f"{_cp.http_url} --token-file /root/enroll-token --ca-fingerprint {token['ca_fingerprint']}"
        )
        assert "registered edge" in out, out
        mode = await box.sh("stat -c '%U %a' /var/lib/outpost-edge /var/lib/outpost-edge/identity")
        assert mode.split()[:2] == ["outpost-edge", "700"], mode

        # Type=notify: "activating" until the first tunnel is up, then active/running.
        await box.sh("systemctl start --no-block outpost-edge")
        first = await box.show("outpost-edge", "ActiveState", "SubState", "Type", "NotifyAccess")
        assert first["Type"] == "notify" and first["NotifyAccess"] == "main", first
        assert first["ActiveState"] == "activating", first
        assert not await connected_edge_ids(api), "edge connected before the unit was started"
        deadline = time.monotonic() + 90
        while (await box.show("outpost-edge", "ActiveState"))["ActiveState"] != "active":
            assert time.monotonic() < deadline, await box.sh(
                "journalctl -u outpost-edge --no-pager", check=False
            )
            await asyncio.sleep(0.2)
        state = await box.show("outpost-edge", "ActiveState", "SubState", "WatchdogUSec", "User")
        assert (state["ActiveState"], state["SubState"]) == ("active", "running"), state
        assert state["WatchdogUSec"] == "30s" and state["User"] == "outpost-edge", state
        assert len(await connected_edge_ids(api)) == 1  # READY=1 came only after the tunnel was up

        result = await api.exec(environment, "s-systemd", "bash", {"command": "echo hi"})
        assert not result["is_error"] and text_of(result).strip() == "hi", result
        await api.post("/v1/sandboxes/destroy", {"environment_id": environment, "session_id": "s-systemd"})

        await box.sh("systemctl stop outpost-edge")
        final = await box.show("outpost-edge", "ActiveState", "Result", "ExecMainStatus")
        assert final == {"ActiveState": "inactive", "Result": "success", "ExecMainStatus": "0"}, final
        journal = await box.sh("journalctl -u outpost-edge --no-pager -o cat")
        assert "draining" in journal, journal
