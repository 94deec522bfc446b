"""The single seam to the mcp SDK (and the httpx2 / anyio it brings): nothing else imports them.

* :func:`open_session` starts a stdio child or connects over Streamable HTTP, negotiates the
  protocol (``mode="auto"``: 2026-07-28 ``server/discover``, else the ``initialize`` handshake)
  and yields an :class:`SdkSession`. It reports the transport's end of stream (a crashed child,
  a closed connection) through ``on_lost`` so the owner can restart it without waiting for a
  call to fail.
* :class:`SdkSession` lists tools and calls them, mapping MCP types to
  :mod:`edge_agent.mcp.models` (a result's content through :mod:`outpost_wire.mcp_content`, the
  converter the control plane uses too) and foreign exceptions to :mod:`edge_agent.mcp.errors`.

HTTP responses 401/403 (credentials refused), 502/503/504 (gateway: server unreachable) and 404
on a request that carries an ``Mcp-Session-Id`` (the server forgot the session, e.g. after a
restart) end the connection, so the owner reconnects; the SDK would otherwise turn them into an
opaque ``-32603``. Secret values (headers, environment) are scrubbed from every message.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import ssl
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from types import TracebackType
from typing import Any, Final, cast
from urllib.parse import urlsplit, urlunsplit

import anyio
import anyio.to_thread
import httpx2
import mcp_types
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client import Transport
from mcp.client.streamable_http import MCP_SESSION_ID, streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from edge_agent.errors import ConfigError
from edge_agent.mcp.config import (
    HttpTransportConfig,
    McpServerConfig,
    StdioTransportConfig,
    is_private_address,
)
from edge_agent.mcp.errors import McpConnectionFailed, McpInvalidArguments
from edge_agent.mcp.models import McpTool, TextBlock, ToolOutput
from edge_agent.mcp.secrets import resolve_secrets
from outpost_wire.mcp_content import tool_result_content

__all__ = ["SdkSession", "describe_failure", "open_session", "scrub"]

log = logging.getLogger(__name__)

_CLIENT_INFO: Final = mcp_types.Implementation(name="outpost-edge", version="0.1.0")
_MAX_LIST_PAGES: Final = 100
_ENDS_CONNECTION: Final = frozenset({401, 403, 502, 503, 504})
_MIN_SECRET_LEN: Final = 4  # shorter values are not scrubbed (they would mangle ordinary text)

_Streams = tuple[Any, Any]  # (ReadStream[SessionMessage | Exception], WriteStream[SessionMessage])


class SdkSession:
    """One live MCP client session; many concurrent calls multiplex over it."""

    def __init__(self, client: Client, secrets: tuple[str, ...]) -> None:
        self._client = client
        self._secrets = secrets
        self.closed = False

    async def list_tools(self) -> tuple[McpTool, ...]:
        """Every tool the server lists (all pages). Raises :class:`McpConnectionFailed`."""
        tools: list[McpTool] = []
        cursor: str | None = None
        try:
            for _ in range(_MAX_LIST_PAGES):
                page = await self._client.list_tools(cursor=cursor)
                tools.extend(_tool(tool) for tool in page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
        except (MCPError, ValidationError, RuntimeError, OSError, httpx2.HTTPError) as exc:
            raise McpConnectionFailed(
                f"listing the tools failed: {self._scrub(describe_failure(exc))}"
            ) from None
        return tuple(tools)

    async def call_tool(self, tool: str, arguments: Mapping[str, Any], timeout_s: float) -> ToolOutput:
        """Call one tool. Raises :class:`McpConnectionFailed` (connection lost, or no answer
        within ``timeout_s``) and :class:`McpInvalidArguments` (the server said -32602)."""
        try:
            with anyio.fail_after(timeout_s):
                result = await self._client.call_tool(tool, dict(arguments))
        except TimeoutError:
            raise McpConnectionFailed(f"tool {tool!r} did not answer within {timeout_s:.3g}s") from None
        except MCPError as exc:
            if exc.code == mcp_types.CONNECTION_CLOSED:
                raise McpConnectionFailed("the connection was lost during the call") from None
            if exc.code == mcp_types.REQUEST_TIMEOUT:
                raise McpConnectionFailed(f"tool {tool!r} did not answer within {timeout_s:.3g}s") from None
            if exc.code == mcp_types.INVALID_PARAMS:
                raise McpInvalidArguments(
                    f"the server rejected the arguments: {self._scrub(exc.message)}"
                ) from None
            return _error_output(f"MCP server error {exc.code}: {self._scrub(exc.message)}")
        except (RuntimeError, ValidationError) as exc:
            if self.closed:
                raise McpConnectionFailed("the connection was lost during the call") from None
            # Output that fails its declared schema, or a result shape this client cannot use.
            return _error_output(f"the MCP server returned an unusable result: {exc}")
        except (OSError, httpx2.HTTPError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise McpConnectionFailed(self._scrub(describe_failure(exc))) from None
        return ToolOutput(content=tool_result_content(result), is_error=result.is_error)

    def _scrub(self, text: str) -> str:
        return scrub(text, self._secrets)


@asynccontextmanager
async def open_session(config: McpServerConfig, on_lost: Callable[[str], None]) -> AsyncIterator[SdkSession]:
    """Connect to one server. Every failure (to start, to connect, or of the connection later,
    raised when the block exits) becomes :class:`McpConnectionFailed` with a scrubbed message."""
    secrets: tuple[str, ...] = ()
    session: SdkSession | None = None
    try:
        async with AsyncExitStack() as stack:
            if config.stdio is not None:
                env = await _resolve(config.stdio.env, where=f"mcp_servers[{config.name}].stdio.env")
                secrets = tuple(env.values())
                transport = stdio_client(_stdio_parameters(config.stdio, env))
                what = "the server process exited"
            else:
                assert config.http is not None
                headers = await _http_headers(config)
                # "Bearer <token>": scrub the token on its own, too.
                secrets = (*headers.values(), *(v.split(" ", 1)[-1] for v in headers.values()))
                await _check_address(config.http)
                http = await stack.enter_async_context(await _http_client(config.http, headers))
                transport = streamable_http_client(config.http.url, http_client=http)
                what = "the HTTP connection ended"
            watched = cast(Transport, _watch_end(transport, lambda: on_lost(what)))
            client = await stack.enter_async_context(Client(watched, cache=None, client_info=_CLIENT_INFO))
            session = SdkSession(client, secrets)
            yield session
    except McpConnectionFailed:
        raise
    except Exception as exc:
        raise McpConnectionFailed(scrub(describe_failure(exc, config), secrets)) from None
    finally:
        if session is not None:
            session.closed = True


# -- transports ------------------------------------------------------------------------------


async def _resolve(sources: Mapping[str, Any], *, where: str) -> dict[str, str]:
    if not sources:
        return {}
    # File reads and stat stay off the event loop.
    return await anyio.to_thread.run_sync(lambda: resolve_secrets(sources, where=where))


async def _http_headers(config: McpServerConfig) -> dict[str, str]:
    assert config.http is not None
    where = f"mcp_servers[{config.name}].http"
    headers = await _resolve(config.http.headers, where=f"{where}.headers")
    if config.http.bearer_token is not None:
        token = await _resolve({"bearer_token": config.http.bearer_token}, where=where)
        headers["Authorization"] = f"Bearer {token['bearer_token']}"
    return headers


def _stdio_parameters(stdio: StdioTransportConfig, env: dict[str, str]) -> StdioServerParameters:
    return StdioServerParameters(command=stdio.command, args=list(stdio.args), env=env or None, cwd=stdio.cwd)


async def _http_client(http: HttpTransportConfig, headers: dict[str, str]) -> httpx2.AsyncClient:
    async def check(response: httpx2.Response) -> None:
        status = response.status_code
        if status in _ENDS_CONNECTION or (status == 404 and MCP_SESSION_ID in response.request.headers):
            raise _HttpRefused(status, response.reason_phrase, http.url)

    verify: ssl.SSLContext | bool = True
    if http.ca_file is not None:
        cafile = str(http.ca_file)
        verify = await anyio.to_thread.run_sync(lambda: ssl.create_default_context(cafile=cafile))
    return httpx2.AsyncClient(
        headers=headers,
        verify=verify,
        trust_env=False,  # no HTTP(S)_PROXY: the credentials go to the private server, nowhere else
        timeout=httpx2.Timeout(http.timeout_s, read=None),  # a call's duration is bounded by the hub
        event_hooks={"response": [check]},
    )


async def _check_address(http: HttpTransportConfig) -> None:
    """Refuse a host name that resolves to a public address (literal IPs were checked at load)."""
    if http.allow_public_address:
        return
    parts = urlsplit(http.url)
    host = parts.hostname or ""
    try:
        ipaddress.ip_address(host)
        return
    except ValueError:
        pass
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = await anyio.getaddrinfo(host, port)
    except OSError as exc:
        raise McpConnectionFailed(f"cannot resolve {host}: {exc}") from None
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if not is_private_address(address):
            raise McpConnectionFailed(
                f"{host} resolves to {address}, which is not a private-network address "
                "(set allow_public_address to override)"
            )


@asynccontextmanager
async def _watch_end(
    transport: AbstractAsyncContextManager[_Streams], on_end: Callable[[], None]
) -> AsyncIterator[_Streams]:
    async with transport as (read_stream, write_stream):
        yield _EndWatchingStream(read_stream, on_end), write_stream


class _EndWatchingStream:
    """A read stream that calls ``on_end`` once when the transport's stream ends."""

    def __init__(self, inner: Any, on_end: Callable[[], None]) -> None:
        self._inner = inner
        self._on_end: Callable[[], None] | None = on_end

    @property
    def last_context(self) -> Any:  # the dispatcher reads the sender's contextvars from here
        return getattr(self._inner, "last_context", None)

    def _ended(self) -> None:
        if self._on_end is not None:
            on_end, self._on_end = self._on_end, None
            on_end()

    async def receive(self) -> SessionMessage | Exception:
        try:
            return cast(SessionMessage | Exception, await self._inner.receive())
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._ended()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _EndWatchingStream:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _EndWatchingStream:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class _HttpRefused(Exception):
    def __init__(self, status: int, reason: str, url: str) -> None:
        super().__init__(f"HTTP {status} {reason}")
        self.status = status
        self.reason = reason
        self.url = url


