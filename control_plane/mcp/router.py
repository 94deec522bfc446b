"""``McpRouter``: where an agent's MCP server is reached, and what became of each call.

The URL of an agent's ``mcp_servers`` entry decides the route:

* ``edge://<server>`` — a private server fronted by an edge of the session's environment:
  tools come from :meth:`EdgeGateway.mcp_catalog`, calls go through :meth:`EdgeGateway.mcp_call`
  (the edge journals them by idempotency key, so a repeated key runs once);
* ``https://<server>.<tunnel domain>/...`` — a private server fronted by an edge serving the MCP
  tunnel whose ``domain`` that is (:class:`TunnelDirectory`; docs/mcp-tunnels.md): the first label
  names the server as the edge fronts it, the rest of the URL is not used. The tunnel must exist,
  not be archived and have at least one active CA certificate, else the server is refused as
  ``mcp_connection_failed_error`` naming the reason; calls go through
  :meth:`EdgeGateway.mcp_call` with the tunnel's token grants, to any edge serving it;
* ``http://`` / ``https://`` — the control plane calls the server itself
  (:class:`~control_plane.mcp.direct.DirectMcpClient`, with headers from ``credentials``);
* anything else is refused as ``mcp_connection_failed_error``.

Nothing here raises for a server that is down, refuses or misbehaves: :meth:`McpRouter.list_tools`
returns a :class:`ServerTools` with ``error_type``, :meth:`McpRouter.call` an :class:`McpOutcome`
(an error result for the model, typed with ``error_type`` when the call could not be made, or
``policy_denied`` when the edge's rule refused it, the text naming the rule). Every call is logged
with server, tool, route, outcome and latency, never with arguments or headers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Protocol
from urllib.parse import urlsplit

from control_plane.errors import EdgeUnavailable, GatewayDraining, InvalidRequest
from control_plane.mcp.config import McpConfig
from control_plane.mcp.direct import DirectMcpClient
from control_plane.mcp.errors import McpAuthenticationFailed, McpConnectionFailed, McpError
from control_plane.mcp.models import (
    Credentials,
    McpOutcome,
    McpServerRef,
    McpToolInfo,
    ServerTools,
    TunnelRoute,
    no_credentials,
    safe_url,
)
from control_plane.outbound import OutboundGuard
from outpost_wire.errors import ErrorCode, RemoteError
from outpost_wire.results import ToolResult

__all__ = ["McpGateway", "McpRouter", "TunnelDirectory"]

log = logging.getLogger(__name__)

_DIRECT_SCHEMES = frozenset({"http", "https"})
_CONNECTION_CODES = frozenset(
    {
        ErrorCode.MCP_CONNECTION_FAILED,
        ErrorCode.DEADLINE_EXCEEDED,
        ErrorCode.UNAVAILABLE,
        ErrorCode.DRAINING,
        ErrorCode.CANCELLED,
    }
)


class McpGateway(Protocol):
    """What the router needs of the hands (``control_plane.tunnel.EdgeGateway`` fits). ``tunnel``:
    the edges serving that MCP tunnel (its token grants) instead of the environment's."""

    def mcp_catalog(
        self, environment_id: str, *, tunnel: Mapping[str, Any] | None = None
    ) -> dict[str, dict[str, Any]]: ...

    async def mcp_call(
        self,
        session_id: str,
        environment_id: str,
        server: str,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        idempotency_key: str,
        timeout_s: float | None = None,
        tunnel: Mapping[str, Any] | None = None,
    ) -> ToolResult: ...


class TunnelDirectory(Protocol):
    """Where MCP tunnels are looked up (``control_plane.mcp_tunnels.TunnelService`` fits)."""

    def tunnel_domain(self, host: str) -> str | None:
        """The tunnel domain ``host`` lies under (``None``: not a tunnel host)."""
        ...

    async def route_for_domain(self, domain: str) -> TunnelRoute | None: ...


