"""``DirectMcpClient``: the control plane's own MCP client for servers it reaches itself.

* **Credentials**: before every request the injected ``credentials(session_id, url)`` gives the
  headers to send (the vault broker in production; none by default). They are never logged.
* **Pool**: live sessions are keyed by ``(url, fingerprint of the headers)``, so sessions that
  present different credentials never share a connection, and a rotated credential opens a new
  one. Unused sessions close after ``idle_timeout_s``; at most ``max_sessions`` stay open.
* **Reconnect**: a session whose connection failed is dropped; the next request opens a new one.
  A tool list is retried once on a fresh session when a pooled one turns out stale; a tool call
  is retried only when the request cannot have reached the server (nothing ran).
* **Caching**: tool lists are kept ``tools_ttl_s`` per pool key; the outcome of a call is kept by
  idempotency key (the last ``recent_calls``), so a call re-dispatched after a harness restart
  within this process runs once.

Errors raised are :class:`~control_plane.mcp.errors.McpError`.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from control_plane.mcp.client_session import CallResult, McpSession
from control_plane.mcp.config import McpConfig
from control_plane.mcp.errors import McpAuthenticationFailed, McpConnectionFailed, McpError
from control_plane.mcp.models import Credentials, McpToolInfo, no_credentials, safe_url
from control_plane.outbound import OutboundGuard

__all__ = ["DirectMcpClient", "SessionFactory"]

log = logging.getLogger(__name__)

SessionFactory = Callable[[str, Mapping[str, str]], McpSession]
_Key = tuple[str, str]  # (url, credential fingerprint)
_T = TypeVar("_T")


@dataclass(slots=True)
class _Pooled:
    session: McpSession
    last_used: float
    reused: bool = False


class DirectMcpClient:
    """Lists and calls tools of MCP servers over Streamable HTTP, pooling sessions."""

    def __init__(
        self,
        credentials: Credentials = no_credentials,
        config: McpConfig | None = None,
        *,
        session_factory: SessionFactory | None = None,
        outbound: OutboundGuard | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``outbound``: the check of the servers' addresses (default: no private networks);
        ``session_factory``: a test hook (default: :class:`McpSession` under ``outbound``)."""
        self._credentials = credentials
        self._config = config or McpConfig()
        guard = outbound or OutboundGuard()
        self._factory = session_factory or functools.partial(McpSession, outbound=guard)
        self._clock = clock
        self._pool: OrderedDict[_Key, _Pooled] = OrderedDict()
        self._locks: dict[_Key, asyncio.Lock] = {}
        self._tools: dict[_Key, tuple[float, tuple[McpToolInfo, ...]]] = {}
        self._recent: OrderedDict[str, asyncio.Future[CallResult]] = OrderedDict()
        self._closing: set[asyncio.Task[None]] = set()
        self._closed = False

    async def list_tools(self, session_id: str, url: str, *, timeout_s: float) -> tuple[McpToolInfo, ...]:
        """The server's tools (from the cache when fresh)."""
        headers = await self._headers(session_id, url)
        key = (url, _fingerprint(headers))
        cached = self._tools.get(key)
        if cached is not None and self._clock() - cached[0] < self._config.tools_ttl_s:
            return cached[1]
        try:
            async with asyncio.timeout(timeout_s):
                tools = await self._with_session(key, headers, lambda s: s.list_tools(timeout_s), retry=True)
        except TimeoutError:
            raise McpConnectionFailed(
                f"{safe_url(url)} did not list its tools within {timeout_s:g} s"
            ) from None
        self._tools[key] = (self._clock(), tools)
        return tools

    async def call_tool(
        self,
        session_id: str,
        url: str,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        idempotency_key: str,
        timeout_s: float,
    ) -> CallResult:
        """Call ``tool``; a repeated ``idempotency_key`` gets the first call's result (awaiting it
        if it is still running). A failed call is forgotten, so a repeat tries again."""
        known = self._recent.get(idempotency_key)
        if known is not None:
            return await asyncio.shield(known)
        future: asyncio.Future[CallResult] = asyncio.get_running_loop().create_future()
        self._remember(idempotency_key, future)
        try:
            headers = await self._headers(session_id, url)
            key = (url, _fingerprint(headers))
            result = await self._with_session(
                key,
                headers,
                lambda s: s.call_tool(tool, arguments, timeout_s=timeout_s, idempotency_key=idempotency_key),
                retry=False,
            )
        except BaseException as exc:
            self._recent.pop(idempotency_key, None)
            if isinstance(exc, Exception):
                future.set_exception(exc)
                future.exception()  # retrieved: a waiter re-raises it, nobody else must
            else:
                future.cancel()
            raise
        future.set_result(result)
        return result

    async def close(self) -> None:
        """Close every pooled session. Idempotent."""
        self._closed = True
        pooled, self._pool = list(self._pool.values()), OrderedDict()
        await asyncio.gather(*(p.session.close() for p in pooled), return_exceptions=True)
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    # -- internals --------------------------------------------------------------------------------
    async def _headers(self, session_id: str, url: str) -> dict[str, str]:
        try:
            headers = await self._credentials(session_id, url)
        except Exception as exc:
            # The exception text may hold credential material: only its type is reported.
            raise McpAuthenticationFailed(
                f"no credentials could be had for {safe_url(url)} ({type(exc).__name__})"
            ) from None
        return {str(k): str(v) for k, v in headers.items()}

    async def _with_session(
        self,
        key: _Key,
        headers: Mapping[str, str],
        use: Callable[[McpSession], Awaitable[_T]],
        *,
        retry: bool,
    ) -> _T:
        """Run ``use(session)`` on the pooled session for ``key``; on a stale pooled session,
        once more on a fresh one (always when the request was not sent; else if ``retry``)."""
        for attempt in (1, 2):
            pooled = await self._acquire(key, headers)
            try:
                return await use(pooled.session)
            except McpError as exc:
                if pooled.session.broken:
                    self._drop(key, pooled)
                again = attempt == 1 and pooled.reused and (exc.not_sent or retry)
                if not again or isinstance(exc, McpAuthenticationFailed):
                    raise
                log.info("MCP session to %s was stale; reconnecting: %s", safe_url(key[0]), exc.message)
        raise AssertionError("unreachable")

    async def _acquire(self, key: _Key, headers: Mapping[str, str]) -> _Pooled:
        if self._closed:
            raise McpConnectionFailed("the MCP client is closed")
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            pooled = self._pool.get(key)
            now = self._clock()
            if pooled is not None and pooled.session.usable:
                self._pool.move_to_end(key)
                pooled.last_used, pooled.reused = now, True
                return pooled
            if pooled is not None:
                self._drop(key, pooled)
            session = self._factory(key[0], headers)
            await session.open(self._config.connect_timeout_s)
            pooled = _Pooled(session, now)
            self._pool[key] = pooled
            self._evict(now)
            return pooled

    def _evict(self, now: float) -> None:
        """Close sessions idle too long, and the least recently used beyond ``max_sessions``."""
        for key, pooled in list(self._pool.items()):
            idle = now - pooled.last_used >= self._config.idle_timeout_s
            if idle or len(self._pool) > self._config.max_sessions:
                self._drop(key, pooled)
        for key in [k for k, lock in self._locks.items() if k not in self._pool and not lock.locked()]:
            del self._locks[key]

    def _drop(self, key: _Key, pooled: _Pooled) -> None:
        if self._pool.get(key) is pooled:
            del self._pool[key]
            self._tools.pop(key, None)
        task = asyncio.create_task(pooled.session.close(), name="mcp-session-close")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def _remember(self, key: str, future: asyncio.Future[CallResult]) -> None:
        if self._config.recent_calls == 0:
            return
        self._recent[key] = future
        while len(self._recent) > self._config.recent_calls:
            self._recent.popitem(last=False)


def _fingerprint(headers: Mapping[str, str]) -> str:
    """A digest of the headers (names case-folded), to key the pool; never logged."""
    digest = hashlib.sha256()
    for name, value in sorted((k.lower(), v) for k, v in headers.items()):
        digest.update(name.encode() + b"\0" + value.encode() + b"\0")
    return digest.hexdigest()
