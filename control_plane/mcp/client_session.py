"""``McpSession``: one MCP client session to one server over Streamable HTTP.

This is the single seam to the ``mcp`` SDK and the ``httpx2`` it brings; nothing else in the
control plane imports them. The SDK's task groups must be entered and left in one task, so each
session is owned by a task of its own (:meth:`McpSession.open` starts it, :meth:`McpSession.close`
ends it); any number of calls from other tasks multiplex over the live session. A result's
content blocks are converted by :mod:`outpost_wire.mcp_content`, the converter the edge uses too.

Foreign failures are mapped here, once, to :mod:`control_plane.mcp.errors`:

* HTTP 401 / 403 → :class:`McpAuthenticationFailed`;
* connect failures, HTTP 5xx, a connection lost or a call that does not answer in time →
  :class:`McpConnectionFailed` (``not_sent`` when the request cannot have reached the server:
  the TCP connect failed, or the server answered 404 for a session it forgot after a restart);
* any other JSON-RPC error of a ``tools/call`` (bad arguments, unknown tool) and a result this
  client cannot use → an error *result* for the model, not an exception.

The SDK reports HTTP failures as opaque JSON-RPC errors, so a small transport wrapper watches the
statuses and connect failures underneath. Header values never appear in a message: every text
that leaves this module is scrubbed of them, and URLs are shown without user info or query.

Every connection dials only addresses the outbound guard checked (:mod:`control_plane.outbound`):
the server's host is resolved and checked before the session opens (a refusal is
:class:`McpConnectionFailed` naming the rule, nothing is sent), and the HTTP pool connects through
:class:`_PinnedBackend` to the checked address; redirects are not followed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, cast

import anyio
import httpcore2
import httpx2
import mcp_types
from mcp import Client
from mcp.client import Transport
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from control_plane.mcp.errors import McpAuthenticationFailed, McpConnectionFailed, McpError
from control_plane.mcp.models import McpToolInfo, safe_url
from control_plane.outbound import OutboundGuard, OutboundRefused, Pin
from outpost_wire.addresses import pinned_connect
from outpost_wire.mcp_content import tool_result_content
from outpost_wire.version import SOFTWARE_VERSION

__all__ = ["CallResult", "McpSession"]

log = logging.getLogger(__name__)

_CLIENT_INFO: Final = mcp_types.Implementation(name="outpost-control-plane", version=SOFTWARE_VERSION)
IDEMPOTENCY_META_KEY: Final = "dev.outpost/idempotency-key"
_MAX_LIST_PAGES: Final = 50
_CLOSE_GRACE_S: Final = 2.0
_HTTP_TIMEOUT_S: Final = 30.0  # connect / write / pool; reads are bounded by each call's deadline
_MIN_SECRET_CHARS: Final = 4
_CONNECTION_CODES: Final = frozenset({mcp_types.CONNECTION_CLOSED, mcp_types.REQUEST_TIMEOUT})


@dataclass(frozen=True, slots=True)
class CallResult:
    """A tool call's answer: Anthropic tool-result content blocks and ``is_error``."""

    content: list[dict[str, Any]]
    is_error: bool


@dataclass(slots=True)
class _Watch:
    """What the HTTP layer saw: failed POSTs (status) and failed connects, as running counts."""

    refusals: int = 0
    last_status: int = 0
    connect_failures: int = 0

    def mark(self) -> tuple[int, int]:
        return self.refusals, self.connect_failures


class _WatchedTransport(httpx2.AsyncBaseTransport):
    def __init__(self, inner: httpx2.AsyncBaseTransport, watch: _Watch) -> None:
        self._inner = inner
        self._watch = watch

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            response = await self._inner.handle_async_request(request)
        except (httpx2.ConnectError, httpx2.ConnectTimeout):
            self._watch.connect_failures += 1
            raise
        if request.method == "POST" and response.status_code >= 400:
            self._watch.refusals += 1
            self._watch.last_status = response.status_code
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


class _PinnedBackend(httpcore2.AsyncNetworkBackend):
    """``httpcore2``'s network backend dialling only checked addresses (``outbound.pin``)."""

    def __init__(self, pin: Pin) -> None:
        self._inner = httpcore2.AnyIOBackend()
        self._pin = pin

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        errors = (httpcore2.ConnectError, httpcore2.ConnectTimeout)
        stream: httpcore2.AsyncNetworkStream = await pinned_connect(
            self._inner, self._pin, errors, host, port, timeout, local_address, socket_options
        )
        return stream

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        raise OutboundRefused("outbound.scheme", "outbound requests never use a Unix socket")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _PinnedTransport(httpx2.AsyncHTTPTransport):
    """httpx2's transport with its pool dialling through :class:`_PinnedBackend`."""

    def __init__(self, pin: Pin) -> None:
        ssl_context = httpx2.create_ssl_context()
        super().__init__(verify=ssl_context)
        # httpx keeps its pool in ``_pool`` and has no parameter for the network backend; the
        # pinning tests (tests/unit/test_outbound.py, the MCP and vault rebinding tests) fail if
        # this stops taking effect.
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=ssl_context, network_backend=_PinnedBackend(pin)
        )


