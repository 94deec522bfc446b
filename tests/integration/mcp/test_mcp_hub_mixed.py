"""Both transports in one hub: digest stability across restarts, on_change, and secrets that never
reach logs or exception messages."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest
from _mcp_support import IDENTITY, TOKEN, allow, http_config, stdio_config, write_secret

from edge_agent.mcp import McpCatalog, McpConnectionFailed, McpHub, McpServerConfig, ServerStatus
from tests.support import eventually
from tests.support.mcp_servers.http_server import HttpMcpServer


def _configs(http_server: HttpMcpServer, token_file: Path, identity_file: Path) -> list[McpServerConfig]:
    return [
        stdio_config("local", env={"OUTPOST_TEST_IDENTITY": {"from_file": str(identity_file)}}),
        http_config("remote", http_server.url, token_file),
    ]


async def test_digest_is_stable_across_restarts(
    http_server: HttpMcpServer, token_file: Path, identity_file: Path
) -> None:
    configs = _configs(http_server, token_file, identity_file)
    async with McpHub(configs, allow("local", "remote")) as hub:
        first = hub.catalog()
        assert [(s.name, s.status) for s in first.servers] == [
            ("local", ServerStatus.UP),
            ("remote", ServerStatus.UP),
        ]
    async with McpHub(configs, allow("local", "remote")) as hub:
        assert hub.catalog().digest == first.digest
        assert hub.catalog() == first
    async with McpHub(configs, allow("local", remote={"tools": ["mul"]})) as hub:
        assert hub.catalog().digest != first.digest  # the policy changed what is advertised


async def test_on_change_follows_a_crash_and_the_restart(
    http_server: HttpMcpServer, token_file: Path, identity_file: Path
) -> None:
    changes: list[McpCatalog] = []
    configs = _configs(http_server, token_file, identity_file)
    async with McpHub(configs, allow("local", "remote"), on_change=changes.append) as hub:
        before = hub.catalog().digest
        assert changes == []  # nothing is reported for the start itself
        with pytest.raises(McpConnectionFailed):
            await hub.call("local", "crash", {})
        await eventually(lambda: len(changes) >= 2 and changes[-1].digest == before)
        assert changes[0].server("local").status is ServerStatus.DOWN  # type: ignore[union-attr]
        assert changes[0].server("remote").status is ServerStatus.UP  # type: ignore[union-attr]


async def test_secrets_never_reach_logs_or_errors(
    http_server: HttpMcpServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # the SDK's and httpx2's debug logs included
    env_secret = "env-secret-value-5521"
    wrong_token = "wrong-token-value-90210"
    argument_secret = "argument-secret-hunter2"
    configs = [
        stdio_config(
            "local",
            env={
                "OUTPOST_TEST_IDENTITY": {"from_file": str(write_secret(tmp_path / "id", IDENTITY))},
                "OUTPOST_TEST_API_KEY": {"from_file": str(write_secret(tmp_path / "key", env_secret))},
            },
        ),
        http_config("remote", http_server.url, write_secret(tmp_path / "token", TOKEN)),
        http_config("wrong", http_server.url, write_secret(tmp_path / "wrong", wrong_token)),
        stdio_config("child", command=sys.executable, env={"K": {"value": env_secret}}),
    ]
    errors: list[str] = []
    async with McpHub(configs, allow("local", "remote", "wrong", "child")) as hub:
        await hub.call("local", "echo", {"text": argument_secret})
        await hub.call("remote", "greet", {"name": argument_secret})
        for server, tool in (("wrong", "mul"), ("local", "crash"), ("local", "echo")):
            try:
                await hub.call(server, tool, {"text": argument_secret})
            except McpConnectionFailed as exc:
                errors.append(str(exc))
        errors.extend(s.last_error or "" for s in hub.catalog().servers)
        await eventually(lambda: hub.catalog().server("local").status is ServerStatus.UP)  # type: ignore[union-attr]

    assert len(errors) >= 3
    every_record = [(r.name, r.getMessage() + (r.exc_text or "")) for r in caplog.records]
    assert every_record
    for secret in (TOKEN, wrong_token, env_secret, IDENTITY):
        assert all(secret not in text for _, text in every_record), secret
        assert all(secret not in error for error in errors), secret
    ours = [text for name, text in every_record if name.startswith("edge_agent")]
    assert any("arg_keys=['text']" in text for text in ours)
    assert all(argument_secret not in text for text in ours)
