"""``outpost-control serve`` under systemd: READY=1 once serving, WATCHDOG=1 while it runs,
STOPPING=1 on SIGTERM; and the model API key read from a file (a systemd credential)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from control_plane import cli, cli_serve, server
from control_plane.config import ControlPlaneConfig
from control_plane.model_api_key import ModelApiKeyFileError, model_api_key, model_api_key_file
from outpost_wire.cli_support import UsageError

KEY = "sk-unit-0123456789"


# -- the key file ------------------------------------------------------------------------------
def test_the_configured_file_wins_over_the_environment(tmp_path: Path) -> None:
    (tmp_path / "key").write_text(f"{KEY}\n")
    config = ControlPlaneConfig(model_api_key_file=tmp_path / "key")
    assert model_api_key(config, {"ANTHROPIC_API_KEY": "other"}) == KEY
    assert model_api_key_file(config, {"ANTHROPIC_API_KEY_FILE": "/elsewhere"}) == tmp_path / "key"


def test_the_environment_names_a_file_or_holds_the_key(tmp_path: Path) -> None:
    (tmp_path / "key").write_text(KEY)
    config = ControlPlaneConfig()
    assert model_api_key(config, {"ANTHROPIC_API_KEY_FILE": str(tmp_path / "key")}) == KEY
    assert model_api_key(config, {"ANTHROPIC_API_KEY": KEY}) == KEY
    assert model_api_key(config, {}) is None


def test_an_empty_file_means_no_key(tmp_path: Path) -> None:
    (tmp_path / "key").write_text("\n")
    config = ControlPlaneConfig(model_api_key_file=tmp_path / "key")
    assert model_api_key(config, {"ANTHROPIC_API_KEY": "ignored"}) is None


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda p: None, "no such file"),
        (lambda p: p.mkdir(), "is a directory"),
        (lambda p: p.write_bytes(b"\xff\xfe"), "not UTF-8"),
        (lambda p: p.write_text(f"{KEY} {KEY}-second\n"), "more than one word"),
    ],
)
def test_a_bad_file_is_a_typed_error_that_names_the_path_not_the_key(
    tmp_path: Path, make: Any, reason: str
) -> None:
    path = tmp_path / "key"
    make(path)
    with pytest.raises(ModelApiKeyFileError) as caught:
        model_api_key(ControlPlaneConfig(model_api_key_file=path), {})
    assert caught.value.path == path and reason in caught.value.reason
    assert str(path) in str(caught.value) and KEY not in str(caught.value)


def test_an_unreadable_file_is_a_typed_error(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_text(KEY)
    path.chmod(0)
    config = ControlPlaneConfig(model_api_key_file=path)
    if os.geteuid() == 0:  # root reads it anyway
        assert model_api_key(config, {}) == KEY
    else:
        with pytest.raises(ModelApiKeyFileError, match="not readable"):
            model_api_key(config, {})


def _serve_args(*argv: str) -> Any:
    return cli._parser().parse_args(["serve", *argv])


def test_serve_takes_the_file_from_a_flag_and_fails_clearly_before_listening(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY_FILE", raising=False)
    (tmp_path / "key").write_text(KEY)
    args = _serve_args("--data-dir", str(tmp_path), "--model-api-key-file", str(tmp_path / "key"))
    assert cli_serve.serve_config(args).model_api_key_file == tmp_path / "key"
    missing = _serve_args("--data-dir", str(tmp_path), "--model-api-key-file", str(tmp_path / "nope"))
    with pytest.raises(UsageError, match=r"model API key file .*/nope: no such file"):
        cli_serve.serve_config(missing)
    monkeypatch.setenv("ANTHROPIC_API_KEY_FILE", str(tmp_path / "gone"))
    with pytest.raises(UsageError, match=r"model API key file .*/gone: no such file"):
        cli_serve.serve_config(_serve_args("--data-dir", str(tmp_path)))


# -- sd_notify from serve ----------------------------------------------------------------------
@pytest.fixture
def listener(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = str(tmp_path / "notify")
    sock.bind(path)
    sock.setblocking(False)
    yield sock, path
    sock.close()


class _FakeControlPlane:
    """Stands in for ControlPlane: records whether it is serving when READY=1 goes out."""

    serving = False

    def __init__(self, config: ControlPlaneConfig) -> None:
        self.id = "cp_test"
        self.http_url = "http://127.0.0.1:1"
        self.tunnel_address = "127.0.0.1:2"
        self.admin_key_path = config.data_dir / "admin-api-key"

    async def __aenter__(self) -> _FakeControlPlane:
        _FakeControlPlane.serving = True
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        _FakeControlPlane.serving = False


async def test_serve_says_ready_pets_the_watchdog_and_says_stopping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, listener: tuple[socket.socket, str]
) -> None:
    sock, path = listener
    monkeypatch.setattr(server, "ControlPlane", _FakeControlPlane)
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    monkeypatch.setenv("WATCHDOG_USEC", "20000")  # every 10 ms
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY_FILE", raising=False)
    loop = asyncio.get_running_loop()

    async def recv() -> bytes:
        return await asyncio.wait_for(loop.sock_recv(sock, 64), 5)

    args = _serve_args("--data-dir", str(tmp_path), "--http", "127.0.0.1:0", "--tunnel", "127.0.0.1:0")
    serve = asyncio.create_task(cli_serve.serve(args))
    assert await recv() == b"READY=1"
    assert _FakeControlPlane.serving
    assert [await recv() for _ in range(3)] == [b"WATCHDOG=1"] * 3
    os.kill(os.getpid(), signal.SIGTERM)  # serve's handler: drain and return 0
    assert await asyncio.wait_for(serve, 5) == 0
    received = []
    while True:
        try:
            received.append(sock.recv(64))
        except BlockingIOError:
            break
    assert b"STOPPING=1" in received and received[-1] == b"STOPPING=1", received
    assert not _FakeControlPlane.serving
