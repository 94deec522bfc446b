"""``outpost-edge`` with every bad input a new operator tends to give it: one line on stderr saying
what is wrong and what to do, never a traceback, and the documented exit code (docs/operations.md,
"Exit codes": 2 usage/config, 3 refused, 4 unreachable). The real CLI runs as a subprocess against
a real control plane (SQLite, gRPC and uvicorn on loopback, port 0); no Docker."""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from control_plane.server import ControlPlane
from edge_agent.cli import _parser
from edge_agent.config import load_config
from edge_agent.connection.dialer import endpoints_for
from edge_agent.identity import Identity
from outpost_wire.cli_support import EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_USAGE
from tests.integration.edge_cli import edge_cli, new_token
from tests.support.edge_link import api_fixture as api_fixture
from tests.support.edge_link import cp_fixture as cp_fixture
from tests.support.edge_link import no_ambient_proxy as no_ambient_proxy

pytestmark = pytest.mark.usefixtures("no_ambient_proxy")


@dataclass
class Case:
    """One bad input: the arguments (``{cp}`` and ``{fp}`` filled in), the files to lay
    out in the working directory first, the expected exit code and words of the message."""

    argv: tuple[str, ...]
    code: int
    says: str
    files: dict[str, str] = field(default_factory=dict)
    token: str = ""  # "fresh", "used", "expired" or "unknown": the enrollment token in file `tok`
    env: dict[str, str] = field(default_factory=dict)


REG = ("register", "--control-plane", "{cp}", "--state-dir", "st")
CASES: dict[str, Case] = {
    "config file missing": Case(
        ("run", "--config", "missing.yaml"), EXIT_USAGE, "missing.yaml does not exist"
    ),
    "config not YAML": Case(
        ("run", "--config", "bad.yaml"), EXIT_USAGE, "is not valid YAML at line 2", {"bad.yaml": "a: [\n"}
    ),
    "config a list": Case(
        ("check-config", "--config", "l.yaml"), EXIT_USAGE, "must hold a mapping", {"l.yaml": "- a\n"}
    ),
    "config unknown key": Case(
        ("check-config", "--config", "k.yaml"),
        EXIT_USAGE,
        "invalid configuration in k.yaml: bogus: unknown key",
        {"k.yaml": "bogus: 1\n"},
    ),
    "config bad value": Case(
        ("run", "--config", "v.yaml"),
        EXIT_USAGE,
        "connection.heartbeat_interval_s: Input should be greater than 0",
        {"v.yaml": "connection:\n  heartbeat_interval_s: -1\n"},
    ),
    "empty config, not registered": Case(
        ("run", "--config", "empty.yaml", "--state-dir", "st"),
        EXIT_USAGE,
        "no control plane configured: empty.yaml names none",
        {"empty.yaml": ""},
    ),
    "comments-only config, not registered": Case(
        ("run", "--config", "c.yaml", "--state-dir", "st"),
        EXIT_USAGE,
        "register this edge first: outpost-edge register",
        {"c.yaml": "# nothing\n# here\n"},
    ),
    "configured but not registered": Case(
        ("run", "--config", "cp.yaml", "--state-dir", "st"),
        EXIT_USAGE,
        "this edge is not registered",
        {"cp.yaml": "control_plane:\n  url: http://127.0.0.1:1\n"},
    ),
    "lower-case log level is fine": Case(
        ("run", "--log-level", "debug", "--config", "empty.yaml", "--state-dir", "st"),
        EXIT_USAGE,
        "no control plane configured",  # got past the log level
        {"empty.yaml": ""},
    ),
    "unknown log level": Case(("run", "--log-level", "loud"), EXIT_USAGE, "unknown log level 'loud'"),
    "log level from the environment": Case(
        ("check-config",), EXIT_USAGE, "unknown log level 'chatty'", env={"OUTPOST_LOG_LEVEL": "chatty"}
    ),
    "token file missing": Case((*REG, "--token-file", "nope"), EXIT_USAGE, "token file nope does not exist"),
    "token file empty": Case(
        (*REG, "--token-file", "t0"), EXIT_USAGE, "token file t0 is empty", {"t0": "\n"}
    ),
    "no token at all": Case(REG, EXIT_USAGE, "no enrollment token; pass --token-file"),
    "no control plane URL": Case(("register", "--token-file", "tok"), EXIT_USAGE, "pass --control-plane URL"),
    "control plane URL not a URL": Case(
        ("register", "--control-plane", "outpost.example.com", "--token", "x"),
        EXIT_USAGE,
        "must start with https://",
    ),
    "control plane URL bad port": Case(
        ("register", "--control-plane", "http://h:99999", "--token", "x"), EXIT_USAGE, "is not a URL"
    ),
    "CA fingerprint not hex": Case(
        (*REG, "--token", "x", "--ca-fingerprint", "abc"), EXIT_USAGE, "64 hex digits"
    ),
    "control plane unreachable": Case(
        ("register", "--control-plane", "http://127.0.0.1:9", "--token", "x", "--state-dir", "st"),
        EXIT_UNREACHABLE,
        "cannot reach the control plane",
    ),
    "token used": Case(
        (*REG, "--token-file", "tok", "--ca-fingerprint", "{fp}"),
        EXIT_REFUSED,
        "rejected: used",
        token="used",
    ),
    "token expired": Case(
        (*REG, "--token-file", "tok", "--ca-fingerprint", "{fp}"),
        EXIT_REFUSED,
        "rejected: expired",
        token="expired",
    ),
    "token unknown": Case((*REG, "--token-file", "tok"), EXIT_REFUSED, "tokens create", token="unknown"),
    "wrong CA fingerprint": Case(
        (*REG, "--token-file", "tok", "--ca-fingerprint", "ab" * 32),
        EXIT_REFUSED,
        "CA fingerprint mismatch",
        token="fresh",
    ),
    "write-config over a config with keys": Case(
        (*REG, "--token-file", "tok", "--write-config", "k.yaml"),
        EXIT_USAGE,
        "k.yaml exists and is not empty: not overwriting it (--force replaces it)",
        {"k.yaml": "name: keep-me\n"},
        token="fresh",
    ),
    "renew without an identity": Case(
        ("renew-certificate", "--state-dir", "st"), EXIT_USAGE, "no edge identity in"
    ),
    "doctor with a missing config": Case(
        ("doctor", "--config", "missing.yaml"), EXIT_USAGE, "does not exist"
    ),
}


