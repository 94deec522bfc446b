"""Configuration of the edge's private MCP servers, and the customer's policy over them.

Both are read from the edge's own files, never from the control plane. The edge config embeds
``mcp_servers:`` (a list of :class:`McpServerConfig`, typed :data:`McpServers`) and the policy
embeds ``mcp:`` (:class:`McpPolicy`); ``tests/unit/mcp/test_mcp_config.py`` checks this example::

    mcp_servers:
      - name: tickets
        stdio:
          command: /opt/tickets-mcp/bin/server
          args: [--read-only]
          env:
            TICKETS_API_KEY: {from_file: /etc/outpost-edge/secrets/tickets.key}   # mode 0600
            TICKETS_REGION: {value: eu-west-1}
        call_timeout_s: 30
      - name: wiki
        http:
          url: http://10.0.4.12:8080/mcp
          bearer_token: {from_file: /etc/outpost-edge/secrets/wiki.token}     # mode 0600
          headers:
            X-Tenant: {value: acme}
          timeout_s: 10

    # policy
    mcp:
      servers:
        tickets: {tools: [search_tickets, get_ticket]}
        wiki: {}                                # every tool ("*")

A secret is exactly one of ``value`` (inline; for values that are not secret), ``from_env`` (an
environment variable of the edge process) or ``from_file`` (a file that must not be readable by
group or others). Secrets are resolved at each (re)connect (:mod:`edge_agent.mcp.secrets`), so a
rotated file is picked up by the next restart of the server.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from edge_agent.mcp.errors import McpServerNotAllowed, McpToolNotAllowed

__all__ = [
    "HttpTransportConfig",
    "McpPolicy",
    "McpServerConfig",
    "McpServerPolicy",
    "McpServers",
    "SecretSource",
    "StdioTransportConfig",
    "is_private_address",
]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # RFC 9110 token
_SERVER_NAME = r"^[a-z0-9][a-z0-9_-]{0,47}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SecretSource(_Strict):
    """Where one header or environment value comes from: exactly one of the three keys."""

    value: SecretStr | None = Field(
        None,
        description="The value itself, inline (for values that are not secret); masked in logs.",
    )
    from_env: str | None = Field(
        None,
        pattern=_ENV_NAME.pattern,
        description="The name of an environment variable of the edge process.",
    )
    from_file: Path | None = Field(
        None,
        description="A file of the edge's, readable by its owner only (refused otherwise).",
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> SecretSource:
        given = [k for k in ("value", "from_env", "from_file") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of value, from_env, from_file (got {given or 'none'})")
        return self


class StdioTransportConfig(_Strict):
    """A server the edge starts as a child process and talks to over stdin/stdout.

    The child gets a minimal environment (HOME, LOGNAME, PATH, SHELL, TERM, USER) plus ``env``;
    nothing else of the edge's environment leaks into it. Its stderr is the edge's stderr. Put
    secrets in ``env``, never in ``args`` (a command line is visible to every local user).
    """

    command: str = Field(min_length=1, description="The program to start.")
    args: tuple[str, ...] = Field(
        (),
        description="Its arguments (no secrets: a command line is visible to every local user).",
    )
    env: dict[str, SecretSource] = Field(
        default_factory=dict,
        description="Its environment, besides HOME, LOGNAME, PATH, SHELL, TERM and USER (nothing else of the "
        "edge's).",
    )
    cwd: Path | None = Field(None, description="Its working directory; `null`: the edge's.")

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, SecretSource]) -> dict[str, SecretSource]:
        for name in env:
            if not _ENV_NAME.match(name):
                raise ValueError(f"invalid environment variable name {name!r}")
        return env


class HttpTransportConfig(_Strict):
    """A server reached over Streamable HTTP on the customer's private network.

    ``bearer_token`` is a shorthand for an ``Authorization: Bearer <token>`` header whose token
    (not the whole header value) is in a file or variable. ``timeout_s`` bounds connecting and
    sending one HTTP request; how long a tool may run is
    :attr:`McpServerConfig.call_timeout_s`. A literal IP in ``url`` must be private (loopback,
    RFC 1918, link-local, ULA); a host name is resolved at each connect and every address it
    resolves to must be private, unless ``allow_public_address`` is set. (The check resolves the
    name itself, just before connecting; it does not pin the address the HTTP client then uses.)
    Proxy environment variables of the edge are ignored for these connections.
    """

    url: str = Field(
        description="`http://` or `https://` URL of the server; its address must be private unless "
        "`allow_public_address`.",
    )
    headers: dict[str, SecretSource] = Field(
        default_factory=dict,
        description="Headers sent with every request.",
    )
    bearer_token: SecretSource | None = Field(
        None,
        description="Sent as `Authorization: Bearer <token>` (not with an `Authorization` header).",
    )
    ca_file: Path | None = Field(None, description="A PEM bundle for an `https` server with a private CA.")
    timeout_s: float = Field(
        30.0,
        gt=0,
        description="Connecting and sending one HTTP request (how long a tool may run is `call_timeout_s`).",
    )
    allow_public_address: bool = Field(
        False,
        description="Allow an address that is not private (loopback, RFC 1918, link-local, ULA).",
    )

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("url must be an http:// or https:// URL with a host")
        if parts.username is not None or parts.password is not None:
            raise ValueError("url must not carry credentials; put them in headers (from_file / from_env)")
        return url

    @field_validator("headers")
    @classmethod
    def _header_names(cls, headers: dict[str, SecretSource]) -> dict[str, SecretSource]:
        for name in headers:
            if not _HEADER_NAME.match(name):
                raise ValueError(f"invalid header name {name!r}")
        return headers

    @model_validator(mode="after")
    def _one_authorization(self) -> HttpTransportConfig:
        if self.bearer_token is not None and any(k.lower() == "authorization" for k in self.headers):
            raise ValueError("give either bearer_token or an Authorization header, not both")
        return self

    @model_validator(mode="after")
    def _private_literal(self) -> HttpTransportConfig:
        host = urlsplit(self.url).hostname or ""
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return self  # a host name: checked when it is resolved, at connect
        if not self.allow_public_address and not is_private_address(address):
            raise ValueError(
                f"url host {host} is not a private-network address (set allow_public_address to override)"
            )
        return self


class McpServerConfig(_Strict):
    """One private MCP server: a name, exactly one transport, and its timeouts.

    While the server is up its tool list is re-read every ``refresh_interval_s`` (a changed list
    changes the catalog; a failure restarts the connection). After a failure the server is
    reconnected after a full-jitter backoff between ``restart_backoff_initial_s`` and
    ``restart_backoff_max_s``.
    """

    name: str = Field(
        pattern=_SERVER_NAME,
        description="The agent names the server `edge://<name>` (lower-case letters, digits, `_`, `-`).",
    )
    stdio: StdioTransportConfig | None = Field(
        None,
        description="A server the edge starts as a child process and talks to over stdin/stdout; or `http`.",
    )
    http: HttpTransportConfig | None = Field(
        None,
        description="A server reached over Streamable HTTP on the private network; or `stdio`.",
    )
    call_timeout_s: float = Field(60.0, gt=0, description="How long one tool call may run.")
    startup_timeout_s: float = Field(
        20.0,
        gt=0,
        description="How long the server may take to start and list its tools.",
    )
    refresh_interval_s: float = Field(
        60.0,
        gt=0,
        description="Re-list the tools this often while up (a changed list changes the catalog; a failure "
        "restarts the connection).",
    )
    restart_backoff_initial_s: float = Field(
        0.5,
        gt=0,
        description="After a failure, reconnect after a full-jitter backoff that starts here...",
    )
    restart_backoff_max_s: float = Field(30.0, gt=0, description="...and is capped here.")

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.stdio is None) == (self.http is None):
            raise ValueError("give exactly one of `stdio` or `http`")
        if self.restart_backoff_max_s < self.restart_backoff_initial_s:
            raise ValueError("restart_backoff_max_s must be at least restart_backoff_initial_s")
        return self

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.stdio is not None else "http"


def _unique_names(servers: tuple[McpServerConfig, ...]) -> tuple[McpServerConfig, ...]:
    seen: set[str] = set()
    for server in servers:
        if server.name in seen:
            raise ValueError(f"MCP server name {server.name!r} is used more than once")
        seen.add(server.name)
    return servers


McpServers = Annotated[tuple[McpServerConfig, ...], AfterValidator(_unique_names)]
"""The type of the edge config's ``mcp_servers:`` list: names must be unique."""


