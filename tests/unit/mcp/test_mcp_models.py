"""Catalog digest: canonical, order-independent, blind to last_error; content block shapes."""

from __future__ import annotations

from edge_agent.mcp import (
    ImageBlock,
    McpCallResult,
    McpCatalog,
    McpServerEntry,
    McpTool,
    ServerStatus,
    TextBlock,
)

ADD = McpTool("add", "Add two integers.", {"type": "object", "properties": {"a": {"type": "integer"}}})
ECHO = McpTool("echo", "Echo.", {"type": "object"})


def _entry(name: str, tools: tuple[McpTool, ...], status: ServerStatus = ServerStatus.UP) -> McpServerEntry:
    return McpServerEntry(name=name, status=status, tools=tools)


def test_digest_is_order_independent_and_sorted() -> None:
    one = McpCatalog.build([_entry("b", (ECHO, ADD)), _entry("a", (ADD,))])
    two = McpCatalog.build([_entry("a", (ADD,)), _entry("b", (ADD, ECHO))])
    assert one.digest == two.digest
    assert one.digest.startswith("sha256:")
    assert [s.name for s in one.servers] == ["a", "b"]
    assert [t.name for t in one.servers[1].tools] == ["add", "echo"]


def test_digest_ignores_last_error_but_not_status_or_tools() -> None:
    base = McpCatalog.build([_entry("a", (ADD,), ServerStatus.DOWN)])
    other_error = McpCatalog.build(
        [McpServerEntry("a", ServerStatus.DOWN, (ADD,), last_error="connection refused (attempt 7)")]
    )
    assert base.digest == other_error.digest
    assert McpCatalog.build([_entry("a", (ADD,))]).digest != base.digest
    assert McpCatalog.build([_entry("a", (ADD, ECHO), ServerStatus.DOWN)]).digest != base.digest
    changed_schema = McpTool("add", "Add two integers.", {"type": "object"})
    assert McpCatalog.build([_entry("a", (changed_schema,), ServerStatus.DOWN)]).digest != base.digest


def test_to_dict_shapes() -> None:
    catalog = McpCatalog.build([McpServerEntry("a", ServerStatus.DOWN, (ECHO,), last_error="boom")])
    assert catalog.to_dict() == {
        "digest": catalog.digest,
        "servers": [
            {
                "name": "a",
                "status": "down",
                "last_error": "boom",
                "tools": [{"name": "echo", "description": "Echo.", "input_schema": {"type": "object"}}],
            }
        ],
    }
    assert catalog.server("a") is catalog.servers[0]
    assert catalog.server("zzz") is None
    result = McpCallResult(
        content=(TextBlock("hi"), ImageBlock("image/png", b"\0\0\0")), is_error=False, latency_ms=1
    )
    assert result.content_dicts() == [
        {"type": "text", "text": "hi"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
    ]
