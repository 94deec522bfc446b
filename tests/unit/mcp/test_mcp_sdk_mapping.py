"""The SDK seam: failure descriptions, secret scrubbing (content: tests/unit/wire/test_mcp_content.py)."""

from __future__ import annotations

from typing import Any

import anyio
import httpx2
import mcp_types
import pytest
from mcp.shared.exceptions import MCPError

from edge_agent.errors import ConfigError
from edge_agent.mcp import McpServerConfig
from edge_agent.mcp._sdk import _EndWatchingStream, _HttpRefused, describe_failure, scrub

HTTP = McpServerConfig.model_validate({"name": "wiki", "http": {"url": "http://10.0.0.7:8080/mcp?k=v"}})
STDIO = McpServerConfig.model_validate({"name": "local", "stdio": {"command": "/opt/missing"}})


def test_refused_credentials_are_described_without_the_token() -> None:
    group = ExceptionGroup("tg", [ExceptionGroup("inner", [_HttpRefused(401, "Unauthorized", "u")])])
    message = describe_failure(group, HTTP)
    assert message == (
        "http://10.0.0.7:8080/mcp refused the credentials (HTTP 401 Unauthorized); "
        "check bearer_token / headers in mcp_servers[wiki].http"
    )
    assert "k=v" not in message  # the query string may carry a token
    assert "unavailable (HTTP 503" in describe_failure(_HttpRefused(503, "Service Unavailable", "u"), HTTP)
    assert "restart" in describe_failure(_HttpRefused(404, "Not Found", "u"), HTTP)


def test_the_most_telling_failure_wins() -> None:
    mixed = ExceptionGroup(
        "tg",
        [MCPError(mcp_types.CONNECTION_CLOSED, "Connection closed"), httpx2.ConnectError("refused")],
    )
    assert describe_failure(mixed, HTTP) == "cannot connect to http://10.0.0.7:8080/mcp: refused"
    assert describe_failure(FileNotFoundError(2, "No such file or directory"), STDIO) == (
        "cannot start '/opt/missing': No such file or directory"
    )
    assert "closed the connection" in describe_failure(MCPError(mcp_types.CONNECTION_CLOSED, "closed"), STDIO)
    assert describe_failure(MCPError(-32603, "boom"), STDIO) == "MCP error -32603: boom"
    assert describe_failure(ConfigError("mcp_servers[local].stdio.env.K: bad"), STDIO).endswith("K: bad")
    assert describe_failure(ValueError("odd")) == "ValueError: odd"


def test_scrub() -> None:
    assert scrub("token abcdef and Bearer abcdef", ("Bearer abcdef", "abcdef")) == "token *** and ***"
    assert scrub("a b c", ("a",)) == "a b c"  # too short to scrub safely


async def test_end_watching_stream_reports_the_end_once() -> None:
    send, receive = anyio.create_memory_object_stream[Any](1)
    ended: list[str] = []
    stream = _EndWatchingStream(receive, lambda: ended.append("end"))
    await send.send("item")
    await send.aclose()
    items: list[object] = [item async for item in stream]
    assert items == ["item"]
    with pytest.raises(anyio.EndOfStream):
        await stream.receive()
    assert ended == ["end"]
    assert stream.last_context is None
    await stream.aclose()
