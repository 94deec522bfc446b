"""The systemd units under a real systemd: `systemd-analyze verify`, then packaging/install-edge.sh in
a container running systemd as PID 1, registration through the unit's user and paths, Type=notify
readiness, a tool call in a sibling sandbox (the host's Docker socket is mounted), and a clean drain
on `systemctl stop`.

In the first edge test the control plane runs in this process, bound to the Docker bridge gateway
only. In the others both units run in the same container (one shared, installed box): the control
plane under systemd (Type=notify, its model key a credential) with the edge enrolled against it, and
the edge's watchdog killing and restarting a frozen edge."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.e2e.bridge import (
    EDGE_CONFIG,
    bridge_control_plane,
    connected_edge_ids,
    enrollment_token,
    run,
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
        self.environment: str | None = None  # in the control plane under systemd, once made
        self.edge_ids: set[str] = set()  # edges enrolled there: their sandboxes go at teardown

    async def sh(self, script: str, *, check: bool = True, input: bytes | None = None) -> str:
        args = ("docker", "exec", *(("-i",) if input is not None else ()), self.name, "sh", "-c", script)
        return await run(*args, check=check, input=input)

    async def show(self, unit: str, *props: str) -> dict[str, str]:
        out = await self.sh(f"systemctl show {unit} " + " ".join(f"-p {p}" for p in props))
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def _docker(*args: str, input: bytes | None = None, check: bool = True) -> str:
    """``docker ARGS`` from a synchronous (module-scoped) fixture: stdout and stderr together."""
    proc = subprocess.run(
        ["docker", *args], input=input, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300
    )
    text = proc.stdout.decode(errors="replace")
    if check and proc.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} exited {proc.returncode}:\n{text}")
    return text


def _boot_box() -> Box:
    _docker("build", "--quiet", "-t", IMAGE, "-", input=DOCKERFILE.encode())
    name = f"outpost-e2e-systemd-{uuid.uuid4().hex[:8]}"
    _docker(
        "run",
        "--detach",
        f"--name={name}",
        *SYSTEMD_FLAGS,
        "--volume=/var/run/docker.sock:/var/run/docker.sock",
        IMAGE,
    )
    deadline = time.monotonic() + 60
    while True:
        state = _docker("exec", name, "systemctl", "is-system-running", check=False).strip()
        if state in ("running", "degraded"):
            # systemd makes / shared on a host, not in a container; credentials (LoadCredential=)
            # are mounted from a child namespace and need it.
            _docker("exec", name, "mount", "--make-rshared", "/")
            return Box(name)
        if time.monotonic() > deadline:
            _docker("rm", "--force", "--volumes", name, check=False)
            raise AssertionError(f"systemd in {name} did not boot: {state}")
        time.sleep(0.2)


def _remove_box(box: Box) -> None:
    """The box, and the sandboxes (siblings on this engine) of the edges enrolled in it."""
    for edge_id in box.edge_ids:
        label = f"label=outpost.edge_id={edge_id}"
        for container in _docker("ps", "-aq", "--filter", label).split():
            _docker("rm", "--force", container, check=False)
        for volume in _docker("volume", "ls", "-q", "--filter", label).split():
            _docker("volume", "rm", "--force", volume, check=False)
    _docker("rm", "--force", "--volumes", box.name, check=False)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One wheelhouse for the module: the project with its ``edge`` and ``control`` extras."""
    dest = tmp_path_factory.mktemp("wheels")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", f"{REPO}[edge,control]", "-w", str(dest)],
        check=True,
        capture_output=True,
    )
    return dest


@pytest.fixture
def box(docker_client: object) -> Iterator[Box]:
    """A fresh box, nothing installed."""
    b = _boot_box()
    try:
        yield b
    finally:
        _remove_box(b)


@pytest.fixture(scope="module")
def installed_box(docker_client: object, wheels: Path) -> Iterator[Box]:
    """One box shared by the tests below: the units copied to /src, the package (both extras)
    installed with packaging/install-edge.sh, the edge's config written. Tests leave it usable."""
    b = _boot_box()
    try:
        for rel in _UNIT_FILES:
            _docker("exec", b.name, "mkdir", "-p", f"/src/{Path(rel).parent}")
            _docker("cp", str(REPO / rel), f"{b.name}:/src/{rel}")
        _docker("cp", str(wheels), f"{b.name}:/src/wheels")
        gid = os.stat("/var/run/docker.sock").st_gid
        _docker(
            "exec",
            b.name,
            "sh",
            "-c",
            f"groupadd --gid {gid} docker && /src/packaging/install-edge.sh --wheels /src/wheels "
            "--package 'outpost[edge,control]'",
        )
        config = yaml.safe_dump(EDGE_CONFIG).encode()
        _docker("exec", "-i", b.name, "sh", "-c", "cat > /etc/outpost-edge/config.yaml", input=config)
        yield b
    finally:
        _remove_box(b)


