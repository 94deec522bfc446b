"""The control plane's metrics: the series, and the wrappers that measure its parts.

``GET /metrics`` (:mod:`control_plane.api.metrics`) serves them. The registry is this process's
own ``prometheus_client`` ``CollectorRegistry`` (:func:`outpost_wire.metrics.daemon_registry`),
never the global one. Series:

This process: ``outpost_control_build_info{version}``, ``outpost_control_plane_info{control_plane_id,
version}``, and the process's own ``process_*`` (CPU, resident memory, open fds, start time) and
``python_*`` series.

Per edge, as this control plane sees it (``edge_id``; an edge seen since start keeps its series
after it disconnects). They are named ``outpost_control_edge_*``, apart from the edge's own
``outpost_edge_*`` series, which may mean something else (the edge's own in-flight count, say):

* ``outpost_control_edge_connected{edge_id,environment_id}`` 1 while its tunnel is up, else 0
* ``outpost_control_edge_connections_total{edge_id}``,
  ``outpost_control_edge_reconnects_total{edge_id}`` (handshakes, and handshakes after the first
  one since this process started)
* ``outpost_control_edge_requests_in_flight{edge_id}`` requests waiting on the edge now
* ``outpost_control_edge_sandboxes_reported{edge_id}``,
  ``outpost_control_edge_sandbox_capacity{edge_id}`` (sandboxes in use as the edge last reported,
  and capacity as it reported at its handshake; live edges only)

Sessions and their calls:

* ``outpost_sessions_active`` sessions with a running harness task here
* ``outpost_tool_calls_total{edge_id,tool,outcome}`` and
  ``outpost_tool_call_duration_seconds{tool,outcome}`` (histogram): tool calls through the
  edge gateway (MCP calls through edges count as ``tool="mcp"``)
* ``outpost_sandbox_moves_total{from_edge_id}`` sessions whose sandbox was made anew on another
  edge because theirs was gone
* ``outpost_model_requests_total{model,outcome}``,
  ``outpost_model_request_duration_seconds{model,outcome}`` (histogram),
  ``outpost_model_tokens_total{model,type}`` (``input``, ``output``, ``cache_creation_input``,
  ``cache_read_input``)

Session ids are deliberately not labels: every session would add series forever (unbounded
cardinality). A session's own token usage is on the session resource (``usage``); its tool calls
and model requests are in its event log with timings.

Instrumentation is by composition, at start-up (:mod:`control_plane.server`), so the measured
classes do not know about metrics: :class:`MeteredGateway` wraps the
:class:`~control_plane.tunnel.EdgeGateway` (the harness, the MCP router and the API's sandbox
routes call through it), :class:`MeteredModelClient` wraps any
:class:`~control_plane.harness.ModelClient`, and the tunnel's registry and gateway are handed
:meth:`ControlPlaneMetrics.edge_ready` and :meth:`ControlPlaneMetrics.sandbox_moved` as their
``on_edge_ready`` and ``on_move`` callbacks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from control_plane.errors import ControlPlaneError, EdgeUnavailable
from control_plane.harness.model import ModelClient, ModelError, StreamEvent
from control_plane.tunnel import EdgeConnection, EdgeGateway, EdgeRegistry, SandboxMove, TunnelGrants
from outpost_wire.errors import OutpostError, RemoteError
from outpost_wire.frames import Provision, Provisioned
from outpost_wire.logfmt import log_context
from outpost_wire.metrics import DEFAULT_BUCKETS, daemon_registry, exposition
from outpost_wire.results import ToolResult
from outpost_wire.version import SOFTWARE_VERSION

__all__ = ["ControlPlaneMetrics", "MeteredGateway", "MeteredModelClient"]

#: The edge's built-in tools; any other name is counted as ``other`` (bounded label values).
KNOWN_TOOLS = frozenset({"bash", "read", "write", "edit", "glob", "grep"})
_TOKEN_TYPES = ("input", "output", "cache_creation_input", "cache_read_input")
_MAX_MODEL_LABEL = 64


class ControlPlaneMetrics:
    """The control plane's series (see the module docstring), in its own ``prometheus_client``
    registry; :meth:`bind` the live parts."""

    def __init__(self, control_plane_id: str = "", registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else daemon_registry("outpost_control_build")
        self.control_plane_id = control_plane_id
        self._edges: EdgeRegistry | None = None
        self._sessions: Callable[[], int] = lambda: 0
        self._environments: dict[str, str] = {}  # edge id -> environment id, for edges seen
        self._connections: dict[str, int] = {}
        r = self.registry
        r.register(_LiveFigures(self))
        self.tool_calls = Counter(
            "outpost_tool_calls",
            "Tool calls through the edge gateway, by edge, tool and outcome.",
            ("edge_id", "tool", "outcome"),
            registry=r,
        )
        self.tool_latency = Histogram(
            "outpost_tool_call_duration_seconds",
            "Time from the gateway's call to its answer, by tool and outcome.",
            ("tool", "outcome"),
            buckets=DEFAULT_BUCKETS,
            registry=r,
        )
        self.sandbox_moves = Counter(
            "outpost_sandbox_moves",
            "Sessions whose sandbox was made anew on another edge because theirs was gone, by the "
            "edge they left.",
            ("from_edge_id",),
            registry=r,
        )
        self.model_requests = Counter(
            "outpost_model_requests",
            "Model requests, by model and outcome.",
            ("model", "outcome"),
            registry=r,
        )
        self.model_latency = Histogram(
            "outpost_model_request_duration_seconds",
            "Time to stream a complete model response, by model and outcome.",
            ("model", "outcome"),
            buckets=DEFAULT_BUCKETS,
            registry=r,
        )
        self.model_tokens = Counter(
            "outpost_model_tokens",
            "Tokens of finished model requests, by model and type.",
            ("model", "type"),
            registry=r,
        )

    def bind(
        self, *, edges: EdgeRegistry | None = None, active_sessions: Callable[[], int] | None = None
    ) -> None:
        if edges is not None:
            self._edges = edges
        if active_sessions is not None:
            self._sessions = active_sessions

    # -- edges ------------------------------------------------------------------------------------
    def edge_ready(self, conn: EdgeConnection) -> None:
        """The registry's ``on_edge_ready``: an edge completed a handshake."""
        self._environments[conn.edge_id] = conn.environment_id
        self._connections[conn.edge_id] = self._connections.get(conn.edge_id, 0) + 1

    def sandbox_moved(self, move: SandboxMove) -> None:
        """The gateway's ``on_move``: a session's sandbox was made anew on another edge."""
        self.sandbox_moves.labels(move.from_edge_id).inc()

    def live_families(self) -> Iterator[Metric]:
        """The series read at scrape time: this process, its sessions, and one set per edge seen."""
        info = GaugeMetricFamily(
            "outpost_control_plane_info",
            "This control plane process: its id and software version.",
            labels=["control_plane_id", "version"],
        )
        info.add_metric([self.control_plane_id, SOFTWARE_VERSION], 1.0)
        yield info
        sessions = GaugeMetricFamily(
            "outpost_sessions_active", "Sessions with a running harness task in this process."
        )
        sessions.add_metric([], float(self._sessions()))
        yield sessions

        edges = self._edges
        live = {c.edge_id for c in edges.all_connections() if c.is_open} if edges is not None else set()
        in_flight = edges.in_flight_by_edge() if edges is not None else {}
        statuses = {s.edge_id: s for s in edges.statuses()} if edges is not None else {}
        connected = GaugeMetricFamily(
            "outpost_control_edge_connected",
            "1 while the edge's tunnel to this control plane is up, 0 after it went away.",
            labels=["edge_id", "environment_id"],
        )
        connections = CounterMetricFamily(
            "outpost_control_edge_connections",
            "Tunnel handshakes completed by the edge with this process since it started.",
            labels=["edge_id"],
        )
        reconnects = CounterMetricFamily(
            "outpost_control_edge_reconnects",
            "Handshakes of the edge after its first one with this process.",
            labels=["edge_id"],
        )
        requests = GaugeMetricFamily(
            "outpost_control_edge_requests_in_flight",
            "Requests this control plane sent to (or holds for) the edge, not answered yet.",
            labels=["edge_id"],
        )
        for edge_id, environment_id in sorted(self._environments.items()):
            n = self._connections.get(edge_id, 0)
            connected.add_metric([edge_id, environment_id], 1.0 if edge_id in live else 0.0)
            connections.add_metric([edge_id], float(n))
            reconnects.add_metric([edge_id], float(max(0, n - 1)))
            requests.add_metric([edge_id], float(in_flight.get(edge_id, 0)))
        reported = GaugeMetricFamily(
            "outpost_control_edge_sandboxes_reported",
            "Sandboxes in use on the edge, as it last reported.",
            labels=["edge_id"],
        )
        capacity = GaugeMetricFamily(
            "outpost_control_edge_sandbox_capacity",
            "Sandboxes the edge's policy allows, as it reported at its last handshake.",
            labels=["edge_id"],
        )
        for edge_id, status in sorted(statuses.items()):
            reported.add_metric([edge_id], float(status.sandboxes_in_use))
            capacity.add_metric([edge_id], float(status.sandbox_capacity))
        yield from (connected, connections, reconnects, requests, reported, capacity)

    # -- calls ------------------------------------------------------------------------------------
    def tool_call(self, edge_id: str | None, tool: str, outcome: str, seconds: float) -> None:
        tool = tool if tool in KNOWN_TOOLS or tool == "mcp" else "other"
        self.tool_calls.labels(edge_id or "none", tool, outcome).inc()
        self.tool_latency.labels(tool, outcome).observe(seconds)

    def model_request(self, model: str, outcome: str, seconds: float, usage: Mapping[str, Any]) -> None:
        model = model[:_MAX_MODEL_LABEL] or "unknown"
        self.model_requests.labels(model, outcome).inc()
        self.model_latency.labels(model, outcome).observe(seconds)
        for kind in _TOKEN_TYPES:
            value = usage.get(f"{kind}_tokens")
            if isinstance(value, int) and value > 0:
                self.model_tokens.labels(model, kind).inc(value)

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """``(body, content type)`` of a scrape (OpenMetrics when ``accept`` asks for it)."""
        return exposition(self.registry, accept)