class McpServerPolicy(_Strict):
    """What the agent may use on one server: ``tools`` is a list of tool names, or ``"*"``."""

    tools: tuple[str, ...] | Literal["*"] = Field(
        "*",
        description='The tools sessions may call: a list of names, or `"*"` for all of them.',
    )

    def allows(self, tool: str) -> bool:
        return self.tools == "*" or tool in self.tools


class McpPolicy(_Strict):
    """The customer's policy over MCP servers. Default: no server is allowed."""

    servers: dict[str, McpServerPolicy] = Field(
        default_factory=dict,
        description="The MCP servers sessions may use, by name (none by default), and their tools.",
    )

    def check_server(self, server: str) -> McpServerPolicy:
        """The server's rule, or :class:`McpServerNotAllowed` naming ``mcp.servers``."""
        rule = self.servers.get(server)
        if rule is None:
            raise McpServerNotAllowed(
                "mcp.servers", f"MCP server {server!r} is not allowed by this edge's policy"
            )
        return rule

    def check_tool(self, server: str, tool: str) -> None:
        """Refuse a tool the policy does not allow, naming ``mcp.servers.<server>.tools``."""
        if not self.check_server(server).allows(tool):
            raise McpToolNotAllowed(
                f"mcp.servers.{server}.tools",
                f"tool {tool!r} of MCP server {server!r} is not allowed by this edge's policy",
            )


def is_private_address(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Loopback, RFC 1918 / ULA private, or link-local (an IPv4-mapped IPv6 address is unwrapped)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_private or address.is_loopback or address.is_link_local