@pytest.mark.parametrize("name", list(CASES))
async def test_bad_input_gets_one_line_and_its_exit_code(
    name: str, cp: ControlPlane, api: httpx.AsyncClient, tmp_path: Path
) -> None:
    case = CASES[name]
    fp = cp.ca.fingerprint_sha256 if cp.ca is not None else ""
    for file, text in case.files.items():
        (tmp_path / file).write_text(text)
    if case.token:
        (tmp_path / "tok").write_text(await _token(case.token, cp, api, tmp_path))
    argv = [a.format(cp=cp.http_url, fp=fp) for a in case.argv]

    code, out, err = await edge_cli(*argv, cwd=tmp_path, env=case.env)

    assert "Traceback" not in out + err, err
    lines = [line for line in err.splitlines() if line.strip()]
    message = lines[-1] if lines else ""
    assert message.startswith("outpost-edge") and case.says in message, err
    assert code == case.code, err
    # Before the message only argparse's usage lines (for its own errors) or a logged warning
    # (registering without a CA pin) may appear.
    noise = [ln for ln in lines[:-1] if not (ln.startswith(("usage:", " ")) or " WARNING " in ln)]
    assert not noise, err
    assert not (tmp_path / "st" / "identity" / "edge.key").exists()  # nothing enrolled


async def _token(kind: str, cp: ControlPlane, api: httpx.AsyncClient, tmp_path: Path) -> str:
    if kind == "unknown":
        return "oet_" + "0" * 40
    if kind == "expired":
        token = await new_token(api, ttl_seconds=0.01)
        expires = datetime.fromisoformat(token["expires_at"]).timestamp()
        while time.time() <= expires:  # wait for the clock to pass it, not for a guessed time
            await asyncio.sleep(0.01)
        return str(token["token"])
    token = await new_token(api)
    if kind == "used":
        code, _, err = await edge_cli(
            "register",
            "--control-plane",
            cp.http_url,
            "--token",
            token["token"],
            "--state-dir",
            "first",
            cwd=tmp_path,
        )
        assert code == 0, err
    return str(token["token"])


async def test_version(tmp_path: Path) -> None:
    from outpost_wire.version import SOFTWARE_VERSION

    code, out, err = await edge_cli("--version", cwd=tmp_path)
    assert (code, out.strip(), err) == (0, f"outpost-edge {SOFTWARE_VERSION}", "")


_NO_ENV = {"-h", "--help", "--force", "--write-config", "-o", "--output"}