class _LiveFigures(Collector):
    """The series :class:`ControlPlaneMetrics` reads from the live parts at each scrape."""

    def __init__(self, metrics: ControlPlaneMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return self._metrics.live_families()

    def describe(self) -> Iterator[Metric]:
        return self._metrics.live_families()


def _outcome_of_error(exc: BaseException) -> str:
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled"
    if isinstance(exc, EdgeUnavailable):
        return "edge_unavailable"
    if isinstance(exc, RemoteError):
        return exc.code.value.lower()
    if isinstance(exc, OutpostError | ControlPlaneError):
        return "error"
    return "internal"


class MeteredGateway:
    """The edge gateway, its tool and MCP calls timed and counted, the session id bound to the
    log context while they run. Fits the harness's ``ToolGateway``, the MCP router's
    ``McpGateway`` and the API's sandbox routes; what only the composition needs of the gateway
    (draining, durable placements) stays on the :class:`EdgeGateway` itself."""

    def __init__(self, inner: EdgeGateway, metrics: ControlPlaneMetrics) -> None:
        self.inner = inner
        self._metrics = metrics

    # -- measured ---------------------------------------------------------------------------------
    async def execute(
        self,
        session_id: str,
        environment_id: str,
        tool: str,
        tool_input: Mapping[str, Any],
        *,
        idempotency_key: str,
        timeout_s: float | None = None,
    ) -> ToolResult:
        return await self._measured(
            session_id,
            tool,
            self.inner.execute(
                session_id,
                environment_id,
                tool,
                tool_input,
                idempotency_key=idempotency_key,
                timeout_s=timeout_s,
            ),
        )

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
        tunnel: TunnelGrants | None = None,
    ) -> ToolResult:
        return await self._measured(
            session_id,
            "mcp",
            self.inner.mcp_call(
                session_id,
                environment_id,
                server,
                tool,
                arguments,
                idempotency_key=idempotency_key,
                timeout_s=timeout_s,
                tunnel=tunnel,
            ),
        )

    async def _measured(self, session_id: str, tool: str, call: Awaitable[ToolResult]) -> ToolResult:
        """Await ``call`` with the session id on log lines, and count it by tool and outcome."""
        started = time.monotonic()
        outcome = "internal"
        try:
            with log_context(session_id=session_id):
                result = await call
            outcome = "tool_error" if result.is_error else "ok"
            return result
        except BaseException as exc:
            outcome = _outcome_of_error(exc)
            raise
        finally:
            self._metrics.tool_call(
                self.inner.edge_for_session(session_id), tool, outcome, time.monotonic() - started
            )

    # -- passed through -----------------------------------------------------------------------------
    async def provision(
        self, session_id: str, environment_id: str, resources: Provision | None = None
    ) -> Provisioned:
        return await self.inner.provision(session_id, environment_id, resources)

    async def destroy(self, session_id: str, environment_id: str) -> bool:
        return await self.inner.destroy(session_id, environment_id)

    def mcp_catalog(
        self, environment_id: str, *, tunnel: TunnelGrants | None = None
    ) -> dict[str, dict[str, Any]]:
        return self.inner.mcp_catalog(environment_id, tunnel=tunnel)

    def edge_for_session(self, session_id: str) -> str | None:
        return self.inner.edge_for_session(session_id)

    def edges_connected(self, environment_id: str) -> int:
        return self.inner.edges_connected(environment_id)

    @property
    def edge_wait_s(self) -> float:
        return self.inner.edge_wait_s

    def take_move(self, session_id: str) -> SandboxMove | None:
        return self.inner.take_move(session_id)

    def forget_session(self, session_id: str) -> None:
        self.inner.forget_session(session_id)


class MeteredModelClient:
    """A :class:`~control_plane.harness.ModelClient` that times requests and counts tokens."""

    def __init__(self, inner: ModelClient, metrics: ControlPlaneMetrics) -> None:
        self._inner = inner
        self._metrics = metrics

    async def stream(
        self, request: Mapping[str, Any], on_event: Callable[[StreamEvent], None]
    ) -> dict[str, Any]:
        model = str(request.get("model", ""))
        started = time.monotonic()
        outcome = "internal"
        usage: Mapping[str, Any] = {}
        try:
            message = await self._inner.stream(request, on_event)
            raw = message.get("usage")
            usage = raw if isinstance(raw, Mapping) else {}
            outcome = "ok"
            return message
        except ModelError as exc:
            outcome = exc.error_type
            raise
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        finally:
            self._metrics.model_request(model, outcome, time.monotonic() - started, usage)

    async def close(self) -> None:
        await self._inner.close()
