"""The systemd units under a real systemd: `systemd-analyze verify`, then packaging/install-edge.sh and
packaging/install-control.sh in a container running systemd as PID 1 (from a copy of the checkout,
or from a wheel built from it; dependencies offline from a wheelhouse), registration through the
unit's user and paths, Type=notify readiness, a tool call in a sibling sandbox (the host's Docker
socket is mounted), and a clean drain on `systemctl stop`.

In the first edge test the control plane runs in this process, bound to the Docker bridge gateway
only. In the others both units run in the same container (one shared, installed box): the control
plane under systemd (Type=notify, its model key a credential), first on the sample config the
installer wrote, with the edge enrolled against it, and the edge's watchdog killing and restarting
a frozen edge."""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.e2e.boxes import (
    Box,
    boot_box,
    docker_cli,
    old_outpost_wheel,
    project_wheel,
    remove_box,
    wheelhouse,
)
from tests.e2e.bridge import (
    EDGE_CONFIG,
    bridge_control_plane,
    connected_edge_ids,
    enrollment_token,
    run,
)
from tests.support import REPO
from tests.support.e2e import text_of

# systemd in a container, the wheels built from the checkout (module fixtures, set up in the first
# test): minutes, not seconds.
pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One wheelhouse for the module: the project, its ``edge`` and ``control`` extras, setuptools."""
    return wheelhouse(tmp_path_factory.mktemp("wheels"))


@pytest.fixture
def box(docker_client: object) -> Iterator[Box]:
    """A fresh box, nothing installed."""
    b = boot_box()
    try:
        yield b
    finally:
        remove_box(b)


@pytest.fixture(scope="module")
def installed_box(docker_client: object, wheels: Path) -> Iterator[Box]:
    """One box shared by the tests below: the packaging files copied to /src, the package (both
    extras, from its wheel) installed with packaging/install-edge.sh and install-control.sh, the
    edge's config written. Tests leave it usable."""
    b = boot_box()
    try:
        for rel in _UNIT_FILES:
            docker_cli("exec", b.name, "mkdir", "-p", f"/src/{Path(rel).parent}")
            docker_cli("cp", str(REPO / rel), f"{b.name}:/src/{rel}")
        docker_cli("cp", str(wheels), f"{b.name}:/src/wheels")
        gid = os.stat("/var/run/docker.sock").st_gid
        source = f"--wheel /src/wheels/{project_wheel(wheels).name} --wheels /src/wheels"
        docker_cli(
            "exec",
            b.name,
            "sh",
            "-c",
            f"groupadd --gid {gid} docker && /src/packaging/install-edge.sh {source}"
            f" && (umask 077 && echo {MODEL_KEY} > /root/model-key)"
            f" && /src/packaging/install-control.sh {source} --model-api-key-file /root/model-key"
            " && rm /root/model-key",
        )
        config = yaml.safe_dump(EDGE_CONFIG).encode()
        docker_cli("exec", "-i", b.name, "sh", "-c", "cat > /etc/outpost-edge/config.yaml", input=config)
        yield b
    finally:
        remove_box(b)


_UNIT_FILES = (
    "packaging/install-lib.sh",
    "packaging/install-edge.sh",
    "packaging/install-control.sh",
    "packaging/config/edge.yaml",
    "packaging/config/control.yaml",
    "systemd/outpost-edge.service",
    "systemd/outpost-control.service",
)


async def test_units_verify_clean_under_systemd(installed_box: Box) -> None:
    box = installed_box  # ExecStart must exist for verify: the package is installed the documented way
    for unit in ("outpost-edge.service", "outpost-control.service"):
        out = await box.sh(
            f"cp /src/systemd/{unit} /etc/systemd/system/ && systemd-analyze verify {unit} 2>&1"
        )
        assert out.strip() == "", f"systemd-analyze verify {unit}:\n{out}"


