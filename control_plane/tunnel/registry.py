"""Which edges are connected, to which environment, and the requests waiting on them.

Pending requests are tracked here, per edge, not per connection: a result redelivered by an edge
after it reconnected resolves the request it answers, whichever connection carried it. A result is
taken only from the edge that was asked: one for a request sent to edge A that arrives from edge B
is dropped (and logged), and its chunks are never buffered (``expects_result``).

Draining (:meth:`EdgeRegistry.announce_drain`, shared by the gRPC and WebSocket tunnels): every
connected edge is sent a Drain, and an edge that completes its handshake afterwards is turned away
at once (Welcome, Drain, then a ``DRAINING`` error that ends the tunnel) and never becomes
available here, so it moves to its next control-plane address instead of sitting on a process that
takes no new calls.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from control_plane.tunnel.connection import EdgeConnection
from outpost_wire.errors import ErrorCode
from outpost_wire.frames import Outcome
from outpost_wire.throttle import LogThrottle

__all__ = ["EdgeRegistry", "EdgeStatus"]

log = logging.getLogger(__name__)
_wrong_edge = LogThrottle(log)  # an edge can cause these: a few lines a minute


@dataclass(frozen=True, slots=True)
class EdgeStatus:
    edge_id: str
    environment_id: str
    name: str
    peer: str
    software_version: str
    policy_digest: str
    sandbox_capacity: int
    sandboxes_in_use: int  # from the edge's latest heartbeat
    connected_at: datetime  # UTC
    draining: bool


@dataclass
class _Pending:
    edge_id: str
    future: asyncio.Future[Outcome]
    created: float = field(default_factory=time.monotonic)


class EdgeRegistry:
    """Implements :class:`~control_plane.tunnel.connection.ConnectionListener`. ``on_edge_ready``
    is told of every completed handshake (an edge turned away while draining too): the metrics
    count connections with it (:mod:`control_plane.metering`)."""

    def __init__(self, *, on_edge_ready: Callable[[EdgeConnection], None] | None = None) -> None:
        self._on_edge_ready = on_edge_ready
        self._live: dict[str, EdgeConnection] = {}
        self._connected_at: dict[str, datetime] = {}
        self._pending: dict[str, _Pending] = {}
        self._changed = asyncio.Condition()
        self.generation = 0  # counts edges connecting and disconnecting (see ``wait_changed``)
        self._drain: tuple[str, int] | None = None  # (reason, grace_ms) once draining

    # -- draining -----------------------------------------------------------------------------
    @property
    def draining(self) -> bool:
        return self._drain is not None

    def announce_drain(self, reason: str, grace_ms: int) -> None:
        """This control plane takes no new calls: tell every connected edge, and turn away the
        edges that connect from now on. Idempotent (the first announcement's reason and grace
        stand)."""
        if self._drain is not None:
            return
        self._drain = (reason, grace_ms)
        for conn in list(self._live.values()):
            conn.send_drain(reason, grace_ms)

    # -- listener -----------------------------------------------------------------------------
    def on_ready(self, conn: EdgeConnection) -> None:
        if self._on_edge_ready is not None:
            self._on_edge_ready(conn)
        if self._drain is not None:
            self._turn_away(conn, *self._drain)
            return
        old = self._live.get(conn.edge_id)
        if old is not None and old is not conn:
            log.info("edge %s reconnected; closing its previous connection", conn.edge_id)
            old.close(ErrorCode.UNAVAILABLE, "superseded by a newer connection")
        self._live[conn.edge_id] = conn
        self._connected_at[conn.edge_id] = datetime.now(UTC)
        self._notify()

    def _turn_away(self, conn: EdgeConnection, reason: str, grace_ms: int) -> None:
        """A handshake completed while draining: Drain (edges move to their next address at once
        on it, without backoff), then end the tunnel with a typed, retryable error. The edge is
        not registered, so no call, placement or status ever sees it here."""
        log.info("edge %s connected while draining; sending it to another control plane", conn.edge_id)
        conn.send_drain(reason, grace_ms)
        conn.close(ErrorCode.DRAINING, f"{reason}: connect to another control-plane address")

    def expects_result(self, conn: EdgeConnection, request_id: str) -> bool:
        pending = self._pending.get(request_id)
        if pending is None or pending.future.done():
            return False
        if pending.edge_id != conn.edge_id:
            _wrong_edge.warning(
                "wrong-edge",
                "edge %s sent a result for %s, a request sent to edge %s; dropped",
                conn.edge_id,
                request_id,
                pending.edge_id,
            )
            return False
        return True

    def on_result(self, conn: EdgeConnection, request_id: str, outcome: Outcome) -> None:
        pending = self._pending.get(request_id)
        if pending is None or pending.future.done():
            log.debug("result for %s arrived after it was settled; ignored", request_id)
            return
        if pending.edge_id != conn.edge_id:  # expects_result dropped its chunks already; defence in depth
            log.warning(
                "edge %s answered %s, a request sent to edge %s; dropped",
                conn.edge_id,
                request_id,
                pending.edge_id,
            )
            return
        pending.future.set_result(outcome)

    def on_closed(self, conn: EdgeConnection) -> None:
        if self._live.get(conn.edge_id) is conn:
            del self._live[conn.edge_id]
            log.info("edge %s disconnected (%s)", conn.edge_id, conn.close_reason or "stream ended")
        self._notify()

    def _notify(self) -> None:
        self.generation += 1

        async def notify() -> None:
            async with self._changed:
                self._changed.notify_all()

        asyncio.get_running_loop().create_task(notify())

    # -- queries ------------------------------------------------------------------------------
    def get(self, edge_id: str) -> EdgeConnection | None:
        conn = self._live.get(edge_id)
        return conn if conn is not None and conn.is_open else None

    def in_flight_by_edge(self) -> dict[str, int]:
        """Requests sent to (or held for) each edge and not answered yet."""
        counts: dict[str, int] = {}
        for pending in self._pending.values():
            counts[pending.edge_id] = counts.get(pending.edge_id, 0) + 1
        return counts

    def for_environment(self, environment_id: str) -> list[EdgeConnection]:
        return [c for c in self._live.values() if c.environment_id == environment_id and c.is_open]

    def statuses(self) -> list[EdgeStatus]:
        out = []
        for conn in self._live.values():
            hello = conn.hello
            out.append(
                EdgeStatus(
                    edge_id=conn.edge_id,
                    environment_id=conn.environment_id,
                    name=conn.edge.name,
                    peer=conn.peer,
                    software_version=hello.software_version if hello else "",
                    policy_digest=hello.policy_digest if hello else "",
                    sandbox_capacity=hello.sandbox_capacity if hello else 0,
                    sandboxes_in_use=conn.sandboxes_in_use,
                    connected_at=self._connected_at.get(conn.edge_id) or datetime.now(UTC),
                    draining=conn.draining,
                )
            )
        return out

    async def wait_for(self, edge_id: str, timeout_s: float) -> EdgeConnection | None:
        """The edge's live connection, waiting up to ``timeout_s`` for it to (re)connect."""
        try:
            async with asyncio.timeout(timeout_s), self._changed:
                await self._changed.wait_for(lambda: self.get(edge_id) is not None)
        except TimeoutError:
            return None
        return self.get(edge_id)

    async def wait_changed(self, seen: int, timeout_s: float) -> None:
        """Return once ``generation`` differs from ``seen`` (an edge connected or disconnected since
        the caller looked), or after ``timeout_s``."""
        try:
            async with asyncio.timeout(timeout_s), self._changed:
                await self._changed.wait_for(lambda: self.generation != seen)
        except TimeoutError:
            return

    async def wait_for_environment(self, environment_id: str, timeout_s: float) -> list[EdgeConnection]:
        try:
            async with asyncio.timeout(timeout_s), self._changed:
                await self._changed.wait_for(lambda: bool(self.for_environment(environment_id)))
        except TimeoutError:
            return []
        return self.for_environment(environment_id)

    def disconnect(self, edge_id: str, code: ErrorCode, reason: str) -> bool:
        conn = self._live.get(edge_id)
        if conn is None:
            return False
        conn.close(code, reason)
        return True

    def all_connections(self) -> list[EdgeConnection]:
        return list(self._live.values())

    # -- pending requests ---------------------------------------------------------------------
    def track(self, request_id: str, edge_id: str) -> asyncio.Future[Outcome]:
        pending = self._pending.get(request_id)
        if pending is None:
            pending = _Pending(edge_id, asyncio.get_running_loop().create_future())
            self._pending[request_id] = pending
        return pending.future

    def forget(self, request_id: str) -> None:
        self._pending.pop(request_id, None)
        if not self._pending:
            self._notify()

    async def wait_no_pending(self, timeout_s: float) -> bool:
        """Wait until no request is waiting on an edge (for a graceful drain)."""
        try:
            async with asyncio.timeout(timeout_s), self._changed:
                await self._changed.wait_for(lambda: not self._pending)
        except TimeoutError:
            return False
        return True

    @property
    def pending_count(self) -> int:
        return len(self._pending)
