"""The edge's own observability: its metrics, and a small local HTTP endpoint for them.

    GET /metrics   Prometheus exposition (see :class:`EdgeMetrics` for the series)
    GET /healthz   200 while the process serves requests at all
    GET /readyz    200 only while a handshake-complete tunnel to the control plane is up, else 503
    GET /status    JSON: tunnel state, control plane, last error, identity, certificate expiry,
                   revoked or not (:mod:`edge_agent.status`; read by ``outpost-edge status``)

The endpoint is ``prometheus_client``'s ASGI app for ``/metrics`` plus three small routes, served by
uvicorn inside the daemon's event loop (so ``/healthz`` answering means the loop runs; asyncio
sets ``TCP_NODELAY``, so no response waits on a delayed ACK). It listens on
``observability.listen`` (``127.0.0.1:9464`` by default; the config refuses non-loopback addresses
unless ``allow_remote`` is set) and serves nothing else. Failing to bind is logged, not fatal: the
edge's work matters more than its metrics.

Tool calls are measured by :class:`MeteredHandler`, a :class:`~edge_agent.connection.RequestHandler`
wrapped around the dispatcher; it also binds the request's session and request ids to the log
context (:func:`outpost_wire.logfmt.log_context`) for everything logged while it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Collection, Iterator, Mapping, MutableMapping
from types import TracebackType
from typing import Any

import uvicorn
from prometheus_client import CollectorRegistry, Counter, Histogram, make_asgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from edge_agent.connection import Link, RequestHandler
from edge_agent.sandbox import SandboxManager
from outpost_wire.errors import ErrorCode
from outpost_wire.frames import Destroy, Execute, Failure, McpCall, Outcome, Provision, Request
from outpost_wire.logfmt import log_context
from outpost_wire.metrics import DEFAULT_BUCKETS, daemon_registry
from outpost_wire.results import ToolResult
from outpost_wire.version import SOFTWARE_VERSION

__all__ = ["PROVISION_KINDS", "EdgeMetrics", "MeteredHandler", "ObserveServer", "outcome_label"]

log = logging.getLogger(__name__)

OTHER = "other"  # the label for names outside a known set (keeps label cardinality bounded)
#: ``kind`` of the provisioning histogram: a new container, a warm-pool member claimed, or a
#: paused/detached one made ready.
PROVISION_KINDS = ("cold", "claim", "resume")
#: Provisioning buckets: a resume takes milliseconds, a cold start with a clone up to minutes.
_PROVISION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


def outcome_label(outcome: Outcome) -> str:
    """A bounded label for an outcome: ``ok``, ``tool_error``, or the failure's wire code."""
    if isinstance(outcome, Failure):
        return outcome.code.value.lower()
    if isinstance(outcome, ToolResult) and outcome.is_error:
        return "tool_error"
    return "ok"