async def test_edge_under_systemd_ready_serves_and_drains(box: Box, wheels: Path, tmp_path: Path) -> None:
    # From the checkout, as documented: the script builds the wheel of the checkout it sits in.
    await box.copy_checkout("/src")
    await run("docker", "cp", str(wheels), f"{box.name}:/wheels")
    # An older install left a distribution named "outpost" owning the command: it is replaced.
    old = old_outpost_wheel(tmp_path)
    await run("docker", "cp", str(old), f"{box.name}:/root/{old.name}")
    await box.sh(
        f"python3 -m venv /opt/outpost && /opt/outpost/bin/pip install -q --no-index /root/{old.name}"
    )
    gid = os.stat("/var/run/docker.sock").st_gid
    out = await box.sh(f"groupadd --gid {gid} docker && /src/packaging/install-edge.sh --wheels /wheels")
    assert "installed outpost-runtime" in out and "removed the distribution 'outpost'" in out, out
    assert "outpost-runtime" in await box.sh("/opt/outpost/bin/pip list 2>/dev/null")
    assert await box.sh("/opt/outpost/bin/pip show outpost", check=False) == (
        "WARNING: Package(s) not found: outpost\n"
    )
    assert (await box.sh("systemctl is-enabled outpost-edge")).strip() == "enabled"
    # The sample config, comments only, as installed; a second run keeps an edited config.
    sample = (REPO / "packaging/config/edge.yaml").read_text()
    assert await box.sh("cat /etc/outpost-edge/config.yaml") == sample
    assert (await box.sh("stat -c '%U:%G %a' /etc/outpost-edge/config.yaml")).split() == [
        "root:outpost-edge",
        "640",
    ]
    await box.sh("echo '# edited' >> /etc/outpost-edge/config.yaml")
    out = await box.sh("/src/packaging/install-edge.sh --wheels /wheels")
    assert "kept /etc/outpost-edge/config.yaml" in out, out
    assert (await box.sh("tail -1 /etc/outpost-edge/config.yaml")).strip() == "# edited"
    assert await box.sh("/usr/local/bin/outpost-edge check-config --config /etc/outpost-edge/config.yaml")
    # The edge runs on that config as installed: the shipped defaults (sandboxes named outpost-*,
    # removed with the box by their edge's label).

    async with bridge_control_plane(tmp_path / "cp") as (_cp, api, environment):
        token = await enrollment_token(api, environment)
        await box.sh("umask 077 && cat > /root/enroll-token", input=token["token"].encode())
        out = await box.sh(
            "/src/packaging/install-edge.sh register --control-plane "
            f"{_cp.http_url} --token-file /root/enroll-token --ca-fingerprint {token['ca_fingerprint']}"
        )
        registered = re.search(r"registered edge (\S+)", out)
        assert registered, out
        box.edge_ids.add(registered[1])
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


async def _configure_control_plane(box: Box) -> None:
    """The test's settings over the sample config packaging/install-control.sh wrote (idempotent):
    faster heartbeats and drain, a longer wait for an edge."""
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
        await _configure_control_plane(box)
        await _systemctl(box, "start", "outpost-control")
        await _enroll_edge(box)
    await _systemctl(box, "start", "outpost-control")
    assert box.environment is not None
    return box.environment


async def _echo(box: Box, environment: str, session: str) -> str:
    return await _cli(box, "exec", f"--environment {environment} --session {session} bash 'echo hi'")


async def test_control_plane_under_systemd_ready_serves_an_edge_and_stops(installed_box: Box) -> None:
    box = installed_box
    # As installed: the sample config (comments only: the defaults) and the key credential.
    sample = (REPO / "packaging/config/control.yaml").read_text()
    assert await box.sh("cat /etc/outpost-control/config.yaml") == sample
    modes = await box.sh(
        "stat -c '%n %U:%G %a' /etc/outpost-control/config.yaml /etc/outpost-control/anthropic-api-key"
        " /var/lib/outpost-control"
    )
    assert modes.splitlines() == [
        "/etc/outpost-control/config.yaml root:outpost-control 640",
        "/etc/outpost-control/anthropic-api-key root:root 600",
        "/var/lib/outpost-control outpost-control:outpost-control 700",
    ], modes
    assert (await box.sh("systemctl is-enabled outpost-control")).strip() == "enabled"
    await _systemctl(box, "start", "outpost-control")
    await box.sh(
        "python3 -c 'import urllib.request as u; u.urlopen(\"http://127.0.0.1:8080/healthz\", timeout=2)'"
    )
    await _systemctl(box, "stop", "outpost-control")

    await _configure_control_plane(box)
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
