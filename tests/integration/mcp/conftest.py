"""Fixtures for the MCP hub's integration tests: secret files (0600) and a real Streamable-HTTP
MCP server on 127.0.0.1 (port 0) that requires a bearer token. Helpers are in _mcp_support."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from _mcp_support import IDENTITY, TOKEN, write_secret

from tests.support.mcp_servers.http_server import HttpMcpServer


@pytest.fixture
def identity_file(tmp_path: Path) -> Path:
    return write_secret(tmp_path / "identity", IDENTITY)


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    return write_secret(tmp_path / "token", TOKEN)


@pytest.fixture
async def http_server() -> AsyncIterator[HttpMcpServer]:
    server = HttpMcpServer(TOKEN)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
