"""The edge's own observability: its metrics, and a small loopback HTTP server for them.

    GET /metrics   Prometheus text format (see :class:`EdgeMetrics` for the series)
    GET /healthz   200 while the process serves requests at all
    GET /readyz    200 only while a handshake-complete tunnel to the control plane is up, else 503

The server is plain asyncio and the standard library (no web framework on the edge). It listens on
``observability.listen`` (``127.0.0.1:9464`` by default; the config refuses non-loopback addresses
unless ``allow_remote`` is set), answers one request per connection, and never serves anything
but the three paths above. Failing to bind is logged, not fatal: the edge's work matters more
than its metrics.

Tool calls are measured by :class:`MeteredHandler`, a :class:`~edge_agent.connection.RequestHandler`
wrapped around the dispatcher; it also binds the request's session and request ids to the log
context (:func:`outpost_wire.logfmt.log_context`) for everything logged while it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Collection
from types import TracebackType

from edge_agent.connection import Link, RequestHandler
from edge_agent.sandbox import SandboxManager
from outpost_wire.errors import ErrorCode
from outpost_wire.frames import Destroy, Execute, Failure, McpCall, Outcome, Provision, Request
from outpost_wire.logfmt import log_context
from outpost_wire.metrics import CONTENT_TYPE, Registry
from outpost_wire.results import ToolResult
from outpost_wire.version import SOFTWARE_VERSION

__all__ = ["EdgeMetrics", "MeteredHandler", "ObserveServer", "outcome_label"]

log = logging.getLogger(__name__)

_MAX_HEADER_BYTES = 8192
_READ_TIMEOUT_S = 5.0
OTHER = "other"  # the label for names outside a known set (keeps label cardinality bounded)


def outcome_label(outcome: Outcome) -> str:
    """A bounded label for an outcome: ``ok``, ``tool_error``, or the failure's wire code."""
    if isinstance(outcome, Failure):
        return outcome.code.value.lower()
    if isinstance(outcome, ToolResult) and outcome.is_error:
        return "tool_error"
    return "ok"