def test_every_flag_has_help_naming_its_environment_variable() -> None:
    parser = _parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for command, sub in subparsers.choices.items():
        for action in sub._actions:
            flag = max(action.option_strings, key=len, default=action.dest)
            assert action.help, f"{command} {flag} has no help"
            if not set(action.option_strings) & _NO_ENV:
                assert "(env: OUTPOST_" in action.help, f"{command} {flag}: {action.help}"


# -- register writes a working config ---------------------------------------------------------------
async def test_register_writes_the_config_named_by_config_and_run_reads_it(
    cp: ControlPlane, api: httpx.AsyncClient, tmp_path: Path
) -> None:
    """The README's flow: `register ... --config PATH` on a missing (or sample) file writes it;
    `run --config PATH` then finds the control plane and the identity from it alone."""
    token = await new_token(api)
    (tmp_path / "tok").write_text(token["token"])
    config = tmp_path / "etc" / "config.yaml"
    code, out, err = await edge_cli(
        "register",
        "--control-plane",
        cp.http_url,
        "--token-file",
        "tok",
        "--ca-fingerprint",
        token["ca_fingerprint"],
        "--state-dir",
        "state",
        "--config",
        str(config),
        cwd=tmp_path,
    )
    assert code == 0, err
    assert f"config written to {config}" in out and f"outpost-edge run --config {config}" in out
    assert config.stat().st_mode & 0o777 == 0o644
    text = config.read_text()
    assert text.startswith("# Outpost edge configuration")
    loaded = load_config(config)
    assert loaded.control_plane.url == cp.http_url
    assert loaded.control_plane.tunnel_address == cp.tunnel_address
    assert loaded.state_dir == tmp_path / "state"  # absolute, wherever `run` starts from
    assert (loaded.state_dir / "identity" / "edge.key").stat().st_mode & 0o777 == 0o600

    # Registering again into the same state directory needs --force; the config is kept.
    again = await new_token(api)
    (tmp_path / "tok").write_text(again["token"])
    argv = ("register", "--control-plane", cp.http_url, "--token-file", "tok", "--config", str(config))
    code, _, err = await edge_cli(*argv, cwd=tmp_path)
    assert code == EXIT_USAGE and "already holds the identity of edge" in err and "--force" in err, err
    code, out, err = await edge_cli(*argv, "--force", cwd=tmp_path)
    assert code == 0, err
    assert "replaced the identity of edge" in out and "config written" not in out  # it has keys
    assert config.read_text() == text


async def test_register_keeps_a_comments_only_config_which_works_with_the_identity(
    cp: ControlPlane, api: httpx.AsyncClient, tmp_path: Path
) -> None:
    """An installed sample (comments only) is a valid config and is left alone: the edge dials
    what enrollment stored. --write-config over it needs --force; an empty file is written."""
    sample = tmp_path / "config.yaml"
    text = "# Outpost edge configuration: see docs/configuration.md\n# name: host-17\n"
    sample.write_text(text)
    token = await new_token(api)
    (tmp_path / "tok").write_text(token["token"])
    argv = ("register", "--control-plane", cp.http_url, "--token-file", "tok", "--config", str(sample))
    code, out, err = await edge_cli(*argv, "--state-dir", "s1", cwd=tmp_path)
    assert code == 0, err
    assert sample.read_text() == text and "config written" not in out
    assert f"start the edge with: outpost-edge run --config {sample}" in out
    endpoint = endpoints_for(load_config(sample), Identity.load(tmp_path / "s1"))[0]
    assert (endpoint.control_plane_url, endpoint.tunnel_address) == (cp.http_url, cp.tunnel_address)

    token = await new_token(api)
    (tmp_path / "tok").write_text(token["token"])
    argv = ("register", "--control-plane", cp.http_url, "--token-file", "tok", "--state-dir", "s2")
    code, _, err = await edge_cli(*argv, "--write-config", str(sample), cwd=tmp_path)
    assert code == EXIT_USAGE and "exists and is not empty" in err, err
    code, _, err = await edge_cli(
        *argv, "--write-config", str(sample), "--force", "--name", "two", cwd=tmp_path
    )
    assert code == 0, err
    assert load_config(sample).state_dir == tmp_path / "s2" and load_config(sample).name == "two"

    empty = tmp_path / "empty.yaml"
    empty.write_text("\n")
    token = await new_token(api)
    (tmp_path / "tok").write_text(token["token"])
    argv = ("register", "--control-plane", cp.http_url, "--token-file", "tok", "--state-dir", "s3")
    code, out, err = await edge_cli(*argv, "--config", str(empty), cwd=tmp_path)
    assert code == 0 and f"config written to {empty}" in out, err
    assert load_config(empty).control_plane.url == cp.http_url
