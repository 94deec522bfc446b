"""A stdio MCP server for the hub's integration tests, built with the official SDK (MCPServer).

Tools: add, echo, fail (returns isError), crash (exits the process), hang (sleeps forever),
whoami (returns the value of the environment variable named by ``WHOAMI_VAR``, default
``OUTPOST_TEST_IDENTITY``, to prove env-from-file reaches the child), pid (the process id),
structured (a structured result), picture (a 1x1 PNG) and report (a small PDF, embedded).

Run as ``python stdio_server.py``; it speaks MCP on stdin/stdout and logs nothing to stdout.
"""

from __future__ import annotations

import base64
import os

import anyio
import mcp_types
from mcp.server.mcpserver import Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

_PNG_1X1 = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)

# Not a valid document, but a PDF by media type: the conversion never parses it.
PDF_BYTES = b"%PDF-1.4\n%outpost test\n%%EOF\n"

server = MCPServer("outpost-test-stdio", log_level="WARNING")


@server.tool(description="Add two integers.")
def add(a: int, b: int) -> int:
    return a + b


@server.tool(description="Return the text unchanged.")
def echo(text: str) -> str:
    return text


@server.tool(description="Always fails (returns an isError result).")
def fail() -> str:
    raise ToolError("this tool always fails")


@server.tool(description="Exit the server process immediately.")
def crash() -> str:
    os._exit(3)


@server.tool(description="Sleep forever.")
async def hang() -> str:
    await anyio.sleep_forever()
    return "unreachable"


@server.tool(description="Return the identity the server was started with (from its environment).")
def whoami() -> str:
    return os.environ.get(os.environ.get("WHOAMI_VAR", "OUTPOST_TEST_IDENTITY"), "<unset>")


@server.tool(description="Return this server's process id.")
def pid() -> int:
    return os.getpid()


@server.tool(description="Return a structured result.")
def structured(name: str) -> dict[str, object]:
    return {"name": name, "length": len(name)}


@server.tool(description="Return a 1x1 PNG image.")
def picture() -> Image:
    return Image(data=_PNG_1X1, format="png")


@server.tool(description="Return a small PDF as an embedded resource.")
def report() -> mcp_types.EmbeddedResource:
    blob = base64.b64encode(PDF_BYTES).decode("ascii")
    contents = mcp_types.BlobResourceContents(
        uri="file:///report.pdf", mime_type="application/pdf", blob=blob
    )
    return mcp_types.EmbeddedResource(type="resource", resource=contents)


if __name__ == "__main__":
    server.run()
