"""Every bad input to ``outpost-control`` ends as one line on stderr and its documented exit code
(docs/operations.md, "Exit codes": 1 other, 2 usage or configuration, 3 refused, 4 unreachable),
never a traceback.

``serve`` runs as the real command in a subprocess (its failures happen before it serves, and it
configures logging for its process); the operator commands run through ``main(argv)`` against a
real control plane serving HTTPS with its own CA, so that trust is exercised too. Valid edge cases
(an empty or comments-only config, ``--log-level debug``) must start and stop cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from control_plane import cli, cli_client, server
from control_plane.cli import main
from control_plane.server import ControlPlane
from outpost_wire.cli_support import EXIT_FAILURE, EXIT_OK, EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_USAGE
from tests.support.edge_link import control_plane_config

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Case:
    name: str
    argv: list[str]  # {tmp}, {busy}, {closed}, {url} are filled in
    code: int
    message: str  # a substring of the one line on stderr
    files: dict[str, str] = field(default_factory=dict)  # name -> content, written in {tmp}
    env: dict[str, str] = field(default_factory=dict)


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port something listens on."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _fill(argv: list[str], **values: object) -> list[str]:
    return [arg.format(**values) for arg in argv]


def _clean_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OUTPOST_", "ANTHROPIC_"))}
    return env | {"ANTHROPIC_API_KEY": "unused", "HOME": str(tmp_path)}


# -- serve -----------------------------------------------------------------------------------------
FREE = ["--data-dir", "{tmp}/data", "--http", "127.0.0.1:0", "--tunnel", "127.0.0.1:0"]
SERVE_CASES = [
    Case("missing config", ["serve", "--config", "{tmp}/missing.yaml", *FREE], EXIT_USAGE,
         "config file {tmp}/missing.yaml does not exist"),
    Case("invalid YAML", ["serve", "--config", "{tmp}/c.yaml", *FREE], EXIT_USAGE,
         "is not valid YAML at line 2", {"c.yaml": "http_port: [1,\n"}),
    Case("not a mapping", ["serve", "--config", "{tmp}/c.yaml", *FREE], EXIT_USAGE,
         "must hold a mapping of keys, not a list", {"c.yaml": "- http_port\n"}),
    Case("unknown key", ["serve", "--config", "{tmp}/c.yaml", *FREE], EXIT_USAGE,
         "invalid configuration in {tmp}/c.yaml: htp_port: Extra inputs are not permitted",
         {"c.yaml": "htp_port: 1\n"}),
    Case("unsupported store", ["serve", "--config", "{tmp}/c.yaml", *FREE], EXIT_USAGE,
         "expected sqlite:///path/to/file.db or postgresql://user@host:port/database",
         {"c.yaml": "store_url: mysql://x\n"}),
    Case("bad value", ["serve", "--config", "{tmp}/c.yaml", *FREE], EXIT_USAGE,
         "heartbeat_interval_s: Input should be greater than 0", {"c.yaml": "heartbeat_interval_s: -1\n"}),
    Case("unknown log level", ["serve", "--log-level", "loud", *FREE], EXIT_USAGE,
         "unknown log level 'loud'"),
    Case("bad address", ["serve", "--http", "nohost", "--data-dir", "{tmp}/data"], EXIT_USAGE,
         "expected HOST:PORT, got 'nohost'"),
    Case("missing model key file", ["serve", "--model-api-key-file", "{tmp}/nokey", *FREE], EXIT_USAGE,
         "model API key file {tmp}/nokey: no such file"),
    Case("data dir impossible", ["serve", "--data-dir", "{tmp}/file/data", "--http", "127.0.0.1:0",
         "--tunnel", "127.0.0.1:0"], EXIT_USAGE, "cannot create the data directory {tmp}/file/data",
         {"file": "not a directory"}),
    Case("HTTP port in use", ["serve", "--data-dir", "{tmp}/data", "--http", "127.0.0.1:{busy}",
         "--tunnel", "127.0.0.1:0"], EXIT_FAILURE,
         "cannot listen on 127.0.0.1:{busy} (API): Address already in use; is another outpost-control"),
    Case("tunnel port in use", ["serve", "--data-dir", "{tmp}/data", "--http", "127.0.0.1:0",
         "--tunnel", "127.0.0.1:{busy}"], EXIT_FAILURE,
         "cannot listen on 127.0.0.1:{busy} (tunnel): Address already in use"),
    Case("unknown command", ["serv"], EXIT_USAGE, "invalid choice: 'serv'"),
]  # fmt: skip


@pytest.mark.parametrize("case", SERVE_CASES, ids=lambda c: c.name)
def test_serve_refuses_bad_input_in_one_line(case: Case, tmp_path: Path, busy_port: int) -> None:
    for name, content in case.files.items():
        (tmp_path / name).write_text(content)
    argv = _fill(case.argv, tmp=tmp_path, busy=busy_port)
    done = subprocess.run(
        [sys.executable, "-m", "control_plane.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env=_clean_env(tmp_path),
        cwd=REPO,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("outpost-control"), lines
    assert case.message.format(tmp=tmp_path, busy=busy_port) in lines[0]
    assert done.returncode == case.code, done.stderr


@pytest.mark.parametrize(
    ("config", "extra"),
    [
        ("", ["--log-level", "debug"]),
        ("# nothing set: every key has its default\n\n", ["--log-level", "Warning"]),
    ],
    ids=["empty config, debug", "comments-only config, Warning"],
)
def test_an_empty_config_is_valid_and_log_levels_take_any_case(
    tmp_path: Path, config: str, extra: list[str]
) -> None:
    (tmp_path / "c.yaml").write_text(config)
    argv = ["serve", "--config", str(tmp_path / "c.yaml"), *_fill(FREE, tmp=tmp_path), *extra]
    proc = subprocess.Popen(
        [sys.executable, "-m", "control_plane.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_clean_env(tmp_path),
        cwd=REPO,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # printed once it serves
        assert first.startswith("Outpost control plane cp_"), (first, proc.stderr and proc.stderr.read())
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == EXIT_OK, err
    assert "Traceback" not in err


def test_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "control_plane.cli", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.startswith("outpost-control ")


# -- operator commands ---------------------------------------------------------------------------------
TRUSTED = ["--url", "{url}", "--data-dir", "{data}"]
CLIENT_CASES = [
    Case("API key file missing", ["environments", "list", "--url", "{url}", "--ca-file", "{ca}",
         "--api-key-file", "{tmp}/nofile"], EXIT_USAGE, "API key file {tmp}/nofile does not exist"),
    Case("API key file empty", ["environments", "list", "--url", "{url}", "--ca-file", "{ca}",
         "--api-key-file", "{tmp}/empty"], EXIT_USAGE, "API key file {tmp}/empty is empty", {"empty": "\n"}),
    Case("no API key at all", ["environments", "list", "--url", "{url}", "--ca-file", "{ca}"], EXIT_USAGE,
         "no API key; pass --api-key-file"),
    Case("wrong API key", ["edges", "list", "--url", "{url}", "--ca-file", "{ca}"], EXIT_REFUSED,
         "the control plane refused the API key (401 authentication_error",
         env={"OUTPOST_API_KEY": "sk-wrong"}),
    Case("unreachable", ["edges", "list", "--url", "http://127.0.0.1:{closed}", "--data-dir", "{data}"],
         EXIT_UNREACHABLE, "cannot reach the control plane at http://127.0.0.1:{closed}: "),
    Case("https without trust", ["environments", "list", "--url", "{url}"], EXIT_USAGE,
         "is not trusted", env={"OUTPOST_API_KEY": "sk-any"}),
    Case("CA file missing", ["environments", "list", "--url", "{url}", "--ca-file", "{tmp}/ca.pem"],
         EXIT_USAGE, "CA file {tmp}/ca.pem does not exist", env={"OUTPOST_API_KEY": "sk-any"}),
    Case("not a URL", ["environments", "list", "--url", "ftp:/x", "--data-dir", "{data}"], EXIT_USAGE,
         "--url 'ftp:/x' is not an http:// or https:// URL"),
    Case("exec input not JSON", ["exec", *TRUSTED, "--environment", "env_x", "--session", "s", "read",
         "--input", "{{bad"], EXIT_USAGE, "--input is not valid JSON"),
    Case("exec input not an object", ["exec", *TRUSTED, "--environment", "env_x", "--session", "s", "read",
         "--input", "[1]"], EXIT_USAGE, "--input must be a JSON object, not list"),
    Case("exec without input", ["exec", *TRUSTED, "--environment", "env_x", "--session", "s", "read"],
         EXIT_USAGE, "no tool input"),
    Case("exec in an unknown environment", ["exec", *TRUSTED, "--environment", "env_x", "--session", "s",
         "bash", "true"], EXIT_FAILURE, "404 not_found_error"),
    Case("bad -o", ["edges", "list", *TRUSTED, "-o", "yaml"], EXIT_USAGE, "invalid choice: 'yaml'"),
    Case("token count", ["tokens", "create", *TRUSTED, "--environment", "env_x", "--count", "0"], EXIT_USAGE,
         "--count must be 1..1000"),
    Case("token in an unknown environment", ["tokens", "create", *TRUSTED, "--environment", "env_x"],
         EXIT_FAILURE, "404 not_found_error"),
    Case("bad TTL", ["tokens", "create", *TRUSTED, "--environment", "env_x", "--ttl-s", "-5"], EXIT_USAGE,
         "400 invalid_request_error"),
    Case("unknown token", ["tokens", "revoke", "etok_nope", *TRUSTED], EXIT_FAILURE, "404 not_found_error"),
    Case("unknown edge", ["edges", "revoke", "edge_nope", *TRUSTED], EXIT_FAILURE, "404 not_found_error"),
    Case("unknown session", ["sessions", "events", "sesn_nope", *TRUSTED], EXIT_FAILURE,
         "404 not_found_error"),
    Case("sessions limit", ["sessions", "list", *TRUSTED, "--limit", "0"], EXIT_USAGE,
         "--limit must be at least 1"),
]  # fmt: skip


@pytest.fixture(scope="module")
def tls_control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """One control plane serving HTTPS with a certificate from its own CA, for every case; it runs
    on an event loop in a thread of its own, while the cases call ``main`` synchronously."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="control-plane", daemon=True)
    thread.start()
    cp = ControlPlane(control_plane_config(tmp_path_factory.mktemp("cp"), http_tls=True))
    try:
        asyncio.run_coroutine_threadsafe(cp.start(), loop).result(120)
        yield cp
    finally:
        asyncio.run_coroutine_threadsafe(cp.close(), loop).result(120)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


