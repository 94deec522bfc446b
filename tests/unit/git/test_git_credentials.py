"""Credential selection (delivered token > the edge's own for the host > none), the header, and
that a credential never shows its secret."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from edge_agent.errors import ConfigError
from edge_agent.git import EdgeCredentials, GitCredentialConfig, parse_remote
from edge_agent.git.config import DEFAULT_USERNAME
from edge_agent.mcp.config import SecretSource

CANARY = "canary-edge-token-7f3a"


def secret_file(tmp_path: Path, value: str, mode: int = 0o600) -> Path:
    path = tmp_path / "git.token"
    path.write_text(value + "\n")
    os.chmod(path, mode)
    return path


def edge_credentials(tmp_path: Path, **extra: object) -> EdgeCredentials:
    config = GitCredentialConfig.model_validate(
        {"host": "git.internal:8443", "token": {"from_file": str(secret_file(tmp_path, CANARY))}, **extra}
    )
    return EdgeCredentials([config])


def test_a_delivered_token_wins_over_the_edge_credential(tmp_path: Path) -> None:
    creds = edge_credentials(tmp_path)
    chosen = creds.select_now(parse_remote("https://git.internal:8443/org/app.git"), "delivered-tok")
    assert chosen is not None
    assert (chosen.origin, chosen.scheme, chosen.username, chosen.secret) == (
        "delivered",
        "basic",
        DEFAULT_USERNAME,
        "delivered-tok",
    )


def test_the_edge_credential_for_the_host_and_port(tmp_path: Path) -> None:
    creds = edge_credentials(tmp_path, username="outpost-bot")
    chosen = creds.select_now(parse_remote("https://GIT.internal:8443/org/app.git"), "")
    assert chosen is not None
    assert (chosen.origin, chosen.username, chosen.secret) == ("edge", "outpost-bot", CANARY)
    header = chosen.authorization()
    assert header == "Basic " + base64.b64encode(f"outpost-bot:{CANARY}".encode()).decode()
    # Another port or host is another authority: no credential.
    assert creds.select_now(parse_remote("https://git.internal/org/app.git"), "") is None
    assert creds.select_now(parse_remote("https://git.internal:9443/org/app.git"), "") is None
    assert creds.select_now(parse_remote("https://other.internal:8443/org/app.git"), "") is None


async def test_select_reads_the_secret_off_the_loop(tmp_path: Path) -> None:
    creds = edge_credentials(tmp_path, scheme="bearer")
    chosen = await creds.select(parse_remote("https://git.internal:8443/x.git"), "")
    assert chosen is not None and chosen.authorization() == f"Bearer {CANARY}"
    assert await creds.select(parse_remote("https://elsewhere/x.git"), "") is None


def test_a_rotated_secret_file_is_used_at_once(tmp_path: Path) -> None:
    creds = edge_credentials(tmp_path)
    secret_file(tmp_path, "rotated")
    chosen = creds.select_now(parse_remote("https://git.internal:8443/x.git"), "")
    assert chosen is not None and chosen.secret == "rotated"


def test_secret_files_readable_by_others_are_refused_naming_the_key(tmp_path: Path) -> None:
    config = GitCredentialConfig(
        host="git.internal", token=SecretSource(from_file=secret_file(tmp_path, CANARY, 0o644))
    )
    creds = EdgeCredentials([config])
    with pytest.raises(ConfigError, match=r"git\.credentials\[git\.internal\]\.token.*chmod 600") as info:
        creds.check()
    assert CANARY not in str(info.value)


def test_credentials_never_show_their_secret(tmp_path: Path) -> None:
    chosen = edge_credentials(tmp_path).select_now(parse_remote("https://git.internal:8443/x"), "")
    assert chosen is not None
    assert CANARY not in repr(chosen) and CANARY not in str(chosen)
    forms = chosen.redactions()
    assert CANARY in forms and chosen.authorization() in forms
    assert base64.b64encode(f"{DEFAULT_USERNAME}:{CANARY}".encode()).decode() in forms