# -- type mapping ------------------------------------------------------------------------------


def _tool(tool: mcp_types.Tool) -> McpTool:
    return McpTool(
        name=tool.name,
        description=tool.description or tool.title or "",
        input_schema=dict(tool.input_schema),
    )


def _error_output(text: str) -> ToolOutput:
    return ToolOutput(content=(TextBlock(text),), is_error=True)


# -- failure descriptions -----------------------------------------------------------------------


def describe_failure(exc: BaseException, config: McpServerConfig | None = None) -> str:
    """One line saying why a connection failed, from the most telling exception in ``exc``."""
    leaves = list(_leaves(exc))
    best = min(leaves, key=_rank) if leaves else exc
    return _describe(best, config)


def scrub(text: str, secrets: tuple[str, ...]) -> str:
    """Replace every secret value (of at least 4 characters) in ``text`` with ``***``."""
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= _MIN_SECRET_LEN:
            text = text.replace(secret, "***")
    return text


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    elif not isinstance(exc, asyncio.CancelledError):
        yield exc


def _rank(exc: BaseException) -> int:
    order: tuple[type[BaseException], ...] = (
        _HttpRefused,
        ConfigError,
        McpConnectionFailed,
        httpx2.HTTPError,
        OSError,
        MCPError,
    )
    return next((i for i, kind in enumerate(order) if isinstance(exc, kind)), len(order))