class EdgeMetrics:
    """The edge's series, in its own ``prometheus_client`` registry. Counters and histograms are fed
    by :class:`MeteredHandler` and the sandbox manager; gauges read the link and the manager at
    scrape time (:meth:`bind`).

    * ``outpost_edge_build_info{version}``, ``outpost_edge_info{edge_id,version}`` 1
    * ``process_*``, ``python_*``: the process (CPU, resident memory, open fds, start time, GC)
    * ``outpost_edge_tunnel_up`` 1 while the tunnel is up
    * ``outpost_edge_revoked`` 1 once the control plane refused this edge's identity for good
    * ``outpost_edge_tunnel_handshakes_total``, ``outpost_edge_tunnel_reconnects_total``
    * ``outpost_edge_requests_in_flight``
    * ``outpost_edge_sandboxes_live``, ``outpost_edge_sandboxes_pooled`` (warm pool, not in
      ``live``), ``outpost_edge_sandbox_capacity``
    * ``outpost_edge_sandbox_provision_duration_seconds{kind}`` (histogram; ``cold``: a new
      container until its channel is open, ``claim``: a warm-pool member taken and resumed,
      ``resume``: a paused or detached one made ready)
    * ``outpost_edge_tool_calls_total{tool,outcome}``,
      ``outpost_edge_tool_call_duration_seconds{tool,outcome}`` (histogram)
    * ``outpost_edge_mcp_calls_total{server,outcome}``,
      ``outpost_edge_mcp_call_duration_seconds{server,outcome}`` (histogram)
    * ``outpost_edge_sandbox_operations_total{op,outcome}`` (provision / destroy)
    * ``outpost_edge_certificate_expiry_timestamp_seconds``: when the client certificate in use
      expires (unix seconds); alert when ``- time()`` falls under the renewal window
    * ``outpost_edge_certificate_renewals_total{outcome}`` (``ok`` / ``error``)

    Tool and MCP server names outside the known sets count as ``other``; no session id is a label.
    """

    def __init__(
        self,
        *,
        edge_id: str,
        tools: Collection[str],
        mcp_servers: Collection[str] = (),
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.registry = registry if registry is not None else daemon_registry("outpost_edge_build")
        self.edge_id = edge_id
        self.tools = frozenset(tools)
        self.mcp_servers = frozenset(mcp_servers)
        self._link: Link | None = None
        self._manager: SandboxManager | None = None
        self._capacity = 0
        self._certificate_not_after: Callable[[], float] | None = None
        r = self.registry
        r.register(_LiveFigures(self))
        self.tool_calls = Counter(
            "outpost_edge_tool_calls",
            "Sandbox tool calls, by tool and outcome.",
            ("tool", "outcome"),
            registry=r,
        )
        self.tool_latency = Histogram(
            "outpost_edge_tool_call_duration_seconds",
            "Time to serve a sandbox tool call, by tool and outcome.",
            ("tool", "outcome"),
            buckets=DEFAULT_BUCKETS,
            registry=r,
        )
        self.mcp_calls = Counter(
            "outpost_edge_mcp_calls",
            "Calls to private MCP servers, by server and outcome.",
            ("server", "outcome"),
            registry=r,
        )
        self.mcp_latency = Histogram(
            "outpost_edge_mcp_call_duration_seconds",
            "Time to serve an MCP call, by server and outcome.",
            ("server", "outcome"),
            buckets=DEFAULT_BUCKETS,
            registry=r,
        )
        self.sandbox_ops = Counter(
            "outpost_edge_sandbox_operations",
            "Provision and destroy requests, by operation and outcome.",
            ("op", "outcome"),
            registry=r,
        )
        self.provision_latency = Histogram(
            "outpost_edge_sandbox_provision_duration_seconds",
            "Time to make a session's sandbox ready for a call: cold (a new container) or resume "
            "(a paused or detached one).",
            ("kind",),
            buckets=_PROVISION_BUCKETS,
            registry=r,
        )
        self.certificate_renewals = Counter(
            "outpost_edge_certificate_renewals",
            "Attempts to renew the client certificate, by outcome (ok, error).",
            ("outcome",),
            registry=r,
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

    def sandbox_provisioned(self, kind: str, seconds: float) -> None:
        """A sandbox became ready for a call (the manager's ``on_provisioned`` hook)."""
        self.provision_latency.labels(kind if kind in PROVISION_KINDS else OTHER).observe(seconds)

    def ready(self) -> bool:
        """True while the link has a handshake-complete tunnel."""
        return self._link is not None and self._link.connected.is_set()

    def revoked(self) -> bool:
        """True once the control plane refused this edge's identity (revoked or unknown)."""
        return self._link is not None and self._link.refusal is not None

    def readiness(self) -> tuple[bool, str]:
        """``(ready, one line saying why)`` for ``/readyz``."""
        if self._link is None:
            return False, "not ready: the link has not started"
        if self._link.connected.is_set():
            return True, "ready: tunnel up"
        if self._link.refusal is not None:
            return False, f"not ready: the control plane refuses this edge for good ({self._link.refusal})"
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

    # -- scrape-time figures (read by _LiveFigures) ---------------------------------------------
    def live_families(self) -> Iterator[Metric]:
        link, manager = self._link, self._manager
        yield _gauge(
            "outpost_edge_info",
            "This edge agent: its id and software version.",
            1.0,
            {"edge_id": self.edge_id, "version": SOFTWARE_VERSION},
        )
        yield _gauge(
            "outpost_edge_tunnel_up",
            "1 while a handshake-complete tunnel to the control plane is up.",
            1.0 if self.ready() else 0.0,
        )
        yield _gauge(
            "outpost_edge_revoked",
            "1 once the control plane refused this edge's identity (revoked or unknown): it stopped.",
            1.0 if self.revoked() else 0.0,
        )
        handshakes = link.connections if link is not None else 0
        yield _counter(
            "outpost_edge_tunnel_handshakes",
            "Completed tunnel handshakes with the control plane.",
            handshakes,
        )
        yield _counter(
            "outpost_edge_tunnel_reconnects",
            "Handshakes after the first one: how often the tunnel came back.",
            max(0, handshakes - 1),
        )
        yield _gauge(
            "outpost_edge_requests_in_flight",
            "Requests from the control plane being served now.",
            float(link.in_flight if link is not None else 0),
        )
        yield _gauge(
            "outpost_edge_sandboxes_live",
            "Sandboxes this edge holds (running or paused).",
            float(manager.in_use() if manager is not None else 0),
        )
        yield _gauge(
            "outpost_edge_sandboxes_pooled",
            "Paused warm-pool sandboxes ready for new sessions (not in sandboxes_live).",
            float(manager.pooled() if manager is not None else 0),
        )
        yield _gauge(
            "outpost_edge_sandbox_capacity", "The most sandboxes this edge's policy allows.", self._capacity
        )
        expiry = GaugeMetricFamily(
            "outpost_edge_certificate_expiry_timestamp_seconds",
            "When the client certificate this edge presents expires (unix seconds).",
        )
        if self._certificate_not_after is not None:
            expiry.add_metric([], self._certificate_not_after())
        yield expiry


def _gauge(name: str, doc: str, value: float, labels: Mapping[str, str] | None = None) -> Metric:
    family = GaugeMetricFamily(name, doc, labels=list(labels or {}))
    family.add_metric(list((labels or {}).values()), value)
    return family


def _counter(name: str, doc: str, value: float) -> Metric:
    family = CounterMetricFamily(name, doc)
    family.add_metric([], value)
    return family


class _LiveFigures(Collector):
    """The series :class:`EdgeMetrics` reads from the link and the manager at each scrape."""

    def __init__(self, metrics: EdgeMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return self._metrics.live_families()

    def describe(self) -> Iterator[Metric]:
        return self._metrics.live_families()


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


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

_TEXT = "text/plain; charset=utf-8"
_START_TIMEOUT_S = 10.0


class _EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves the process's signal handlers to the daemon."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class ObserveServer:
    """``/metrics``, ``/healthz``, ``/readyz`` and ``/status`` over HTTP on one address.

    ``async with ObserveServer(...)`` or :meth:`start` / :meth:`close` (idempotent). ``port`` is
    the bound port (useful with port 0). ``status`` returns the ``/status`` document."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        registry: CollectorRegistry,
        readiness: Callable[[], tuple[bool, str]],
        status: Callable[[], Mapping[str, Any]] | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self._metrics_app = make_asgi_app(registry)
        self._readiness = readiness
        self._status = status
        self._server: _EmbeddedServer | None = None
        self._task: asyncio.Task[None] | None = None

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
        sock = _listen(self.host, self.port)
        self.port = sock.getsockname()[1]
        server = _EmbeddedServer(
            uvicorn.Config(
                self._app,
                log_config=None,
                access_log=False,
                interface="asgi3",
                lifespan="off",
                ws="none",
                server_header=False,
                timeout_keep_alive=5,
                timeout_graceful_shutdown=1,
                limit_concurrency=32,  # a stuck scraper cannot pile up connections
            )
        )
        task = asyncio.create_task(server.serve(sockets=[sock]), name="edge-observe-http")
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not server.started:
            if task.done() or time.monotonic() > deadline:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
                sock.close()
                raise OSError(f"the HTTP endpoint on {self.url} did not start")
            await asyncio.sleep(0.01)
        self._server, self._task = server, task
        log.info("observability endpoint on %s (/metrics, /healthz, /readyz, /status)", self.url)

    async def close(self) -> None:
        if self._server is None or self._task is None:
            return
        server, task = self._server, self._task
        self._server = self._task = None
        server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(task), 5.0)
        except TimeoutError:
            task.cancel()
        with contextlib.suppress(BaseException):
            await task

    async def _app(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] not in ("GET", "HEAD"):
            await _respond(send, 405, "only GET and HEAD\n", extra=[(b"allow", b"GET, HEAD")])
            return
        path = scope["path"]
        if path == "/metrics":
            await self._metrics_app(scope, receive, send)
            return
        if path == "/healthz":
            await _respond(send, 200, "ok\n")
        elif path == "/readyz":
            ready, why = self._readiness()
            await _respond(send, 200 if ready else 503, why + "\n")
        elif path == "/status" and self._status is not None:
            body = json.dumps(self._status(), indent=2) + "\n"
            await _respond(send, 200, body, content_type="application/json")
        else:
            await _respond(send, 404, "not found: try /metrics, /healthz, /readyz or /status\n")


def _listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket. Its protocol is given as ``IPPROTO_TCP`` (not 0): asyncio sets
    ``TCP_NODELAY`` only on connections of such sockets, and without it a keep-alive scrape waits
    ~40 ms between a response's header and body writes (Nagle meets a delayed ACK)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(64)
    except BaseException:
        sock.close()
        raise
    return sock


async def _respond(
    send: Send,
    status: int,
    body: str,
    *,
    content_type: str = _TEXT,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    data = body.encode()
    headers = [
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(data)).encode()),
        (b"cache-control", b"no-store"),
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
