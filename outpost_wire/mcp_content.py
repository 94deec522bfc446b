"""MCP tool-call results as tool-result content blocks: one converter for both daemons.

The control plane (its own MCP connections, :mod:`control_plane.mcp.client_session`) and the edge
(its private servers, :mod:`edge_agent.mcp._sdk`) both turn an MCP ``CallToolResult`` into the
content of a ``tool_result`` / ``agent.mcp_tool_result``; they do it here, so the model sees the
same blocks whichever side ran the call. The result is :mod:`outpost_wire.results` blocks (what
the tunnel carries); ``to_json()`` gives the Messages-API shape.

The Messages and Managed-Agents APIs accept ``text``, ``image`` (base64 png/jpeg/gif/webp) and
``document`` (base64 PDF) blocks in a tool result (shared/reference/managed-agents-api.md,
"Content blocks"); the anthropic SDK's own MCP helper (``anthropic/lib/tools/mcp.py``) maps
them the same way. Every MCP block kind, decided once:

==============================  ===================================================================
MCP block                       becomes
==============================  ===================================================================
``text``                        a text block; an empty or whitespace-only text is dropped (the API
                                rejects such text blocks, and they tell the model nothing)
``image``, supported type       an image block (png, jpeg, gif, webp)
``image``, other type           ``[image omitted: media type … is not supported]``
``audio``                       ``[audio omitted: <media type>]`` (there is no audio block)
``resource`` with text          ``[resource <uri>]`` and the text
``resource`` blob, image type   an image block
``resource`` blob, PDF          a ``document`` block (the control plane did this; the edge used to
                                drop PDFs as an omitted binary: the API takes PDFs, so both do now)
``resource`` blob, ``text/*``   ``[resource <uri>]`` and the text when the blob is UTF-8 (as the
or without a media type         anthropic SDK does), else as the next row
``resource`` blob, other        ``[binary resource <uri> omitted: <type>, <n> bytes]``
``resource_link``               ``[resource link <name> <uri>: <description>]`` (not fetched)
==============================  ===================================================================

Base64 data is decoded once, here, strictly (line breaks allowed): data that is not base64
becomes a ``… is not valid base64`` note instead of a model request the API would refuse. Media
types are compared without parameters and case (``Image/PNG; x=y`` is ``image/png``).
``structuredContent`` is added as one JSON text block only when no text block is left (servers
SHOULD mirror it as text; both sides did this already).

This module imports only ``mcp_types`` (the MCP SDK's pydantic types, which both daemons' MCP
seams already load); :mod:`outpost_wire`'s ``__init__`` does not import it, so the wire package
itself does not need the SDK.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Final

import mcp_types

from outpost_wire.results import ContentBlock, DocumentBlock, ImageBlock, TextBlock

__all__ = ["IMAGE_MEDIA_TYPES", "PDF_MEDIA_TYPE", "content_block", "tool_result_content"]

IMAGE_MEDIA_TYPES: Final = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
PDF_MEDIA_TYPE: Final = "application/pdf"


def tool_result_content(result: mcp_types.CallToolResult) -> tuple[ContentBlock, ...]:
    """The content of ``result`` as tool-result blocks (see the module docstring)."""
    blocks = [block for block in map(content_block, result.content) if block is not None]
    structured = result.structured_content
    if structured is not None and not any(isinstance(b, TextBlock) for b in blocks):
        blocks.append(TextBlock(json.dumps(structured, ensure_ascii=False)))
    return tuple(blocks)


def content_block(item: mcp_types.ContentBlock) -> ContentBlock | None:
    """One MCP content block as a tool-result block; ``None`` when there is nothing to show."""
    if isinstance(item, mcp_types.TextContent):
        return TextBlock(item.text) if item.text.strip() else None
    if isinstance(item, mcp_types.ImageContent):
        media_type = _media_type(item.mime_type)
        if media_type not in IMAGE_MEDIA_TYPES:
            return TextBlock(f"[image omitted: media type {item.mime_type} is not supported]")
        data = _decode(item.data)
        if data is None:
            return TextBlock(f"[image omitted: its {media_type} data is not valid base64]")
        return ImageBlock(media_type, data)
    if isinstance(item, mcp_types.AudioContent):
        return TextBlock(f"[audio omitted: {item.mime_type}]")
    if isinstance(item, mcp_types.EmbeddedResource):
        return _resource(item.resource)
    described = f": {item.description}" if item.description else ""
    return TextBlock(f"[resource link {item.name} <{item.uri}>{described}]")


def _resource(resource: mcp_types.TextResourceContents | mcp_types.BlobResourceContents) -> ContentBlock:
    if isinstance(resource, mcp_types.TextResourceContents):
        return TextBlock(f"[resource {resource.uri}]\n{resource.text}")
    media_type = _media_type(resource.mime_type) if resource.mime_type else None
    data = _decode(resource.blob)
    if data is None:
        return TextBlock(f"[binary resource {resource.uri} omitted: its data is not valid base64]")
    if media_type in IMAGE_MEDIA_TYPES:
        return ImageBlock(media_type, data)
    if media_type == PDF_MEDIA_TYPE:
        return DocumentBlock(media_type, data)
    if media_type is None or media_type.startswith("text/"):
        try:
            return TextBlock(f"[resource {resource.uri}]\n{data.decode('utf-8')}")
        except UnicodeDecodeError:
            pass
    return TextBlock(
        f"[binary resource {resource.uri} omitted: {resource.mime_type or 'unknown type'}, {len(data)} bytes]"
    )


def _media_type(value: str) -> str:
    return value.split(";", 1)[0].strip().lower()


def _decode(data: str) -> bytes | None:
    """Strict base64 (line breaks allowed), or ``None``."""
    try:
        return base64.b64decode("".join(data.split()), validate=True)
    except (binascii.Error, ValueError):
        return None