_UNIT_FILES = (
    "packaging/install-edge.sh",
    "systemd/outpost-edge.service",
    "systemd/outpost-control.service",
)


async def _copy_units(box: Box) -> None:
    await box.sh("mkdir -p /src/packaging /src/systemd")
    for rel in _UNIT_FILES:
        await run("docker", "cp", str(REPO / rel), f"{box.name}:/src/{rel}")


async def test_units_verify_clean_under_systemd(installed_box: Box) -> None:
    box = installed_box  # ExecStart must exist for verify: the package is installed the documented way
    for unit in ("outpost-edge.service", "outpost-control.service"):
        out = await box.sh(
            f"cp /src/systemd/{unit} /etc/systemd/system/ && systemd-analyze verify {unit} 2>&1"
        )
        assert out.strip() == "", f"systemd-analyze verify {unit}:\n{out}"


async def test_edge_under_systemd_ready_serves_and_drains(box: Box, wheels: Path, tmp_path: Path) -> None:
    await _copy_units(box)
    await run("docker", "cp", str(wheels), f"{box.name}:/src/wheels")
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


# -- the control plane under systemd, the edge enrolled against it, in one box ---------------------
CONTROL_CONFIG = {
    "http_host": "127.0.0.1",
    "http_port": 8080,
    "tunnel_host": "127.0.0.1",
    "tunnel_port": 7443,
    "heartbeat_interval_s": 1.0,
    "heartbeat_timeout_s": 5.0,
    "drain_grace_s": 2.0,
    "edge_wait_s": 20.0,
}
MODEL_KEY = f"sk-test-{uuid.uuid4().hex}"  # must never show in argv, environment or journal


async def _cli(box: Box, command: str, args: str = "") -> str:
    """``outpost-control COMMAND ARGS`` in the box as root, with the admin key the control plane
    wrote in its data directory; stdout only (stderr shown if it fails)."""
    return await box.sh(
        f"outpost-control {command} --data-dir /var/lib/outpost-control {args} 2>/tmp/cli.err"
        " || { cat /tmp/cli.err; exit 1; }"
    )


async def _journal(box: Box, unit: str) -> str:
    return await box.sh(f"journalctl -u {unit} --no-pager -o cat", check=False)


async def _systemctl(box: Box, command: str, units: str) -> None:
    """``systemctl COMMAND UNITS``; failing, the units' journals are in the assertion message."""
    journals = " ".join(f"-u {u}" for u in units.split())
    await box.sh(f"systemctl {command} {units} || {{ journalctl {journals} --no-pager | tail -60; exit 1; }}")


async def _install_control_plane(box: Box) -> None:
    """The control plane's install, by hand as docs/operations.md describes it (idempotent)."""
    await box.sh(
        "id -u outpost-control >/dev/null 2>&1 || useradd --system --user-group "
        "--home-dir /var/lib/outpost-control --no-create-home --shell /usr/sbin/nologin outpost-control"
        " && ln -sf /opt/outpost/bin/outpost-control /usr/local/bin/outpost-control"
        " && install -d -m 0750 -o root -g outpost-control /etc/outpost-control"
        " && install -m 0640 -o root -g outpost-control /dev/null /etc/outpost-control/config.yaml"
        " && (umask 077 && cat > /etc/outpost-control/anthropic-api-key)"
        " && install -m 0644 /src/systemd/outpost-control.service /etc/systemd/system/"
        " && systemctl daemon-reload",
        input=MODEL_KEY.encode(),
    )
    await box.sh("cat > /etc/outpost-control/config.yaml", input=yaml.safe_dump(CONTROL_CONFIG).encode())


async def _enroll_edge(box: Box) -> None:
    """An environment and a token from the control plane's CLI, the edge registered with them."""
    env = json.loads(await _cli(box, "environments create", "--name systemd"))
    box.environment = str(env["id"])
    token = json.loads(await _cli(box, "tokens create", f"--environment {env['id']}"))
    await box.sh("umask 077 && cat > /root/enroll-token", input=token["token"].encode())
    out = await box.sh(
        "/src/packaging/install-edge.sh register "
        "--control-plane http://127.0.0.1:8080 --token-file /root/enroll-token "
        f"--ca-fingerprint {token['ca_fingerprint']}"
    )
    registered = re.search(r"registered edge (\S+)", out)
    assert registered, out
    box.edge_ids.add(registered[1])


async def _enrolled_edge(box: Box) -> str:
    """The control plane active under systemd and the edge enrolled there (whatever ran before in
    this box); the environment's id."""
    if box.environment is None:
        await _install_control_plane(box)
        await _systemctl(box, "start", "outpost-control")
        await _enroll_edge(box)
    await _systemctl(box, "start", "outpost-control")
    assert box.environment is not None
    return box.environment


