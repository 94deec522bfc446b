"""README's "Using it" commands, run as printed on one fresh host (a container that stands in for
both hosts: ``outpost.example.com`` resolves to its loopback, the host's Docker socket runs the
sandboxes).

The commands are read from the README's first ``sh`` block in that section, so the test follows the
README: a command added there runs here, a changed one runs changed. What the test adds is only
what a person does between the lines: it installs the package as the README says (``pip install``
from the checkout into a venv; offline, from a wheelhouse), runs the two daemons in the
background, fills in the placeholders (``env_...``, ``<printed by tokens create>``) from what the
commands before printed, and puts the token into the file named by ``--token-file``."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.e2e.boxes import Box, boot_box, remove_box, wheelhouse
from tests.e2e.bridge import run
from tests.support import REPO

# The README's commands in a fresh box, the wheels built from the checkout: minutes, not seconds.
pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

PLACEHOLDERS = {"env_...", "<printed by tokens create>"}
_PATH = "/opt/outpost/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def readme_commands() -> list[list[str]]:
    """The commands of the first ``sh`` block under "## Using it", each as argv (continuations
    joined, comments dropped), placeholders left in."""
    text = (REPO / "README.md").read_text()
    section = text.split("\n## Using it\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"^```sh\n(.*?)^```", section, re.S | re.M)
    assert block, "README: no ```sh block under ## Using it"
    joined = block[1].replace("\\\n", " ")
    found = set(re.findall(r"env_\.\.\.|<[^>\n]*>", joined))
    assert found == PLACEHOLDERS, f"README placeholders changed: {sorted(found)}"
    commands = []
    for line in joined.splitlines():
        # Placeholders hold no quotes or '#': keep them whole through shlex.
        argv = shlex.split(line.replace("<printed by tokens create>", "<CA_FINGERPRINT>"), comments=True)
        if argv:
            commands.append([a.replace("<CA_FINGERPRINT>", "<printed by tokens create>") for a in argv])
    return commands


@dataclass
class Host:
    box: Box
    exports: list[str] = field(default_factory=list)
    values: dict[str, str] = field(default_factory=dict)  # placeholder -> what a command printed
    background: dict[str, str] = field(default_factory=dict)  # log file -> command

    def line(self, argv: list[str]) -> str:
        """``argv`` as a shell command, placeholders filled in."""
        filled = []
        for arg in argv:
            for placeholder, value in self.values.items():
                arg = arg.replace(placeholder, value)
            assert not any(p in arg for p in PLACEHOLDERS), f"nothing printed {arg!r} yet: {argv}"
            filled.append(arg)
        return shlex.join(filled)

    @property
    def shell(self) -> str:
        """In /root, with the README's exports so far (and the venv's commands on PATH)."""
        return " && ".join(["cd /root", f"export PATH={_PATH}", *self.exports])

    async def run(self, argv: list[str]) -> str:
        """A command in the foreground, in /root: its stdout; failing, its stderr is the error."""
        return await self.box.sh(
            f"{self.shell} && {{ {self.line(argv)}; }} 2>/tmp/readme.err"
            " || { echo; cat /tmp/readme.err; exit 1; }"
        )

    async def start(self, argv: list[str], log: str) -> None:
        """A daemon in the background (as a person would in a second terminal)."""
        self.background[log] = shlex.join(argv)
        script = f"{self.shell} && exec {self.line(argv)} >{log} 2>&1"
        await run("docker", "exec", "--detach", self.box.name, "sh", "-c", script)

    async def logs(self) -> str:
        """What the daemons started so far wrote."""
        parts = []
        for log, cmd in self.background.items():
            parts.append(f"--- {cmd}\n" + await self.box.sh(f"cat {log}", check=False))
        return "\n".join(parts)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return wheelhouse(tmp_path_factory.mktemp("wheels"))


@pytest.fixture
def host(docker_client: object, wheels: Path) -> Iterator[Host]:
    box = boot_box("--add-host=outpost.example.com:127.0.0.1")
    try:
        yield Host(box)
    finally:
        remove_box(box)


def _token_file(commands: list[list[str]]) -> str:
    for argv in commands:
        if argv[:2] == ["outpost-edge", "register"]:
            return argv[argv.index("--token-file") + 1]
    raise AssertionError("README: no `outpost-edge register --token-file FILE`")


async def test_readme_using_it_runs_as_printed(host: Host, wheels: Path) -> None:
    commands = readme_commands()
    ran = {" ".join(argv[:2]) for argv in commands}
    for expected in (
        "outpost-control serve",
        "outpost-control environments",
        "outpost-control tokens",
        "outpost-edge register",
        "outpost-edge run",
        "outpost-control exec",
        "outpost-edge doctor",
    ):
        assert expected in ran, f"README no longer has {expected!r}: update this test"

    # "pip install '.[control]' / pip install '.[edge]' into any venv", from the checkout (offline).
    box = host.box
    await box.copy_checkout("/src")
    await run("docker", "cp", str(wheels), f"{box.name}:/wheels")
    await box.sh(
        "python3 -m venv /opt/outpost && cd /src"
        " && /opt/outpost/bin/pip install --quiet --no-index --find-links /wheels '.[control]' '.[edge]'"
    )

    token_file = _token_file(commands)
    try:
        for argv in commands:
            head = " ".join(argv[:2])
            if argv[0] == "export":
                host.exports.append(shlex.join(argv))
            elif head == "outpost-control serve":
                await host.start(argv, "/root/control.log")
                await box.wait_for(_api_up(argv), timeout_s=60, what="the control plane's API")
            elif head == "outpost-edge run":
                await host.start(argv, "/root/edge.log")
                # README: health and metrics on 127.0.0.1:9464; ready once its tunnel is up.
                await box.wait_for(
                    _get("http://127.0.0.1:9464/readyz"), timeout_s=90, what="the edge's /readyz"
                )
                metrics = await box.sh(_get("http://127.0.0.1:9464/metrics", show=True))
                assert "outpost_" in metrics
            else:
                out = await host.run(argv)
                if head == "outpost-control environments":
                    host.values["env_..."] = str(json.loads(out)["id"])
                elif argv[:3] == ["outpost-control", "tokens", "create"]:
                    token = json.loads(out)
                    host.values["<printed by tokens create>"] = str(token["ca_fingerprint"])
                    await box.sh(f"umask 077 && cat > /root/{token_file}", input=token["token"].encode())
                elif head == "outpost-edge register":
                    registered = re.search(r"registered edge (\S+)", out)
                    assert registered, out
                    box.edge_ids.add(registered[1])  # its sandboxes go with the box
                elif head == "outpost-control exec":
                    assert "total " in out, out  # ls -la
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{await host.logs()}") from None


def _get(url: str, *, show: bool = False) -> str:
    """A shell command that GETs ``url`` from inside the box (exit 0 on 2xx)."""
    code = f"import urllib.request as u; r = u.urlopen({url!r}, timeout=5)"
    code += "; print(r.read().decode())" if show else ""
    return f"python3 -c {shlex.quote(code)}"


def _api_up(serve: list[str]) -> str:
    """A shell command that succeeds once ``serve``'s API answers ``/healthz`` on loopback (over
    HTTPS with the control plane's own CA, written at its first start, if it serves HTTPS)."""
    port = serve[serve.index("--http") + 1].rpartition(":")[2]
    if "--http-tls" not in serve:
        return _get(f"http://127.0.0.1:{port}/healthz")
    ca = f"{serve[serve.index('--data-dir') + 1]}/ca/ca.crt"
    code = (
        "import ssl, urllib.request as u; "
        f"c = ssl.create_default_context(cafile={ca!r}); c.check_hostname = False; "
        f"u.urlopen('https://127.0.0.1:{port}/healthz', timeout=5, context=c)"
    )
    return f"python3 -c {shlex.quote(code)}"