def _describe(exc: BaseException, config: McpServerConfig | None) -> str:
    url = _safe_url(config.http.url) if config is not None and config.http is not None else "the server"
    if isinstance(exc, _HttpRefused):
        if exc.status in (401, 403):
            where = f"mcp_servers[{config.name}].http" if config is not None else "the configuration"
            return (
                f"{url} refused the credentials (HTTP {exc.status} {exc.reason}); "
                f"check bearer_token / headers in {where}"
            )
        if exc.status == 404:
            return f"{url} no longer knows our MCP session (HTTP 404; did the server restart?)"
        return f"{url} is unavailable (HTTP {exc.status} {exc.reason})"
    if isinstance(exc, ConfigError | McpConnectionFailed):
        return exc.message
    if isinstance(exc, httpx2.ConnectError | httpx2.ConnectTimeout):
        return f"cannot connect to {url}: {exc or type(exc).__name__}"
    if isinstance(exc, httpx2.TimeoutException):
        return f"timed out talking to {url}"
    if isinstance(exc, httpx2.HTTPError):
        return f"HTTP error talking to {url}: {type(exc).__name__}: {exc}"
    if isinstance(exc, OSError) and config is not None and config.stdio is not None:
        return f"cannot start {config.stdio.command!r}: {exc.strerror or exc}"
    if isinstance(exc, MCPError):
        if exc.code == mcp_types.CONNECTION_CLOSED:
            return "the server closed the connection (did it exit? see its stderr)"
        return f"MCP error {exc.code}: {exc.message}"
    return f"{type(exc).__name__}: {exc}"


def _safe_url(url: str) -> str:
    """The URL without query or fragment (they may carry tokens)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
