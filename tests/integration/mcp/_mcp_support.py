"""Helpers for the MCP hub's integration tests: configs for the real stdio server script and the
in-process Streamable-HTTP server, secret files (0600), and waiting on a condition."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from edge_agent.mcp import McpPolicy, McpServerConfig

STDIO_SERVER = Path(__file__).resolve().parents[2] / "support" / "mcp_servers" / "stdio_server.py"
IDENTITY = "dummy-identity-4711"  # what the stdio server's whoami reads from its environment
TOKEN = "test-bearer-token-8d1f3a"  # the HTTP server's bearer token (a dummy)


def write_secret(path: Path, value: str, mode: int = 0o600) -> Path:
    path.write_text(value + "\n")
    path.chmod(mode)
    return path


def stdio_config(
    name: str, env: dict[str, Any] | None = None, command: str = sys.executable, **extra: Any
) -> McpServerConfig:
    return McpServerConfig.model_validate(
        {
            "name": name,
            "stdio": {"command": command, "args": [str(STDIO_SERVER)], "env": env or {}},
            "call_timeout_s": 10,
            "restart_backoff_initial_s": 0.05,
            "restart_backoff_max_s": 0.2,
            **extra,
        }
    )


def http_config(
    name: str, url: str, token_file: Path | None, http_extra: dict[str, Any] | None = None, **extra: Any
) -> McpServerConfig:
    http: dict[str, Any] = {"url": url, "timeout_s": 5, **(http_extra or {})}
    if token_file is not None:
        http["bearer_token"] = {"from_file": str(token_file)}
    return McpServerConfig.model_validate(
        {
            "name": name,
            "http": http,
            "call_timeout_s": 10,
            "restart_backoff_initial_s": 0.05,
            "restart_backoff_max_s": 0.2,
            **extra,
        }
    )


def allow(*names: str, **rules: Any) -> McpPolicy:
    return McpPolicy.model_validate({"servers": {**{name: {} for name in names}, **rules}})
