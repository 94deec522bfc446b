"""The data the MCP router takes and gives: frozen dataclasses, no I/O."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final
from urllib.parse import unquote, urlsplit, urlunsplit

__all__ = [
    "EDGE_SCHEME",
    "Credentials",
    "McpOutcome",
    "McpServerRef",
    "McpToolInfo",
    "ServerTools",
    "TunnelRoute",
    "no_credentials",
    "safe_url",
]

EDGE_SCHEME: Final = "edge"

Credentials = Callable[[str, str], Awaitable[Mapping[str, str]]]
"""``credentials(session_id, url)``: the HTTP headers to send to the MCP server at ``url`` for the
session (``{}`` for none). Their values are secrets: never logged, never put in an error."""


async def no_credentials(session_id: str, url: str) -> Mapping[str, str]:
    """The default :data:`Credentials`: no headers."""
    return {}


@dataclass(frozen=True, slots=True)
class McpServerRef:
    """One entry of an agent's ``mcp_servers``: ``{type: "url", name, url}``."""

    name: str
    url: str

    @property
    def edge_server(self) -> str | None:
        """For ``edge://<server>``: the name of the server as the environment's edges front it."""
        scheme, _, rest = self.url.partition("://")
        if scheme.lower() != EDGE_SCHEME or not rest:
            return None
        name = unquote(rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0])
        return name or None


@dataclass(frozen=True, slots=True)
class TunnelRoute:
    """What the router needs to know of the MCP tunnel a server URL's host lies under.

    ``grants``: the sha256 (hex) of each connector token an edge may present for the tunnel, with
    when it was retired (``None``: the current token). An edge serves the tunnel if it presented
    a granted token and connected before that token was retired (rotation leaves established
    connections up). ``active_certificates``: the tunnel's CA certificates not archived; none,
    and the tunnel refuses MCP traffic."""

    tunnel_id: str
    domain: str
    archived: bool
    active_certificates: int
    grants: Mapping[str, datetime | None]


@dataclass(frozen=True, slots=True)
class McpToolInfo:
    """A tool as an MCP server lists it."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] = field(default_factory=lambda: {"type": "object"})


@dataclass(frozen=True, slots=True)
class ServerTools:
    """The tools of one server, or why they could not be listed (``error_type`` is one of the
    documented ``session.error`` types, ``message`` is safe to show)."""

    server: str
    tools: tuple[McpToolInfo, ...] = ()
    error_type: str | None = None
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.error_type is None


@dataclass(frozen=True, slots=True)
class McpOutcome:
    """What became of one MCP tool call.

    ``content``: tool-result content blocks (Anthropic shape). ``is_error``: the model sees an
    error result (the tool failed, or the call could not be made). ``error_type``: set when the
    call could not be made (``mcp_connection_failed_error`` / ``mcp_authentication_failed_error``).
    ``policy_denied``: the edge's policy refused the call (the text names the rule).
    """

    content: list[dict[str, Any]]
    is_error: bool
    latency_ms: float
    error_type: str | None = None
    policy_denied: bool = False

    @property
    def outcome(self) -> str:
        """``ok`` | ``tool_error`` | ``policy_denied`` | the ``error_type``."""
        if self.error_type is not None:
            return self.error_type
        if self.policy_denied:
            return "policy_denied"
        return "tool_error" if self.is_error else "ok"


def safe_url(url: str) -> str:
    """``url`` without user info, query or fragment (they may carry credentials), for messages."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        return "<invalid url>"
    if ":" in host:
        host = f"[{host}]"
    return urlunsplit((parts.scheme, host + port, parts.path, "", ""))
