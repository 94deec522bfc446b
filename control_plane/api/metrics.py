"""The control plane's metrics and its ``GET /metrics`` route (Prometheus text format).

``/metrics`` needs an API key like every other route, unless the config says
``metrics_public: true`` (for a scraper on a trusted network; the series carry edge and
environment ids, no secrets). Series:

Per edge (``edge_id``; an edge seen since start keeps its series after it disconnects):

* ``outpost_edge_connected{edge_id,environment_id}`` 1 while its tunnel is up, else 0
* ``outpost_edge_connections_total{edge_id}``, ``outpost_edge_reconnects_total{edge_id}``
  (handshakes, and handshakes after the first one since this process started)
* ``outpost_edge_requests_in_flight{edge_id}`` requests waiting on the edge now
* ``outpost_edge_sandboxes_reported{edge_id}``, ``outpost_edge_sandbox_capacity{edge_id}``
  (sandboxes in use and capacity as the edge reported at its last handshake)

Sessions and their calls:

* ``outpost_sessions_active`` sessions with a running harness task here
* ``outpost_tool_calls_total{edge_id,tool,outcome}`` and
  ``outpost_tool_call_duration_seconds{tool,outcome}`` (histogram): tool calls through the
  edge gateway (MCP calls through edges count as ``tool="mcp"``)
* ``outpost_model_requests_total{model,outcome}``,
  ``outpost_model_request_duration_seconds{model,outcome}`` (histogram),
  ``outpost_model_tokens_total{model,type}`` (``input``, ``output``, ``cache_creation_input``,
  ``cache_read_input``)

Session ids are deliberately not labels: every session would add series forever (unbounded
cardinality). A session's own token usage is on the session resource (``usage``); its tool calls
and model requests are in its event log with timings.

Instrumentation is by wrapping, so the measured classes do not know about metrics:
:class:`MeteredEdgeRegistry` and :class:`MeteredGateway` subclass the tunnel's registry and gateway
(public methods only, plus the registry's pending table), and :class:`MeteredModelClient` wraps
any :class:`~control_plane.harness.ModelClient`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from fastapi import APIRouter, Depends, Response

from control_plane.errors import ControlPlaneError, EdgeUnavailable
from control_plane.harness.model import ModelClient, ModelError, StreamEvent
from control_plane.tunnel import EdgeConnection, EdgeGateway, EdgeRegistry, SandboxMove
from outpost_wire.errors import OutpostError, RemoteError
from outpost_wire.logfmt import log_context
from outpost_wire.metrics import CONTENT_TYPE, Registry
from outpost_wire.results import ToolResult
from outpost_wire.version import SOFTWARE_VERSION

__all__ = [
    "ControlPlaneMetrics",
    "MeteredEdgeRegistry",
    "MeteredGateway",
    "MeteredModelClient",
    "metrics_router",
]

#: The edge's built-in tools; any other name is counted as ``other`` (bounded label values).
KNOWN_TOOLS = frozenset({"bash", "read", "write", "edit", "glob", "grep"})
_TOKEN_TYPES = ("input", "output", "cache_creation_input", "cache_read_input")
_MAX_MODEL_LABEL = 64


class ControlPlaneMetrics:
    """The control plane's series (see the module docstring); :meth:`bind` the live parts."""

    def __init__(self, control_plane_id: str = "", registry: Registry | None = None) -> None:
        self.registry = registry or Registry()
        self._edges: EdgeRegistry | None = None
        self._sessions: Callable[[], int] = lambda: 0
        self._environments: dict[str, str] = {}  # edge id -> environment id, for edges seen
        self._connections: dict[str, int] = {}
        r = self.registry
        r.gauge_func(
            "outpost_control_plane_info",
            "This control plane process: its id and software version.",
            ("control_plane_id", "version"),
            lambda: {(control_plane_id, SOFTWARE_VERSION): 1.0},
        )
        r.gauge_func(
            "outpost_edge_connected",
            "1 while the edge's tunnel is up, 0 after it went away.",
            ("edge_id", "environment_id"),
            self._connected,
        )
        r.counter_func(
            "outpost_edge_connections_total",
            "Tunnel handshakes completed by the edge since this process started.",
            ("edge_id",),
            lambda: {(e,): float(n) for e, n in self._connections.items()},
        )
        r.counter_func(
            "outpost_edge_reconnects_total",
            "Handshakes of the edge after its first one since this process started.",
            ("edge_id",),
            lambda: {(e,): float(max(0, n - 1)) for e, n in self._connections.items()},
        )
        r.gauge_func(
            "outpost_edge_requests_in_flight",
            "Requests sent to (or waiting for) the edge and not answered yet.",
            ("edge_id",),
            self._in_flight,
        )
        r.gauge_func(
            "outpost_edge_sandboxes_reported",
            "Sandboxes in use on the edge, as it reported at its last handshake.",
            ("edge_id",),
            lambda: self._hello_figure("sandboxes_in_use"),
        )
        r.gauge_func(
            "outpost_edge_sandbox_capacity",
            "Sandboxes the edge's policy allows, as it reported at its last handshake.",
            ("edge_id",),
            lambda: self._hello_figure("sandbox_capacity"),
        )
        r.gauge_func(
            "outpost_sessions_active",
            "Sessions with a running harness task in this process.",
            (),
            lambda: {(): float(self._sessions())},
        )
        self.tool_calls = r.counter(
            "outpost_tool_calls_total",
            "Tool calls through the edge gateway, by edge, tool and outcome.",
            ("edge_id", "tool", "outcome"),
        )
        self.tool_latency = r.histogram(
            "outpost_tool_call_duration_seconds",
            "Time from the gateway's call to its answer, by tool and outcome.",
            ("tool", "outcome"),
        )
        self.sandbox_moves = r.counter(
            "outpost_sandbox_moves_total",
            "Sessions whose sandbox was made anew on another edge because theirs was gone, by the "
            "edge they left.",
            ("from_edge_id",),
        )
        self.model_requests = r.counter(
            "outpost_model_requests_total", "Model requests, by model and outcome.", ("model", "outcome")
        )
        self.model_latency = r.histogram(
            "outpost_model_request_duration_seconds",
            "Time to stream a complete model response, by model and outcome.",
            ("model", "outcome"),
        )
        self.model_tokens = r.counter(
            "outpost_model_tokens_total",
            "Tokens of finished model requests, by model and type.",
            ("model", "type"),
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
        self._environments[conn.edge_id] = conn.environment_id
        self._connections[conn.edge_id] = self._connections.get(conn.edge_id, 0) + 1

    def _connected(self) -> Mapping[tuple[str, ...], float]:
        live = {c.edge_id for c in self._edges.all_connections() if c.is_open} if self._edges else set()
        return {(e, env): 1.0 if e in live else 0.0 for e, env in self._environments.items()}

    def _in_flight(self) -> Mapping[tuple[str, ...], float]:
        counts = dict.fromkeys(self._environments, 0.0)
        if isinstance(self._edges, MeteredEdgeRegistry):
            for edge_id, n in self._edges.in_flight_by_edge().items():
                counts[edge_id] = float(n)
        return {(e,): n for e, n in counts.items()}

    def _hello_figure(self, name: str) -> Mapping[tuple[str, ...], float]:
        out: dict[tuple[str, ...], float] = {}
        for status in self._edges.statuses() if self._edges else []:
            out[(status.edge_id,)] = float(getattr(status, name))
        return out

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

    def render(self) -> str:
        return self.registry.render()


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


class MeteredEdgeRegistry(EdgeRegistry):
    """An :class:`EdgeRegistry` that counts handshakes and reports in-flight requests per edge."""

    def __init__(self, metrics: ControlPlaneMetrics) -> None:
        super().__init__()
        self._metrics = metrics
        metrics.bind(edges=self)

    def on_ready(self, conn: EdgeConnection) -> None:
        super().on_ready(conn)
        self._metrics.edge_ready(conn)

    def in_flight_by_edge(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for pending in self._pending.values():
            counts[pending.edge_id] = counts.get(pending.edge_id, 0) + 1
        return counts


class MeteredGateway(EdgeGateway):
    """An :class:`EdgeGateway` that times tool calls and binds the session id to the log context."""

    def __init__(self, *args: Any, metrics: ControlPlaneMetrics, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._metrics = metrics

    def _moved(self, session_id: str, move: SandboxMove) -> None:
        super()._moved(session_id, move)
        self._metrics.sandbox_moves.labels(move.from_edge_id).inc()

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
            super().execute(
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
    ) -> ToolResult:
        return await self._measured(
            session_id,
            "mcp",
            super().mcp_call(
                session_id,
                environment_id,
                server,
                tool,
                arguments,
                idempotency_key=idempotency_key,
                timeout_s=timeout_s,
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
                self.edge_for_session(session_id), tool, outcome, time.monotonic() - started
            )


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


def metrics_router(metrics: ControlPlaneMetrics, auth: Callable[..., Any] | None) -> APIRouter:
    """``GET /metrics``; ``auth`` is the API-key dependency, or None for ``metrics_public``."""
    router = APIRouter(dependencies=[Depends(auth)] if auth is not None else [])

    @router.get("/metrics", include_in_schema=False)
    async def get_metrics() -> Response:
        return Response(content=metrics.render(), media_type=CONTENT_TYPE)

    return router