@pytest.fixture
def clean_client_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OUTPOST_URL", "OUTPOST_API_KEY", "OUTPOST_DATA_DIR", "OUTPOST_CA_FILE"):
        monkeypatch.delenv(name, raising=False)
    for name in ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("clean_client_env")
@pytest.mark.parametrize("case", CLIENT_CASES, ids=lambda c: c.name)
def test_operator_commands_refuse_bad_input_in_one_line(
    case: Case,
    tls_control_plane: ControlPlane,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cp = tls_control_plane
    for name, content in case.files.items():
        (tmp_path / name).write_text(content)
    for name, value in case.env.items():
        monkeypatch.setenv(name, value)
    values = {
        "tmp": tmp_path,
        "url": cp.http_url,
        "data": cp.config.data_dir,
        "ca": cp.config.data_dir / "ca" / "ca.crt",
        "closed": closed_port(),
    }
    try:
        code = main(_fill(case.argv, **values))
    except SystemExit as exc:  # argparse's usage errors exit (2) from inside main
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("outpost-control"), lines
    assert case.message.format(**values) in lines[0]
    assert code == case.code, err
    assert out == ""


@pytest.mark.usefixtures("clean_client_env")
def test_the_same_commands_work_with_trust_and_a_key(
    tls_control_plane: ControlPlane, capsys: pytest.CaptureFixture[str]
) -> None:
    """The control case: with the data dir (key and CA) every listing answers, exit 0."""
    cp = tls_control_plane
    trusted = ["--url", cp.http_url, "--data-dir", str(cp.config.data_dir)]
    for argv in (["environments", "list"], ["tokens", "list"], ["edges", "list"], ["sessions", "list"]):
        assert main([*argv, *trusted, "-o", "table"]) == 0, argv
        out, err = capsys.readouterr()
        assert err == "" and out.splitlines()[-1] == "(none)", (argv, out)


def test_the_client_reads_the_admin_key_file_the_server_writes() -> None:
    assert cli_client.ADMIN_KEY_FILE == server.ADMIN_KEY_FILE


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from _parsers(child)


def test_every_flag_has_help_and_names_its_environment_variable() -> None:
    checked = 0
    for parser in _parsers(cli._parser()):
        for action in parser._actions:
            if not action.option_strings or action.dest == "help":
                continue
            assert action.help, (parser.prog, action.option_strings)
            env = {"--url": "OUTPOST_URL", "--data-dir": "OUTPOST_DATA_DIR", "--ca-file": "OUTPOST_CA_FILE"}
            env |= {
                "--model-api-key-file": "ANTHROPIC_API_KEY_FILE",
                "--model-base-url": "ANTHROPIC_BASE_URL",
            }
            for flag in action.option_strings:
                if flag in env:
                    assert f"(env: {env[flag]})" in action.help, (parser.prog, flag)
            checked += 1
    assert checked > 50