class EdgeMetrics:
    """The edge's series. Counters and histograms are fed by :class:`MeteredHandler`; gauges read
    the link and the sandbox manager at scrape time (:meth:`bind`).

    * ``outpost_edge_info{edge_id,version}`` 1
    * ``outpost_edge_tunnel_up`` 1 while the tunnel is up
    * ``outpost_edge_tunnel_handshakes_total``, ``outpost_edge_tunnel_reconnects_total``
    * ``outpost_edge_requests_in_flight``
    * ``outpost_edge_sandboxes_live``, ``outpost_edge_sandbox_capacity``
    * ``outpost_edge_tool_calls_total{tool,outcome}``,
      ``outpost_edge_tool_call_duration_seconds{tool,outcome}`` (histogram)
    * ``outpost_edge_mcp_calls_total{server,outcome}``,
      ``outpost_edge_mcp_call_duration_seconds{server,outcome}`` (histogram)
    * ``outpost_edge_sandbox_operations_total{op,outcome}`` (provision / destroy)
    * ``outpost_edge_certificate_expiry_timestamp_seconds``: when the client certificate in use
      expires (unix seconds); alert when ``- time()`` falls under the renewal window
    * ``outpost_edge_certificate_renewals_total{outcome}`` (``ok`` / ``error``)
    """

    def __init__(
        self,
        *,
        edge_id: str,
        tools: Collection[str],
        mcp_servers: Collection[str] = (),
        registry: Registry | None = None,
    ) -> None:
        self.registry = registry or Registry()
        self.tools = frozenset(tools)
        self.mcp_servers = frozenset(mcp_servers)
        self._link: Link | None = None
        self._manager: SandboxManager | None = None
        self._capacity = 0
        self._certificate_not_after: Callable[[], float] | None = None
        r = self.registry
        r.gauge_func(
            "outpost_edge_info",
            "This edge agent: its id and software version.",
            ("edge_id", "version"),
            lambda: {(edge_id, SOFTWARE_VERSION): 1.0},
        )
        r.gauge_func(
            "outpost_edge_tunnel_up",
            "1 while a handshake-complete tunnel to the control plane is up.",
            (),
            lambda: {(): 1.0 if self.ready() else 0.0},
        )
        r.counter_func(
            "outpost_edge_tunnel_handshakes_total",
            "Completed tunnel handshakes with the control plane.",
            (),
            lambda: {(): float(self._link.connections if self._link else 0)},
        )
        r.counter_func(
            "outpost_edge_tunnel_reconnects_total",
            "Handshakes after the first one: how often the tunnel came back.",
            (),
            lambda: {(): float(max(0, self._link.connections - 1) if self._link else 0)},
        )
        r.gauge_func(
            "outpost_edge_requests_in_flight",
            "Requests from the control plane being served now.",
            (),
            lambda: {(): float(self._link.in_flight if self._link else 0)},
        )
        r.gauge_func(
            "outpost_edge_sandboxes_live",
            "Sandboxes this edge holds (running or paused).",
            (),
            lambda: {(): float(self._manager.in_use() if self._manager else 0)},
        )
        r.gauge_func(
            "outpost_edge_sandbox_capacity",
            "The most sandboxes this edge's policy allows.",
            (),
            lambda: {(): float(self._capacity)},
        )
        self.tool_calls = r.counter(
            "outpost_edge_tool_calls_total", "Sandbox tool calls, by tool and outcome.", ("tool", "outcome")
        )
        self.tool_latency = r.histogram(
            "outpost_edge_tool_call_duration_seconds",
            "Time to serve a sandbox tool call, by tool and outcome.",
            ("tool", "outcome"),
        )
        self.mcp_calls = r.counter(
            "outpost_edge_mcp_calls_total",
            "Calls to private MCP servers, by server and outcome.",
            ("server", "outcome"),
        )
        self.mcp_latency = r.histogram(
            "outpost_edge_mcp_call_duration_seconds",
            "Time to serve an MCP call, by server and outcome.",
            ("server", "outcome"),
        )
        self.sandbox_ops = r.counter(
            "outpost_edge_sandbox_operations_total",
            "Provision and destroy requests, by operation and outcome.",
            ("op", "outcome"),
        )
        r.gauge_func(
            "outpost_edge_certificate_expiry_timestamp_seconds",
            "When the client certificate this edge presents expires (unix seconds).",
            (),
            lambda: {} if self._certificate_not_after is None else {(): self._certificate_not_after()},
        )
        self.certificate_renewals = r.counter(
            "outpost_edge_certificate_renewals_total",
            "Attempts to renew the client certificate, by outcome (ok, error).",
            ("outcome",),
        )

    def bind(
        self,
        *,
        link: Link | None = None,
        manager: SandboxManager | None = None,
        capacity: int = 0,
        certificate_not_after: Callable[[], float] | None = None,
    ) -> None:
        """Read scrape-time figures from these (any may be bound later)."""
        if certificate_not_after is not None:
            self._certificate_not_after = certificate_not_after
        if link is not None:
            self._link = link
        if manager is not None:
            self._manager = manager
        if capacity:
            self._capacity = capacity

    def certificate_renewal(self, ok: bool) -> None:
        """Count a renewal attempt."""
        self.certificate_renewals.labels("ok" if ok else "error").inc()

    def ready(self) -> bool:
        """True while the link has a handshake-complete tunnel."""
        return self._link is not None and self._link.connected.is_set()

    def readiness(self) -> tuple[bool, str]:
        """``(ready, one line saying why)`` for ``/readyz``."""
        if self._link is None:
            return False, "not ready: the link has not started"
        if self._link.connected.is_set():
            return True, "ready: tunnel up"
        why = f"; last error: {self._link.last_error}" if self._link.last_error else ""
        return False, f"not ready: tunnel {self._link.state.value}{why}"

    def instrument(self, handler: RequestHandler) -> MeteredHandler:
        return MeteredHandler(handler, self)

    def record(self, request: Request, outcome_name: str, seconds: float) -> None:
        """Count one served request."""
        op = request.op
        if isinstance(op, Execute):
            tool = op.tool if op.tool in self.tools else OTHER
            self.tool_calls.labels(tool, outcome_name).inc()
            self.tool_latency.labels(tool, outcome_name).observe(seconds)
        elif isinstance(op, McpCall):
            server = op.server if op.server in self.mcp_servers else OTHER
            self.mcp_calls.labels(server, outcome_name).inc()
            self.mcp_latency.labels(server, outcome_name).observe(seconds)
        elif isinstance(op, Provision | Destroy):
            self.sandbox_ops.labels(type(op).__name__.lower(), outcome_name).inc()


