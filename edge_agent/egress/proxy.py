"""The edge's egress proxy: one asyncio HTTP(S) proxy for every allowlist sandbox of the edge.

It listens on the gateway address of the edge's internal Docker network (the host side of the
bridge). A sandbox is recognised by its source address: :meth:`EgressProxy.grant` maps a container
address to its session and allowlist, :meth:`EgressProxy.revoke` undoes it (and cuts the session's
open tunnels). Unknown sources get ``403``.

Per connection: read one request head (bounded size and time), parse it (:mod:`.http`), check the
host (:func:`.rules.check_target`), resolve it once with the injected resolver, keep the addresses
that pass :func:`.rules.permitted_addresses`, connect to one of those exact addresses, then pipe
bytes both ways until both sides finish or the tunnel is idle too long. Decisions are logged with
the session id, host and rule; request headers and bodies never are.

A :data:`LocalHandler` (the edge's git relay) may serve requests addressed to the proxy itself
under one path prefix (see :func:`.http.parse_local`): it gets the session of the source address,
the parsed head and the connection, and counts against the same tunnel limits. Without one, such
requests are refused as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType

from .addresses import IPAddress, parse_address
from .hosts import Allowlist
from .http import (
    CONNECT_ESTABLISHED,
    HeadError,
    LocalRequest,
    ProxyRequest,
    RequestKind,
    parse_head,
    parse_local,
    render_response,
)
from .rules import Refusal, check_target, literal_address, permitted_addresses

__all__ = ["EgressProxy", "LocalHandler", "LocalService", "ProxyLimits", "Resolver", "system_resolver"]

log = logging.getLogger(__name__)

Resolver = Callable[[str, int], Awaitable[Sequence[IPAddress]]]
"""``(host, port) -> addresses``. The default is :func:`system_resolver`; tests inject a table."""

LocalHandler = Callable[[str, LocalRequest, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
"""``(session id, request, reader, writer)``: answer one request for the proxy itself. The
proxy closes the connection afterwards."""


@dataclass(frozen=True)
class LocalService:
    """What the proxy serves itself: requests whose path starts with ``prefix``."""

    prefix: str
    handler: LocalHandler


_CHUNK = 64 * 1024
_LINGER_S = 1.0  # after a refusal, how long to wait for the client to close
_LINGER_BYTES = 256 * 1024


async def system_resolver(host: str, port: int) -> list[IPAddress]:
    """Resolve with the host's resolver (``getaddrinfo`` on the loop's executor)."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    return [parse_address(str(info[4][0])) for info in infos]


@dataclass(frozen=True)
class ProxyLimits:
    """Bounds on what one sandbox can make the proxy do."""

    head_timeout_s: float = 10.0  # to send the request head
    resolve_timeout_s: float = 10.0
    connect_timeout_s: float = 10.0  # per upstream address tried
    idle_timeout_s: float = 300.0  # a tunnel with no bytes either way for this long is closed
    max_tunnels: int = 256  # open upstream connections, all sessions
    max_tunnels_per_session: int = 64
    max_connections: int = 512  # client connections in any state (more are closed at once)
    max_head_bytes: int = 16 * 1024

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if value <= 0:
                raise ValueError(f"ProxyLimits.{name} must be positive")


@dataclass(frozen=True)
class _Grant:
    session_id: str
    allowlist: Allowlist


@dataclass
class _Tunnels:
    """Open client connections, by source address, so that :meth:`EgressProxy.revoke` can cut them."""

    by_source: dict[str, set[asyncio.Task[None]]] = field(default_factory=dict)
    per_session: dict[str, int] = field(default_factory=dict)
    total: int = 0