class McpRouter:
    """Lists and calls the tools of an agent's MCP servers, by route. ``async with`` closes the
    pooled direct sessions (or call :meth:`close`)."""

    def __init__(
        self,
        gateway: McpGateway | None,
        *,
        credentials: Credentials = no_credentials,
        config: McpConfig | None = None,
        direct: DirectMcpClient | None = None,
        outbound: OutboundGuard | None = None,
        clock: Callable[[], float] = time.monotonic,
        tunnels: TunnelDirectory | None = None,
    ) -> None:
        """``credentials(session_id, url)``: the headers for a direct server (the vault broker
        plugs in here). ``direct``: a ready client (tests); by default one is made from
        ``credentials``, ``config`` and ``outbound`` (the check of direct servers' addresses;
        default: no private networks). ``tunnels``: the MCP tunnels (``None``: URLs are never
        routed through one)."""
        self.config = config or McpConfig()
        self._tunnels = tunnels
        self._gateway = gateway
        self._direct = direct or DirectMcpClient(credentials, self.config, outbound=outbound, clock=clock)
        self._clock = clock

    async def __aenter__(self) -> McpRouter:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the pooled direct sessions. Idempotent."""
        await self._direct.close()

    # -- listing ----------------------------------------------------------------------------------
    async def list_tools(
        self, session_id: str, environment_id: str | None, server: McpServerRef
    ) -> ServerTools:
        """The tools ``server`` offers the session now, or why there are none."""
        try:
            edge_server = server.edge_server
            tunneled = await self._tunnel(server) if edge_server is None else None
            if edge_server is not None:
                tools = self._edge_tools(environment_id, edge_server)
            elif tunneled is not None:
                tools = self._tunnel_tools(environment_id, *tunneled)
            elif _scheme(server.url) in _DIRECT_SCHEMES:
                tools = await self._direct.list_tools(
                    session_id, server.url, timeout_s=self.config.list_timeout_s
                )
            else:
                raise _unsupported(server)
        except McpError as exc:
            log.warning(
                "session %s: MCP server %s: cannot list tools (%s): %s",
                session_id,
                server.name,
                exc.error_type,
                exc.message,
            )
            return ServerTools(server.name, error_type=exc.error_type, message=exc.message)
        return ServerTools(server.name, tools=tools)

    def _edge_tools(self, environment_id: str | None, name: str) -> tuple[McpToolInfo, ...]:
        if self._gateway is None or environment_id is None:
            raise McpConnectionFailed(
                f"MCP server {name!r} is edge-fronted, but the session has no environment"
            )
        entry = self._gateway.mcp_catalog(environment_id).get(name)
        if entry is None:
            raise McpConnectionFailed(f"no connected edge of the environment fronts MCP server {name!r}")
        if entry.get("status") != "up":
            raise McpConnectionFailed(f"MCP server {name!r} is down on every edge that fronts it")
        return tuple(_tool_info(t) for t in entry.get("tools") or () if _is_tool(t))

    def _tunnel_tools(
        self, environment_id: str | None, name: str, tunnel: TunnelRoute
    ) -> tuple[McpToolInfo, ...]:
        if self._gateway is None:
            raise McpConnectionFailed(
                f"MCP server {name!r} is behind an MCP tunnel, but no edge is reachable"
            )
        entry = self._gateway.mcp_catalog(environment_id or "", tunnel=tunnel.grants).get(name)
        if entry is None:
            raise McpConnectionFailed(
                f"no connected edge serving MCP tunnel {tunnel.tunnel_id} fronts MCP server {name!r}"
            )
        if entry.get("status") != "up":
            raise McpConnectionFailed(f"MCP server {name!r} is down on every edge serving the tunnel")
        return tuple(_tool_info(t) for t in entry.get("tools") or () if _is_tool(t))

    async def _tunnel(self, server: McpServerRef) -> tuple[str, TunnelRoute] | None:
        """``(server name at the edge, tunnel)`` when ``server.url``'s host lies under the MCP
        tunnels' base domain (``None``: it does not); raises :class:`McpConnectionFailed` when
        that tunnel cannot carry MCP traffic, saying why."""
        if self._tunnels is None or _scheme(server.url) not in _DIRECT_SCHEMES:
            return None
        try:
            host = (urlsplit(server.url).hostname or "").rstrip(".")
        except ValueError:
            return None
        domain = self._tunnels.tunnel_domain(host)
        if domain is None:
            return None
        label = host[: -len(domain) - 1] if len(host) > len(domain) else ""
        if not label or "." in label:
            raise McpConnectionFailed(
                f"MCP server {server.name!r}: {safe_url(server.url)} must name one server under "
                f"the MCP tunnel's domain (https://<server>.{domain}/)"
            )
        try:
            tunnel = await self._tunnels.route_for_domain(domain)
        except Exception as exc:  # the store: the call fails, the session goes on
            log.warning("MCP tunnel %s could not be read: %s", domain, exc)
            raise McpConnectionFailed(f"the MCP tunnel {domain} could not be read; retry later") from None
        if tunnel is None:
            raise McpConnectionFailed(f"no MCP tunnel has the domain {domain}")
        if tunnel.archived:
            raise McpConnectionFailed(f"MCP tunnel {tunnel.tunnel_id} is archived: it carries no MCP traffic")
        if tunnel.active_certificates == 0:
            raise McpConnectionFailed(
                f"MCP tunnel {tunnel.tunnel_id} has no active CA certificate: it refuses MCP traffic "
                f"until one is added (POST /v1/tunnels/{tunnel.tunnel_id}/certificates)"
            )
        return label, tunnel

    # -- calling ----------------------------------------------------------------------------------
    async def call(
        self,
        session_id: str,
        environment_id: str | None,
        server: McpServerRef,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        idempotency_key: str,
        timeout_s: float | None = None,
    ) -> McpOutcome:
        """Call ``tool`` of ``server``. ``idempotency_key``: the ``agent.mcp_tool_use`` event id
        (a repeat of the key does not run the tool again where the route can tell)."""
        timeout = timeout_s or self.config.default_call_timeout_s
        started = self._clock()
        edge_server = server.edge_server
        route = "edge" if edge_server is not None else "direct"
        try:
            tunneled = await self._tunnel(server) if edge_server is None else None
            if edge_server is not None:
                content, is_error, denied = await self._edge_call(
                    session_id, environment_id, edge_server, tool, arguments, idempotency_key, timeout
                )
            elif tunneled is not None:
                route = "tunnel"
                name, tunnel = tunneled
                content, is_error, denied = await self._edge_call(
                    session_id, environment_id, name, tool, arguments, idempotency_key, timeout, tunnel
                )
            elif _scheme(server.url) in _DIRECT_SCHEMES:
                result = await self._direct.call_tool(
                    session_id,
                    server.url,
                    tool,
                    arguments,
                    idempotency_key=idempotency_key,
                    timeout_s=timeout,
                )
                content, is_error, denied = result.content, result.is_error, False
            else:
                raise _unsupported(server)
        except McpError as exc:
            text = f"MCP server {server.name!r} could not be used: {exc.message}"
            outcome = McpOutcome(
                [{"type": "text", "text": text}], True, self._elapsed_ms(started), error_type=exc.error_type
            )
        else:
            outcome = McpOutcome(content, is_error, self._elapsed_ms(started), policy_denied=denied)
        log.info(
            "session %s: MCP call server=%s tool=%s route=%s outcome=%s latency_ms=%.1f",
            session_id,
            server.name,
            tool,
            route,
            outcome.outcome,
            outcome.latency_ms,
        )
        return outcome

    async def _edge_call(
        self,
        session_id: str,
        environment_id: str | None,
        name: str,
        tool: str,
        arguments: Mapping[str, Any],
        key: str,
        timeout_s: float,
        tunnel: TunnelRoute | None = None,
    ) -> tuple[list[dict[str, Any]], bool, bool]:
        """``(content, is_error, policy_denied)``; raises :class:`McpError`. ``tunnel``: through
        an edge serving it (the session's environment does not matter then)."""
        if self._gateway is None or (environment_id is None and tunnel is None):
            raise McpConnectionFailed(
                f"MCP server {name!r} is edge-fronted, but the session has no environment"
            )
        try:
            if tunnel is None:
                assert environment_id is not None
                result = await self._gateway.mcp_call(
                    session_id,
                    environment_id,
                    name,
                    tool,
                    arguments,
                    idempotency_key=key,
                    timeout_s=timeout_s,
                )
            else:
                result = await self._gateway.mcp_call(
                    session_id,
                    environment_id or "",
                    name,
                    tool,
                    arguments,
                    idempotency_key=key,
                    timeout_s=timeout_s,
                    tunnel=tunnel.grants,
                )
        except GatewayDraining:
            raise  # this process is shutting down: the harness stops; the next one calls again
        except EdgeUnavailable as exc:
            raise McpConnectionFailed(str(exc)) from None
        except InvalidRequest as exc:
            return _text(f"The call could not be sent: {exc}"), True, False
        except RemoteError as exc:
            if exc.code is ErrorCode.POLICY_DENIED:
                return _text(f"The edge's policy refused this call: {exc.message}"), True, True
            if exc.code in _CONNECTION_CODES:
                raise McpConnectionFailed(exc.message) from None
            if exc.code is ErrorCode.UNAUTHENTICATED:
                raise McpAuthenticationFailed(exc.message) from None
            return _text(f"The MCP call failed ({exc.code.value}): {exc.message}"), True, False
        return result.to_json(), result.is_error, False

    def _elapsed_ms(self, started: float) -> float:
        return round((self._clock() - started) * 1000.0, 3)


def _scheme(url: str) -> str:
    return url.partition("://")[0].lower() if "://" in url else ""


def _unsupported(server: McpServerRef) -> McpConnectionFailed:
    scheme = _scheme(server.url) or "(none)"
    return McpConnectionFailed(f"MCP server {server.name!r}: URL scheme {scheme!r} is not supported")


def _text(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


def _is_tool(tool: Any) -> bool:
    return isinstance(tool, Mapping) and isinstance(tool.get("name"), str) and bool(tool["name"])


def _tool_info(tool: Mapping[str, Any]) -> McpToolInfo:
    schema = tool.get("input_schema")
    return McpToolInfo(
        name=str(tool["name"]),
        description=str(tool.get("description") or ""),
        input_schema=dict(schema) if isinstance(schema, Mapping) else {"type": "object"},
    )
