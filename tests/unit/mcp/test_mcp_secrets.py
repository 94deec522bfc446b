"""Secret resolution: files must be 0600 (the refusal names the fix), env must be set; no value in
any message."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from edge_agent.errors import ConfigError
from edge_agent.mcp import SecretSource
from edge_agent.mcp.secrets import resolve_secret, resolve_secrets

SECRET = "s3cret-value-for-tests"


def _file(tmp_path: Path, mode: int, text: str = SECRET + "\n") -> Path:
    path = tmp_path / "token"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_file_0600_is_read_and_one_newline_stripped(tmp_path: Path) -> None:
    path = _file(tmp_path, 0o600)
    assert resolve_secret(SecretSource(from_file=path), where="x") == SECRET
    crlf = _file(tmp_path, 0o400, SECRET + "\r\n")
    assert resolve_secret(SecretSource(from_file=crlf), where="x") == SECRET


@pytest.mark.parametrize("mode", [0o640, 0o644, 0o604, 0o660])
def test_group_or_world_access_is_refused_with_the_fix(tmp_path: Path, mode: int) -> None:
    path = _file(tmp_path, mode)
    with pytest.raises(ConfigError) as info:
        resolve_secret(SecretSource(from_file=path), where="mcp_servers[a].stdio.env.K")
    message = str(info.value)
    assert f"chmod 600 {path}" in message
    assert "mcp_servers[a].stdio.env.K" in message
    assert SECRET not in message


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot open secret file"):
        resolve_secret(SecretSource(from_file=tmp_path / "nope"), where="x")
    directory = tmp_path / "d"
    directory.mkdir(mode=0o700)
    with pytest.raises(ConfigError, match="not a regular file"):
        resolve_secret(SecretSource(from_file=directory), where="x")


def test_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUTPOST_TEST_SECRET", SECRET)
    monkeypatch.delenv("OUTPOST_TEST_UNSET", raising=False)
    assert resolve_secret(SecretSource(from_env="OUTPOST_TEST_SECRET"), where="x") == SECRET
    with pytest.raises(ConfigError, match="OUTPOST_TEST_UNSET is not set"):
        resolve_secret(SecretSource(from_env="OUTPOST_TEST_UNSET"), where="x")


def test_mapping_names_each_key(tmp_path: Path) -> None:
    bad = _file(tmp_path, 0o644)
    sources = {"A": SecretSource(value="plain"), "B": SecretSource(from_file=bad)}
    with pytest.raises(ConfigError, match=r"env\.B"):
        resolve_secrets(sources, where="env")
    assert resolve_secrets({"A": SecretSource(value="plain")}, where="env") == {"A": "plain"}
    assert os.environ.get(SECRET) is None