class McpSession:
    """One live MCP session to ``url`` with fixed request ``headers`` (which may hold secrets)."""

    def __init__(
        self, url: str, headers: Mapping[str, str], *, outbound: OutboundGuard | None = None
    ) -> None:
        """``outbound``: the check of the addresses dialled (default: no private networks)."""
        self.url = url
        self._outbound = outbound or OutboundGuard()
        self._where = safe_url(url)
        self._headers = dict(headers)
        self._secrets = _secret_parts(self._headers.values())
        self._watch = _Watch()
        self._client: Client | None = None
        self._ready: asyncio.Future[None] | None = None
        self._closing = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.broken = False  # the connection failed; the owner should drop this session

    @property
    def usable(self) -> bool:
        return self._client is not None and not self.broken and not self._closing.is_set()

    async def open(self, timeout_s: float) -> None:
        """Connect and complete the MCP handshake. Raises :class:`McpError` (and closes)."""
        if self._task is not None:
            raise RuntimeError("an McpSession is opened once")
        try:
            await self._outbound.check_dial(self.url)
        except OutboundRefused as exc:
            self.broken = True
            raise McpConnectionFailed(
                f"{self._where} is not dialled: {exc.message} (rule: {exc.rule})", not_sent=True
            ) from None
        self._ready = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._own(), name=f"mcp-session {self._where}")
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.shield(self._ready)
        except TimeoutError:
            await self.close()
            raise McpConnectionFailed(
                f"{self._where} did not complete the MCP handshake within {timeout_s:g} s"
            ) from None
        except BaseException:
            await self.close()
            raise

    async def list_tools(self, timeout_s: float) -> tuple[McpToolInfo, ...]:
        """Every tool the server lists (all pages)."""
        client = self._live()
        mark = self._watch.mark()
        tools: list[McpToolInfo] = []
        try:
            async with asyncio.timeout(timeout_s):
                cursor: str | None = None
                for _ in range(_MAX_LIST_PAGES):
                    page = await client.list_tools(cursor=cursor)
                    tools.extend(_tool_info(t) for t in page.tools)
                    cursor = page.next_cursor
                    if cursor is None:
                        break
        except TimeoutError:
            raise McpConnectionFailed(
                f"{self._where} did not list its tools within {timeout_s:g} s"
            ) from None
        except Exception as exc:
            raise self._failure(exc, mark) from None
        return tuple(tools)

    async def call_tool(
        self, tool: str, arguments: Mapping[str, Any], *, timeout_s: float, idempotency_key: str
    ) -> CallResult:
        """Call ``tool``. Raises :class:`McpError` when the call could not be made or answered;
        a tool that failed is a :class:`CallResult` with ``is_error``."""
        client = self._live()
        mark = self._watch.mark()
        meta = cast(mcp_types.RequestParamsMeta, {IDEMPOTENCY_META_KEY: idempotency_key})
        try:
            async with asyncio.timeout(timeout_s):
                result = await client.call_tool(tool, dict(arguments), meta=meta)
        except TimeoutError:
            raise McpConnectionFailed(
                f"tool {tool!r} of {self._where} did not answer within {timeout_s:g} s"
            ) from None
        except MCPError as exc:
            failure = self._failure(exc, mark)
            if exc.code in _CONNECTION_CODES or failure.not_sent or self._refused_since(mark):
                raise failure from None
            return _error_result(f"MCP error {exc.code}: {self._scrub(exc.message)}")
        except (ValidationError, RuntimeError) as exc:
            if self.broken or self._client is None:
                raise McpConnectionFailed(f"the connection to {self._where} was lost") from None
            return _error_result(f"the MCP server returned an unusable result: {self._scrub(str(exc))}")
        except Exception as exc:
            raise self._failure(exc, mark) from None
        content = [block.to_json() for block in tool_result_content(result)]
        return CallResult(content=content, is_error=bool(result.is_error))

    async def close(self) -> None:
        """End the session (its owner task leaves the SDK's contexts). Idempotent."""
        self._closing.set()
        task = self._task
        opened = self._ready is not None and self._ready.done() and not self._ready.cancelled()
        if task is not None and not task.done():
            # A live session is left gracefully (the SDK ends the server's session); one still
            # connecting is just cancelled.
            _, pending = await asyncio.wait({task}, timeout=_CLOSE_GRACE_S if opened else 0)
            if pending:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if self._ready is not None and not self._ready.done():
            self._ready.cancel()

    # -- the owner task ---------------------------------------------------------------------------
    async def _own(self) -> None:
        assert self._ready is not None
        try:
            async with contextlib.AsyncExitStack() as stack:
                http = await stack.enter_async_context(
                    httpx2.AsyncClient(
                        headers=self._headers,
                        timeout=httpx2.Timeout(_HTTP_TIMEOUT_S, read=None),
                        transport=_WatchedTransport(_PinnedTransport(self._outbound.pin), self._watch),
                        trust_env=False,
                        follow_redirects=False,
                    )
                )
                transport = cast(Transport, streamable_http_client(self.url, http_client=http))
                client = await stack.enter_async_context(
                    Client(transport, cache=None, client_info=_CLIENT_INFO)
                )
                self._client = client
                self._ready.set_result(None)
                await self._closing.wait()
        except Exception as exc:
            failure = self._failure(exc, (0, 0))
            if not self._ready.done():
                self._ready.set_exception(failure)
            else:
                log.info("MCP session to %s ended: %s", self._where, failure.message)
        finally:
            self.broken = True
            self._client = None

    def _live(self) -> Client:
        client = self._client
        if client is None or self.broken:
            raise McpConnectionFailed(f"the session to {self._where} is closed", not_sent=True)
        return client

    # -- failure mapping --------------------------------------------------------------------------
    def _refused_since(self, mark: tuple[int, int]) -> int | None:
        return self._watch.last_status if self._watch.refusals > mark[0] else None

    def _failure(self, exc: BaseException, mark: tuple[int, int]) -> McpError:
        """The error for ``exc``, which happened after ``mark``; marks the session broken when
        the connection is no good."""
        failure = self._classify(_most_telling(exc), mark)
        if not isinstance(exc, MCPError) or failure.not_sent or exc.code in _CONNECTION_CODES:
            self.broken = True
        if isinstance(failure, McpAuthenticationFailed):
            self.broken = True
        return failure

    def _classify(self, exc: BaseException, mark: tuple[int, int]) -> McpError:
        where = self._where
        status = self._refused_since(mark)
        if status in (401, 403):
            return McpAuthenticationFailed(f"{where} refused the credentials (HTTP {status})")
        if isinstance(exc, McpError):
            return exc
        if self._watch.connect_failures > mark[1] or isinstance(exc, httpx2.ConnectError):
            return McpConnectionFailed(f"cannot connect to {where}", not_sent=True)
        if isinstance(exc, MCPError):
            if exc.code == mcp_types.INVALID_REQUEST and status == 404:
                return McpConnectionFailed(f"{where} no longer knows the MCP session", not_sent=True)
            if exc.code in _CONNECTION_CODES:
                return McpConnectionFailed(f"the connection to {where} was lost")
            if status is not None and status >= 500:
                return McpConnectionFailed(f"{where} answered HTTP {status}")
            return McpConnectionFailed(f"{where}: MCP error {exc.code}: {self._scrub(exc.message)}")
        if isinstance(exc, httpx2.TimeoutException):
            return McpConnectionFailed(f"timed out talking to {where}")
        if isinstance(
            exc, httpx2.HTTPError | OSError | anyio.BrokenResourceError | anyio.ClosedResourceError
        ):
            return McpConnectionFailed(f"the connection to {where} was lost ({type(exc).__name__})")
        return McpConnectionFailed(f"{where}: {type(exc).__name__}: {self._scrub(str(exc))}")

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text


