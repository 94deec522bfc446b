"""The SDK seam: MCP content -> Anthropic-style blocks, failure descriptions, secret scrubbing."""

from __future__ import annotations

from typing import Any

import anyio
import httpx2
import mcp_types
import pytest
from mcp.shared.exceptions import MCPError

from edge_agent.errors import ConfigError
from edge_agent.mcp import ImageBlock, McpServerConfig, TextBlock
from edge_agent.mcp._sdk import _content, _EndWatchingStream, _HttpRefused, describe_failure, scrub

HTTP = McpServerConfig.model_validate({"name": "wiki", "http": {"url": "http://10.0.0.7:8080/mcp?k=v"}})
STDIO = McpServerConfig.model_validate({"name": "local", "stdio": {"command": "/opt/missing"}})


def _result(content: list[Any], structured: Any = None, is_error: bool = False) -> mcp_types.CallToolResult:
    return mcp_types.CallToolResult(content=content, structured_content=structured, is_error=is_error)


def test_text_and_supported_images_map_directly() -> None:
    blocks = _content(
        _result(
            [
                mcp_types.TextContent(text="hello"),
                mcp_types.ImageContent(data="iVBORw0", mime_type="image/png"),
                mcp_types.ImageContent(data="AAAA", mime_type="image/tiff"),
                mcp_types.AudioContent(data="AAAA", mime_type="audio/wav"),
            ]
        )
    )
    assert blocks == (
        TextBlock("hello"),
        ImageBlock("image/png", "iVBORw0"),
        TextBlock("[image omitted: media type image/tiff is not supported]"),
        TextBlock("[audio omitted: audio/wav]"),
    )


def test_resources() -> None:
    blocks = _content(
        _result(
            [
                mcp_types.EmbeddedResource(
                    resource=mcp_types.TextResourceContents(uri="file:///a.txt", text="contents")
                ),
                mcp_types.EmbeddedResource(
                    resource=mcp_types.BlobResourceContents(
                        uri="file:///a.png", blob="iVBO", mime_type="image/png"
                    )
                ),
                mcp_types.EmbeddedResource(
                    resource=mcp_types.BlobResourceContents(
                        uri="file:///a.bin", blob="AAAAAAAA", mime_type="application/zip"
                    )
                ),
                mcp_types.ResourceLink(name="doc", uri="https://x/doc", description="the doc"),
            ]
        )
    )
    assert blocks == (
        TextBlock("[resource file:///a.txt]\ncontents"),
        ImageBlock("image/png", "iVBO"),
        TextBlock("[binary resource file:///a.bin omitted: application/zip, ~6 bytes]"),
        TextBlock("[resource link doc <https://x/doc>: the doc]"),
    )


def test_structured_content_becomes_json_text_only_when_no_text_mirrors_it() -> None:
    assert _content(_result([], structured={"n": 1, "name": "é"})) == (TextBlock('{"n": 1, "name": "é"}'),)
    assert _content(_result([mcp_types.TextContent(text="1")], structured={"result": 1})) == (TextBlock("1"),)
    assert _content(_result([])) == ()


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
