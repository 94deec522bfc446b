"""Containers that stand in for a fresh Debian host (systemd as PID 1, the host's Docker socket
mounted so that edges in them run their sandboxes as siblings on this engine), a copy of the
checkout to install from, and a wheelhouse for installing offline.

Shared by the packaging tests (test_systemd.py, test_readme.py)."""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
import zipfile
from pathlib import Path

from tests.e2e.bridge import run
from tests.support import REPO

__all__ = [
    "Box",
    "boot_box",
    "checkout_tar",
    "docker_cli",
    "old_outpost_wheel",
    "project_wheel",
    "remove_box",
    "wheelhouse",
]

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
# What a checkout's copy leaves out: what install-lib.sh leaves out when it builds from one.
_NOT_IN_CHECKOUT = {"build", "dist", "__pycache__"}


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

    async def copy_checkout(self, dest: str = "/src") -> None:
        """The checkout (as install-lib.sh copies it) at ``dest`` in the box."""
        await self.sh(f"mkdir -p {dest} && tar -C {dest} -xf -", input=checkout_tar())

    async def wait_for(self, script: str, *, timeout_s: float, what: str) -> str:
        """Run ``script`` until it exits 0 (its output) or ``timeout_s`` passes."""
        deadline = time.monotonic() + timeout_s
        while True:
            out = await self.sh(f'{{ {script}; }} 2>&1; echo "exit=$?"', check=False)
            out, _, status = out.rstrip().rpartition("\n")
            if status == "exit=0":
                return out
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout_s} s waiting for {what}:\n{out}")
            await asyncio.sleep(0.3)


def docker_cli(*args: str, input: bytes | None = None, check: bool = True) -> str:
    """``docker ARGS`` from synchronous (module-scoped) fixtures: stdout and stderr together."""
    proc = subprocess.run(
        ["docker", *args], input=input, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300
    )
    text = proc.stdout.decode(errors="replace")
    if check and proc.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} exited {proc.returncode}:\n{text}")
    return text


def boot_box(*flags: str) -> Box:
    """A fresh box, nothing installed; ``flags`` go to ``docker run``."""
    docker_cli("build", "--quiet", "-t", IMAGE, "-", input=DOCKERFILE.encode())
    name = f"outpost-e2e-systemd-{uuid.uuid4().hex[:8]}"
    docker_cli(
        "run",
        "--detach",
        f"--name={name}",
        *SYSTEMD_FLAGS,
        "--volume=/var/run/docker.sock:/var/run/docker.sock",
        *flags,
        IMAGE,
    )
    deadline = time.monotonic() + 60
    while True:
        state = docker_cli("exec", name, "systemctl", "is-system-running", check=False).strip()
        if state in ("running", "degraded"):
            # systemd makes / shared on a host, not in a container; credentials (LoadCredential=)
            # are mounted from a child namespace and need it.
            docker_cli("exec", name, "mount", "--make-rshared", "/")
            return Box(name)
        if time.monotonic() > deadline:
            docker_cli("rm", "--force", "--volumes", name, check=False)
            raise AssertionError(f"systemd in {name} did not boot: {state}")
        time.sleep(0.2)


def remove_box(box: Box) -> None:
    """The box, and the sandboxes (siblings on this engine) of the edges enrolled in it."""
    for edge_id in box.edge_ids:
        label = f"label=outpost.edge_id={edge_id}"
        for container in docker_cli("ps", "-aq", "--filter", label).split():
            docker_cli("rm", "--force", container, check=False)
        for volume in docker_cli("volume", "ls", "-q", "--filter", label).split():
            docker_cli("volume", "rm", "--force", volume, check=False)
    docker_cli("rm", "--force", "--volumes", box.name, check=False)


def _in_checkout(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    parts = Path(info.name).parts  # "./.venv" -> (".venv",)
    if parts and parts[0].startswith("."):
        return None  # top level: .venv, .git, caches
    if any(p in _NOT_IN_CHECKOUT or p.endswith(".egg-info") for p in parts):
        return None
    return info


def checkout_tar() -> bytes:
    """The working tree as a tar stream, without what is not source (venv, caches, build output)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(REPO, arcname=".", filter=_in_checkout)
    return buf.getvalue()


def wheelhouse(dest: Path, extras: str = "edge,control") -> Path:
    """Offline installs: wheels of the project (built from a clean copy of the checkout), of its
    dependencies with ``extras``, and of setuptools (to build a checkout offline), made with the
    host's pip (its index and CA)."""
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(fileobj=io.BytesIO(checkout_tar())) as tar:
            tar.extractall(tmp, filter="data")
        for argv in (
            ["wheel", f"{tmp}[{extras}]", "-w", str(dest)],
            ["download", "setuptools>=77", "-d", str(dest)],
        ):
            proc = subprocess.run(
                [sys.executable, "-m", "pip", "--quiet", *argv], capture_output=True, text=True, timeout=900
            )
            if proc.returncode != 0:
                raise AssertionError(f"pip {' '.join(argv)} failed:\n{proc.stdout}{proc.stderr}")
    return dest


def project_wheel(wheels: Path) -> Path:
    """The project's own wheel in a wheelhouse."""
    (wheel,) = wheels.glob("outpost_runtime-*.whl")
    return wheel


def old_outpost_wheel(dest: Path) -> Path:
    """A wheel of a distribution named ``outpost`` that owns the command ``outpost-edge``: what an
    install from before the rename (or the unrelated PyPI project of that name) left in a venv."""
    wheel = dest / "outpost-0.0.1-py3-none-any.whl"
    info = "outpost-0.0.1.dist-info"
    files = {
        "outpost_old.py": "def main() -> int:\n    return 99\n",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: outpost\nVersion: 0.0.1\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": "[console_scripts]\noutpost-edge = outpost_old:main\n",
    }
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
        zf.writestr(f"{info}/RECORD", "".join(f"{name},,\n" for name in [*files, f"{info}/RECORD"]))
    return wheel
