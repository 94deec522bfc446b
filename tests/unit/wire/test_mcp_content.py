"""outpost_wire.mcp_content: every MCP content block kind, as both daemons convert it."""

from __future__ import annotations

import base64
from typing import Any

import mcp_types
import pytest

from outpost_wire.mcp_content import content_block, tool_result_content
from outpost_wire.results import ContentBlock, DocumentBlock, ImageBlock, TextBlock

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
PDF = b"%PDF-1.4\n%outpost test\n%%EOF\n"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _blob(uri: str, data: bytes, mime_type: str | None) -> mcp_types.EmbeddedResource:
    contents = mcp_types.BlobResourceContents(uri=uri, blob=_b64(data), mime_type=mime_type)
    return mcp_types.EmbeddedResource(type="resource", resource=contents)


def _result(content: list[Any], structured: Any = None) -> mcp_types.CallToolResult:
    return mcp_types.CallToolResult(content=content, structured_content=structured)


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        (mcp_types.TextContent(text="hello"), TextBlock("hello")),
        (mcp_types.TextContent(text=" keep  spacing \n"), TextBlock(" keep  spacing \n")),
        (mcp_types.TextContent(text=""), None),
        (mcp_types.TextContent(text=" \n\t"), None),
        (mcp_types.ImageContent(data=_b64(PNG), mime_type="image/png"), ImageBlock("image/png", PNG)),
        (mcp_types.ImageContent(data=_b64(PNG), mime_type="Image/PNG; q=1"), ImageBlock("image/png", PNG)),
        (mcp_types.ImageContent(data=_b64(b"gif"), mime_type="image/gif"), ImageBlock("image/gif", b"gif")),
        (
            mcp_types.ImageContent(data=_b64(b"tiff"), mime_type="image/tiff"),
            TextBlock("[image omitted: media type image/tiff is not supported]"),
        ),
        (
            mcp_types.ImageContent(data="not base64!", mime_type="image/png"),
            TextBlock("[image omitted: its image/png data is not valid base64]"),
        ),
        (
            mcp_types.AudioContent(data=_b64(b"RIFF"), mime_type="audio/wav"),
            TextBlock("[audio omitted: audio/wav]"),
        ),
        (
            mcp_types.EmbeddedResource(
                type="resource",
                resource=mcp_types.TextResourceContents(uri="file:///a.txt", text="contents"),
            ),
            TextBlock("[resource file:///a.txt]\ncontents"),
        ),
        (_blob("file:///a.png", PNG, "image/png"), ImageBlock("image/png", PNG)),
        (_blob("file:///a.pdf", PDF, "application/pdf"), DocumentBlock("application/pdf", PDF)),
        (_blob("file:///a.pdf", PDF, "APPLICATION/PDF"), DocumentBlock("application/pdf", PDF)),
        (_blob("file:///a.md", "# é".encode(), "text/markdown"), TextBlock("[resource file:///a.md]\n# é")),
        (_blob("file:///a", b"plain", None), TextBlock("[resource file:///a]\nplain")),
        (
            _blob("file:///a.txt", b"\xff\xfe", "text/plain"),
            TextBlock("[binary resource file:///a.txt omitted: text/plain, 2 bytes]"),
        ),
        (
            _blob("file:///a.bin", b"\x00" * 6, "application/zip"),
            TextBlock("[binary resource file:///a.bin omitted: application/zip, 6 bytes]"),
        ),
        (
            _blob("file:///a.bin", b"\x80\x81", None),
            TextBlock("[binary resource file:///a.bin omitted: unknown type, 2 bytes]"),
        ),
        (
            mcp_types.EmbeddedResource(
                type="resource",
                resource=mcp_types.BlobResourceContents(
                    uri="file:///x.pdf", blob="%%%", mime_type="application/pdf"
                ),
            ),
            TextBlock("[binary resource file:///x.pdf omitted: its data is not valid base64]"),
        ),
        (
            mcp_types.ResourceLink(name="doc", uri="https://x/doc", description="the doc"),
            TextBlock("[resource link doc <https://x/doc>: the doc]"),
        ),
        (
            mcp_types.ResourceLink(name="doc", uri="https://x/doc"),
            TextBlock("[resource link doc <https://x/doc>]"),
        ),
    ],
)
def test_each_block_kind(item: mcp_types.ContentBlock, expected: ContentBlock | None) -> None:
    assert content_block(item) == expected


def test_base64_with_line_breaks_is_accepted() -> None:
    wrapped = "\n".join(_b64(PNG)[i : i + 16] for i in range(0, len(_b64(PNG)), 16))
    assert content_block(mcp_types.ImageContent(data=wrapped, mime_type="image/png")) == ImageBlock(
        "image/png", PNG
    )


def test_pdf_crosses_as_a_document_block_in_the_messages_api_shape() -> None:
    (block,) = tool_result_content(_result([_blob("file:///report.pdf", PDF, "application/pdf")]))
    assert block.to_json() == {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": _b64(PDF)},
    }


def test_blocks_keep_their_order_and_empty_texts_are_dropped() -> None:
    content = tool_result_content(
        _result(
            [
                mcp_types.TextContent(text="a"),
                mcp_types.TextContent(text=""),
                _blob("file:///r.pdf", PDF, "application/pdf"),
                mcp_types.ImageContent(data=_b64(PNG), mime_type="image/webp"),
            ]
        )
    )
    assert content == (TextBlock("a"), DocumentBlock("application/pdf", PDF), ImageBlock("image/webp", PNG))


def test_structured_content_becomes_json_text_only_when_no_text_mirrors_it() -> None:
    assert tool_result_content(_result([], structured={"n": 1, "name": "é"})) == (
        TextBlock('{"n": 1, "name": "é"}'),
    )
    assert tool_result_content(_result([mcp_types.TextContent(text="1")], structured={"result": 1})) == (
        TextBlock("1"),
    )
    image = mcp_types.ImageContent(data=_b64(PNG), mime_type="image/png")
    assert tool_result_content(_result([image], structured=[1])) == (
        ImageBlock("image/png", PNG),
        TextBlock("[1]"),
    )
    # An empty text does not count as a mirror: it was dropped.
    assert tool_result_content(_result([mcp_types.TextContent(text="")], structured=0)) == (TextBlock("0"),)
    assert tool_result_content(_result([])) == ()