def _secret_parts(values: Any) -> tuple[str, ...]:
    """Every header value, and each of its words (``Bearer <token>``), longest first."""
    parts: set[str] = set()
    for value in values:
        for part in (str(value), *str(value).split()):
            if len(part) >= _MIN_SECRET_CHARS:
                parts.add(part)
    return tuple(sorted(parts, key=len, reverse=True))


def _most_telling(exc: BaseException) -> BaseException:
    """The leaf of an exception group that best explains it (HTTP / OS errors first)."""
    leaves = list(_leaves(exc))
    if not leaves:
        return exc
    order: tuple[type[BaseException], ...] = (McpError, httpx2.HTTPError, OSError, MCPError)
    return min(leaves, key=lambda e: next((i for i, k in enumerate(order) if isinstance(e, k)), len(order)))


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    elif not isinstance(exc, asyncio.CancelledError):
        yield exc


# -- type mapping -----------------------------------------------------------------------------


def _tool_info(tool: mcp_types.Tool) -> McpToolInfo:
    schema = dict(tool.input_schema) if tool.input_schema else {"type": "object"}
    return McpToolInfo(name=tool.name, description=tool.description or tool.title or "", input_schema=schema)


def _error_result(text: str) -> CallResult:
    return CallResult(content=[{"type": "text", "text": text}], is_error=True)