class MeteredHandler:
    """A :class:`~edge_agent.connection.RequestHandler` that times and counts what it forwards."""

    def __init__(
        self, inner: RequestHandler, metrics: EdgeMetrics, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._inner = inner
        self._metrics = metrics
        self._clock = clock

    async def handle(self, request: Request) -> Outcome:
        started = self._clock()
        name = ErrorCode.CANCELLED.value.lower()
        try:
            with log_context(session_id=request.session_id, request_id=request.request_id):
                outcome = await self._inner.handle(request)
            name = outcome_label(outcome)
            return outcome
        finally:
            self._metrics.record(request, name, self._clock() - started)

    def cancel(self, request_id: str) -> bool:
        return self._inner.cancel(request_id)


class ObserveServer:
    """``/metrics``, ``/healthz`` and ``/readyz`` over HTTP/1.1 on one address.

    ``async with ObserveServer(...)`` or :meth:`start` / :meth:`close` (idempotent). ``port`` is
    the bound port (useful with port 0)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        render: Callable[[], str],
        readiness: Callable[[], tuple[bool, str]],
    ) -> None:
        self.host = host
        self.port = port
        self._render = render
        self._readiness = readiness
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> ObserveServer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        """Bind and serve. Raises OSError if the address cannot be bound."""
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("observability endpoint on %s (/metrics, /healthz, /readyz)", self.url)

    async def close(self) -> None:
        if self._server is None:
            return
        server, self._server = self._server, None
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 2.0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT_S)
            except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                return
            if len(head) > _MAX_HEADER_BYTES:
                await _respond(writer, 431, "request header too large\n")
                return
            parts = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
            if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                await _respond(writer, 400, "bad request\n")
                return
            method, target = parts[0], parts[1].split("?", 1)[0]
            if method not in ("GET", "HEAD"):
                await _respond(writer, 405, "only GET and HEAD\n", head_only=False, allow=True)
                return
            status, body, content_type = self._route(target)
            await _respond(writer, status, body, head_only=method == "HEAD", content_type=content_type)
        except ConnectionError:
            pass
        except Exception:
            log.exception("observability endpoint: request failed")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _route(self, path: str) -> tuple[int, str, str]:
        plain = "text/plain; charset=utf-8"
        if path == "/metrics":
            return 200, self._render(), CONTENT_TYPE
        if path == "/healthz":
            return 200, "ok\n", plain
        if path == "/readyz":
            ready, why = self._readiness()
            return (200 if ready else 503), why + "\n", plain
        return 404, "not found: try /metrics, /healthz or /readyz\n", plain


_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}


async def _respond(
    writer: asyncio.StreamWriter,
    status: int,
    body: str,
    *,
    head_only: bool = False,
    content_type: str = "text/plain; charset=utf-8",
    allow: bool = False,
) -> None:
    data = body.encode()
    headers = [
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(data)}",
        "Cache-Control: no-store",
        "Connection: close",
    ]
    if allow:
        headers.append("Allow: GET, HEAD")
    writer.write(("\r\n".join(headers) + "\r\n\r\n").encode("latin-1"))
    if not head_only:
        writer.write(data)
    await writer.drain()