async def _echo(box: Box, environment: str, session: str) -> str:
    return await _cli(box, "exec", f"--environment {environment} --session {session} bash 'echo hi'")


async def test_control_plane_under_systemd_ready_serves_an_edge_and_stops(installed_box: Box) -> None:
    box = installed_box
    await _install_control_plane(box)
    # Type=notify: `systemctl start` returns only after READY=1, sent once the API and the tunnel
    # listen: the API answers at once, no retry.
    await _systemctl(box, "start", "outpost-control")
    state = await box.show(
        "outpost-control", "ActiveState", "SubState", "Type", "NotifyAccess", "WatchdogUSec", "User"
    )
    assert state == {
        "ActiveState": "active",
        "SubState": "running",
        "Type": "notify",
        "NotifyAccess": "main",
        "WatchdogUSec": "30s",
        "User": "outpost-control",
    }, state
    await box.sh(
        "python3 -c 'import urllib.request as u; u.urlopen(\"http://127.0.0.1:8080/healthz\", timeout=2)'"
    )
    # The key is read from the credential: only its path is on the command line; the key is nowhere
    # in argv, the environment or the journal.
    pid = (await box.show("outpost-control", "MainPID"))["MainPID"]
    argv = (await box.sh(f"tr '\\0' ' ' < /proc/{pid}/cmdline")).split()
    assert "--model-api-key-file" in argv, argv
    assert argv[argv.index("--model-api-key-file") + 1] == (
        "/run/credentials/outpost-control.service/anthropic-api-key"
    ), argv
    environ = await box.sh(f"tr '\\0' '\\n' < /proc/{pid}/environ")
    assert "WATCHDOG_USEC=30000000" in environ, environ
    for where in (" ".join(argv), environ, await _journal(box, "outpost-control")):
        assert MODEL_KEY not in where
    assert "no model API key" not in await _journal(box, "outpost-control")

    # The edge in the same box enrolls against it and serves a tool call.
    await _enroll_edge(box)
    assert box.environment is not None
    await _systemctl(box, "start", "outpost-edge")  # returns once its tunnel is up
    out = await _echo(box, box.environment, "s-control")
    assert out.strip() == "hi", out
    await _cli(box, "destroy-sandbox", f"--environment {box.environment} --session s-control")

    # SIGTERM: STOPPING=1, drain, exit 0.
    await _systemctl(box, "stop", "outpost-control")
    final = await box.show("outpost-control", "ActiveState", "Result", "ExecMainStatus")
    assert final == {"ActiveState": "inactive", "Result": "success", "ExecMainStatus": "0"}, final
    assert "draining edges" in await _journal(box, "outpost-control")


async def test_edge_watchdog_restarts_a_frozen_edge(installed_box: Box) -> None:
    box = installed_box
    environment = await _enrolled_edge(box)
    dropin = "[Service]\nWatchdogSec=3\nTimeoutAbortSec=2\nRestartSec=1\nLimitCORE=0\n"
    await box.sh(
        "mkdir -p /etc/systemd/system/outpost-edge.service.d"
        " && cat > /etc/systemd/system/outpost-edge.service.d/test.conf && systemctl daemon-reload",
        input=dropin.encode(),
    )
    try:
        await _systemctl(box, "restart", "outpost-edge")
        before = await box.show("outpost-edge", "ActiveState", "WatchdogUSec", "NRestarts", "MainPID")
        assert before["ActiveState"] == "active" and before["WatchdogUSec"] == "3s", before
        assert (await _echo(box, environment, "s-watchdog")).strip() == "hi"

        # Frozen: no more WATCHDOG=1. systemd sends SIGABRT, then SIGKILL after TimeoutAbortSec,
        # and Restart=on-failure starts it again.
        await box.sh("systemctl kill --kill-whom=main -s SIGSTOP outpost-edge")
        deadline = time.monotonic() + 60
        while True:
            now = await box.show("outpost-edge", "ActiveState", "NRestarts", "MainPID")
            if (
                int(now["NRestarts"]) > int(before["NRestarts"])
                and now["ActiveState"] == "active"
                and now["MainPID"] not in ("0", before["MainPID"])
            ):
                break
            assert time.monotonic() < deadline, (now, await _journal(box, "outpost-edge"))
            await asyncio.sleep(0.2)
        assert "Watchdog timeout" in await box.sh("journalctl -u outpost-edge --no-pager", check=False)
        # Active again means READY=1 again: its tunnel is back, and it serves (the sandbox goes
        # with the box).
        assert (await _echo(box, environment, "s-watchdog")).strip() == "hi"
    finally:
        await box.sh(
            "rm -f /etc/systemd/system/outpost-edge.service.d/test.conf && systemctl daemon-reload",
            check=False,
        )