class EgressProxy:
    """Start with :meth:`start` (or ``async with``); :meth:`close` is idempotent."""

    def __init__(
        self,
        host: str,
        port: int = 0,
        *,
        limits: ProxyLimits | None = None,
        resolver: Resolver | None = None,
        local: LocalService | None = None,
    ) -> None:
        self._local = local
        self._host = host
        self._port = port
        self.limits = limits or ProxyLimits()
        self._resolve = resolver or system_resolver
        self._grants: dict[str, _Grant] = {}
        self._tunnels = _Tunnels()
        self._handlers: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self._closed = False

    # lifecycle -------------------------------------------------------------------------------

    async def __aenter__(self) -> EgressProxy:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Bind ``host:port`` (port 0: any free port; see :attr:`port`). Raises OSError."""
        if self._server is not None:
            return
        self._server = await asyncio.start_server(
            self._serve, self._host, self._port, limit=self.limits.max_head_bytes, reuse_address=True
        )
        self._port = int(self._server.sockets[0].getsockname()[1])
        log.info("egress proxy listening on %s:%d", self._host, self._port)

    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        """``http://host:port``: the value of ``HTTP_PROXY`` inside the sandboxes."""
        return f"http://{self._host}:{self._port}"

    async def close(self) -> None:
        """Stop listening and cut every open connection."""
        if self._closed:
            return
        self._closed = True
        if self._server is not None:
            self._server.close()
        for task in list(self._handlers):
            task.cancel()
        if self._handlers:
            await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    # who may use it --------------------------------------------------------------------------

    def grant(self, source: str, session_id: str, allowlist: Allowlist) -> None:
        """Requests from ``source`` (a sandbox's address) are ``session_id``'s, checked against
        ``allowlist``. Replaces whatever ``source`` meant before."""
        previous = self._grants.get(source)
        if previous is not None and previous.session_id != session_id:
            self._cut(source)
        self._grants[source] = _Grant(session_id, allowlist)

    def revoke(self, source: str, session_id: str) -> None:
        """Forget ``source`` if it still belongs to ``session_id``; cut its open connections."""
        grant = self._grants.get(source)
        if grant is not None and grant.session_id == session_id:
            del self._grants[source]
            self._cut(source)

    def granted(self) -> dict[str, str]:
        """Source address -> session id (for diagnostics and tests)."""
        return {source: grant.session_id for source, grant in self._grants.items()}

    def _cut(self, source: str) -> None:
        for task in self._tunnels.by_source.get(source, ()):
            task.cancel()

    # one client connection -------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._handlers) >= self.limits.max_connections:
            log.warning("egress proxy: %d connections open; refusing more", len(self._handlers))
            writer.close()
            return
        self._handlers.add(task)
        try:
            await self._handle(reader, writer)
        except asyncio.CancelledError:
            pass  # revoked, or the proxy is closing
        except Exception:
            log.exception("egress proxy: connection failed")
        finally:
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        source = str(peer[0]) if peer else ""
        request = await self._read_request(reader)
        if request is None:
            return  # the client went away before sending a request
        grant = self._grants.get(source)  # looked up after the head: it may change meanwhile
        if grant is None:
            log.warning("egress: refused a request from unknown source %s", source)
            await _answer(reader, writer, Refusal(403, "egress.unknown_source", "not a known sandbox"))
            return
        if isinstance(request, Refusal):
            log.info("egress session=%s refused rule=%s (%s)", grant.session_id, request.rule, request.reason)
            await _answer(reader, writer, request)
            return
        task = asyncio.current_task()
        assert task is not None
        if not self._admit(source, grant.session_id, task):
            what = request.path if isinstance(request, LocalRequest) else request.host
            log.warning("egress session=%s refused %s: too many tunnels", grant.session_id, what)
            await _answer(reader, writer, Refusal(503, "egress.max_tunnels", "too many open connections"))
            return
        try:
            if isinstance(request, LocalRequest):
                assert self._local is not None
                await self._local.handler(grant.session_id, request, reader, writer)
            else:
                await self._proxy(grant, request, reader, writer)
        finally:
            self._release(source, grant.session_id, task)

    def _own_authorities(self) -> frozenset[str]:
        return frozenset({f"{self._host}:{self._port}"})

    async def _read_request(
        self, reader: asyncio.StreamReader
    ) -> ProxyRequest | LocalRequest | Refusal | None:
        try:
            async with asyncio.timeout(self.limits.head_timeout_s):
                head = await reader.readuntil(b"\r\n\r\n")
            if self._local is not None:
                local = parse_local(head, self._own_authorities(), self._local.prefix)
                if local is not None:
                    return local
            return parse_head(head)
        except HeadError as exc:
            return Refusal(exc.status, exc.rule, exc.reason)
        except TimeoutError:
            return Refusal(408, "egress.request", "request head not received in time")
        except asyncio.LimitOverrunError:
            return Refusal(431, "egress.request", "request head too large")
        except (asyncio.IncompleteReadError, ConnectionError):
            return None

    def _admit(self, source: str, session_id: str, task: asyncio.Task[None]) -> bool:
        t = self._tunnels
        if t.total >= self.limits.max_tunnels:
            return False
        if t.per_session.get(session_id, 0) >= self.limits.max_tunnels_per_session:
            return False
        t.total += 1
        t.per_session[session_id] = t.per_session.get(session_id, 0) + 1
        t.by_source.setdefault(source, set()).add(task)
        return True

    def _release(self, source: str, session_id: str, task: asyncio.Task[None]) -> None:
        t = self._tunnels
        t.total -= 1
        t.per_session[session_id] -= 1
        if not t.per_session[session_id]:
            del t.per_session[session_id]
        tasks = t.by_source[source]
        tasks.discard(task)
        if not tasks:
            del t.by_source[source]

    async def _proxy(
        self,
        grant: _Grant,
        request: ProxyRequest,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        target = f"{request.host}:{request.port}"
        outcome = await self._open_upstream(grant, request)
        if isinstance(outcome, Refusal):
            log.info("egress session=%s %s refused rule=%s", grant.session_id, target, outcome.rule)
            await _answer(reader, writer, outcome)
            return
        up_reader, up_writer, address = outcome
        log.info(
            "egress session=%s %s %s allowed via %s",
            grant.session_id,
            request.kind.value,
            target,
            address,
        )
        try:
            if request.kind is RequestKind.CONNECT:
                writer.write(CONNECT_ESTABLISHED)
            else:
                up_writer.write(request.upstream_head)
            await _relay(reader, writer, up_reader, up_writer, self.limits.idle_timeout_s)
        finally:
            up_writer.close()
            with contextlib.suppress(Exception):
                await up_writer.wait_closed()

    async def _open_upstream(
        self, grant: _Grant, request: ProxyRequest
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, IPAddress] | Refusal:
        refusal = check_target(grant.allowlist, request.host, request.port)
        if refusal is not None:
            return refusal
        if literal_address(request.host) is not None:
            resolved: Sequence[IPAddress] = []
        else:
            try:
                async with asyncio.timeout(self.limits.resolve_timeout_s):
                    resolved = await self._resolve(request.host, request.port)
            except (OSError, TimeoutError, ValueError):
                return Refusal(502, "egress.resolve", f"{request.host} could not be resolved")
        addresses = permitted_addresses(grant.allowlist, request.host, request.port, resolved)
        if isinstance(addresses, Refusal):
            return addresses
        for address in addresses:
            try:
                async with asyncio.timeout(self.limits.connect_timeout_s):
                    up_reader, up_writer = await asyncio.open_connection(
                        str(address), request.port, limit=_CHUNK
                    )
            except (OSError, TimeoutError) as exc:
                log.info("egress session=%s connect to %s failed: %s", grant.session_id, address, exc)
                continue
            return up_reader, up_writer, address
        return Refusal(502, "egress.connect", f"could not connect to {request.host}:{request.port}")


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, refusal: Refusal) -> None:
    """Send the refusal, then let the client read it: half-close and discard what it still sends
    (closing with unread input would reset the connection and could destroy the answer)."""
    with contextlib.suppress(ConnectionError, TimeoutError):
        writer.write(render_response(refusal.status, refusal.rule, refusal.reason))
        if writer.can_write_eof():
            writer.write_eof()
        await writer.drain()
        async with asyncio.timeout(_LINGER_S):
            discarded = 0
            while discarded < _LINGER_BYTES and (data := await reader.read(_CHUNK)):
                discarded += len(data)


async def _pipe(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, touch: Callable[[], None]
) -> None:
    """Copy until EOF, then half-close the other side."""
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(_CHUNK):
            touch()
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()


async def _relay(
    client_reader: asyncio.StreamReader,
    client_writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
    idle_timeout_s: float,
) -> None:
    """Pipe both ways until the upstream's side ends (a client may half-close first and still
    read the answer), or nothing moves either way for ``idle_timeout_s``."""
    loop = asyncio.get_running_loop()
    last = [loop.time()]

    def touch() -> None:
        last[0] = loop.time()

    up = asyncio.create_task(_pipe(client_reader, up_writer, touch))
    down = asyncio.create_task(_pipe(up_reader, client_writer, touch))
    try:
        while not down.done():
            remaining = last[0] + idle_timeout_s - loop.time()
            if remaining <= 0:
                log.info("egress: tunnel idle for %.0fs; closed", idle_timeout_s)
                return
            await asyncio.wait({down}, timeout=remaining)
    finally:
        for task in (up, down):
            task.cancel()
        await asyncio.gather(up, down, return_exceptions=True)
