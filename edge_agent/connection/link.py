"""The edge's link to the control plane: dial out, handshake, serve requests, reconnect.

One :class:`~outpost_wire.session.TunnelSession` (EDGE role) lives as long as the link, across
reconnects, so results that finished while the link was down stay in its outbox and are
redelivered after the next handshake. Requests run as tasks that outlive a connection: a call in
flight when the link drops keeps running, and its result goes out on the next connection.

State machine (transitions in ``_TRANSITIONS``; anything else is a bug and raises)::

    IDLE ─► CONNECTING ─► HANDSHAKING ─► CONNECTED ─► BACKING_OFF ─► CONNECTING ...
                                              (no delay, next address, after the peer drained)
                 │              │             │
                 └──────────────┴─────────────┴──► BACKING_OFF     (failure at any step)
    any ─► DRAINING ─► STOPPED                                      (SIGTERM: drain, then stop)
    CONNECTING, HANDSHAKING, CONNECTED ─► REFUSED                   (terminal: see below)

REFUSED: the control plane refused this edge's identity for a final reason (revoked, unknown
edge, ...: :mod:`outpost_wire.admission`), at connect time or by cutting a live tunnel. Retrying
cannot help, so the link stops, logs it once, and keeps the reason in ``refusal``; the daemon
exits with code 3 (systemd's ``RestartPreventExitStatus=3`` keeps it stopped). Any other failure,
a draining or overloaded control plane included, is retried with backoff.

When the control plane drains (a Drain frame; one that is already draining sends it right after
Welcome), ``on_peer_drain`` says whether another control-plane address is worth dialling at once.
If so the link leaves as soon as its calls in flight have answered and their results are acked
(at once when idle) and reconnects without delay and without growing the backoff: a drain is not
a failure. If not (a single address, or every address drained this edge recently) it stays until
the control plane closes the tunnel, then reconnects after the usual backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from edge_agent.connection.backoff import Backoff
from edge_agent.connection.transport import Transport, TransportError
from outpost_wire.admission import final_refusal
from outpost_wire.errors import ErrorCode, OutpostError
from outpost_wire.frames import Failure, Hello, Outcome, Request
from outpost_wire.session import (
    CancelReceived,
    ConnState,
    DrainReceived,
    PeerDead,
    PeerError,
    ProtocolError,
    RequestReceived,
    Role,
    SessionConfig,
    TunnelSession,
    WelcomeReceived,
)
from outpost_wire.timer import SessionTimer

if TYPE_CHECKING:  # config imports the MCP package, which uses this package's backoff
    from edge_agent.config import ConnectionConfig

__all__ = ["Link", "LinkState", "RequestHandler"]

log = logging.getLogger(__name__)


class RequestHandler(Protocol):
    async def handle(self, request: Request) -> Outcome: ...

    def cancel(self, request_id: str) -> bool: ...


class LinkState(enum.Enum):
    IDLE = "idle"
    CONNECTING = "connecting"
    HANDSHAKING = "handshaking"
    CONNECTED = "connected"
    BACKING_OFF = "backing_off"
    DRAINING = "draining"
    STOPPED = "stopped"
    REFUSED = "refused"  # terminal: the control plane refuses this edge for good


_S = LinkState
_TRANSITIONS: dict[LinkState, frozenset[LinkState]] = {
    _S.IDLE: frozenset({_S.CONNECTING, _S.DRAINING, _S.STOPPED}),
    _S.CONNECTING: frozenset({_S.HANDSHAKING, _S.BACKING_OFF, _S.DRAINING, _S.REFUSED}),
    _S.HANDSHAKING: frozenset({_S.CONNECTED, _S.BACKING_OFF, _S.DRAINING, _S.REFUSED}),
    _S.CONNECTED: frozenset({_S.BACKING_OFF, _S.DRAINING, _S.REFUSED}),
    _S.BACKING_OFF: frozenset({_S.CONNECTING, _S.DRAINING}),
    _S.DRAINING: frozenset({_S.STOPPED, _S.DRAINING}),
    _S.STOPPED: frozenset(),
    _S.REFUSED: frozenset(),
}


class Link:
    def __init__(
        self,
        *,
        connect: Callable[[], Awaitable[Transport]],
        hello: Callable[[], Hello],
        handler: RequestHandler,
        config: ConnectionConfig,
        session_config: SessionConfig,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        on_peer_drain: Callable[[], bool | None] | None = None,
        sandboxes_in_use: Callable[[], int] | None = None,
    ) -> None:
        """``on_peer_drain``: called once when the control plane announces a drain; the dialer
        moves on to another control-plane address (``Dialer.rotate``) and returns whether that one
        is worth dialling at once (``None`` counts as yes). Without it, the link waits for the
        control plane to close the tunnel and reconnects after the usual backoff.
        ``sandboxes_in_use``: read after every request and timer tick, so that each heartbeat
        reports the edge's live sandboxes (the control plane places new sessions by it)."""
        self._sandboxes_in_use = sandboxes_in_use
        self._connect = connect
        self._on_peer_drain = on_peer_drain
        self._hello = hello
        self._handler = handler
        self._config = config
        self._clock = clock
        self._backoff = Backoff(config.backoff_initial_s, config.backoff_max_s, rng)
        self.session = TunnelSession(Role.EDGE, session_config)
        self.state = LinkState.IDLE
        self.connected = asyncio.Event()  # set while a handshake-complete tunnel is up
        self.connections = 0  # completed handshakes, for metrics and tests
        self.last_error: str | None = None
        #: Why the control plane refuses this edge for good (``revoked``, ``unknown_edge``, ...);
        #: set when the link enters REFUSED.
        self.refusal: str | None = None
        self.since = time.time()  # wall clock: when the tunnel last went up or down (for status)
        self.control_plane_id: str | None = None  # the control plane of the last handshake
        self._transport: Transport | None = None
        self._wake_writer = asyncio.Event()
        self._changed = asyncio.Event()  # something finished: a request, an ack, a connection
        self._tasks: set[asyncio.Task[None]] = set()
        self._requests: set[asyncio.Task[None]] = set()  # requests being served (a subset of _tasks)
        self._peer_draining = False  # this connection's control plane announced a drain
        self._move_at_once = False  # ... and another address is worth dialling at once
        self._leaving = False  # we are closing this connection ourselves (it drained)

    # -- state --------------------------------------------------------------------------------
    def _to(self, new: LinkState) -> None:
        if new not in _TRANSITIONS[self.state]:
            raise RuntimeError(f"link: illegal transition {self.state.value} -> {new.value}")
        self.state = new

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    # -- main loop ----------------------------------------------------------------------------
    async def run(self) -> None:
        """Connect and serve until :meth:`drain` stops the link."""
        while not self._stopping():
            self._to(LinkState.CONNECTING)
            try:
                transport = await self._connect()
            except TransportError as exc:
                self._note_failure(exc)
            else:
                if self._stopping():  # drain() ran while we were dialling
                    await transport.close()
                    break
                started = self._clock()
                await self._serve(transport)
                if self._clock() - started >= self._config.stable_after_s:
                    self._backoff.reset()
            if self._stopping():
                break
            self._to(LinkState.BACKING_OFF)
            # Moving off a draining control plane is not a failure: no delay, backoff untouched.
            delay = 0.0 if self._peer_draining and self._move_at_once else self._backoff.next_delay()
            self._peer_draining = self._move_at_once = False
            log.info("reconnecting in %.2f s (attempt %d)", delay, self._backoff.attempt)
            await asyncio.sleep(delay)

    def _stopping(self) -> bool:
        return self.state in (LinkState.DRAINING, LinkState.STOPPED, LinkState.REFUSED)

    def _note_failure(self, exc: TransportError) -> None:
        if self.refusal is not None:
            return  # refused for good already: what follows is the same refusal, or its echo
        self.last_error = str(exc)
        if exc.refusal is not None:
            self._refused(exc.refusal, str(exc))
        elif exc.unauthenticated:
            log.error(
                "control plane refused this edge's identity: %s (retrying: check this host's clock)", exc
            )
        else:
            log.warning("%s", exc)

    def _refused(self, reason: str, detail: str) -> None:
        """A final refusal: stop for good (once; a refusal during a drain only records it)."""
        if self.refusal is not None:
            return
        self.refusal = reason
        self.last_error = detail
        log.error(
            "the control plane refuses this edge for good (%s): not reconnecting; enroll it again "
            "with a new token (outpost-edge register --force)",
            reason.replace("_", " "),
        )
        if LinkState.REFUSED in _TRANSITIONS[self.state]:
            self._to(LinkState.REFUSED)
        self._close_transport()

    async def _serve(self, transport: Transport) -> None:
        self._transport = transport
        self._leaving = False
        self._to(LinkState.HANDSHAKING)
        self.session.connection_made(self._clock())
        self.session.send_hello(self._hello())
        timer = SessionTimer(self.session, self._process_events, name="link-timer", clock=self._clock)
        writer = asyncio.create_task(self._writer(transport, timer), name="link-writer")
        timer.start()
        self._wake_writer.set()
        try:
            while True:
                data = await transport.receive()
                if data is None:
                    if not self._leaving:
                        log.info("control plane closed the tunnel")
                    break
                self.session.receive_data(data, self._clock())
                self._process_events()
                timer.poke()  # the handshake's end, say, brings the next deadline forward
                if self.session.state is ConnState.CLOSED:
                    break
        except TransportError as exc:
            if self._leaving:
                log.debug("tunnel closed as we left: %s", exc)
            else:
                self._note_failure(exc)
        finally:
            if self.connected.is_set():
                self.since = time.time()
            self.connected.clear()
            await timer.close()
            # Let the writer push out what is queued (an error frame, say), then stop it.
            self._wake_writer.set()
            await asyncio.sleep(0)
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)
            await transport.close()
            self._transport = None
            self.session.connection_lost()
            self._changed.set()

    async def _writer(self, transport: Transport, timer: SessionTimer) -> None:
        while True:
            await self._wake_writer.wait()
            self._wake_writer.clear()
            for data in self.session.data_to_send():
                try:
                    await transport.send(data)
                except TransportError as exc:
                    # Unacked results stay in the session's outbox and go out after reconnect.
                    log.debug("send failed: %s", exc)
                    if exc.refusal is not None:  # refused for good: the reader may not hear it
                        self._note_failure(exc)
                    await transport.close()
                    return
            timer.poke()  # after frames went out the next heartbeat is due later, never earlier

    def _report_sandboxes(self) -> None:
        if self._sandboxes_in_use is not None:
            self.session.sandboxes_in_use = self._sandboxes_in_use()

    def _process_events(self) -> None:
        self._report_sandboxes()  # runs after every tick: the next heartbeat carries it
        for event in self.session.events_received():
            if isinstance(event, WelcomeReceived):
                if self.state is LinkState.HANDSHAKING:
                    self._to(LinkState.CONNECTED)
                self.connections += 1
                self.since = time.time()
                self.control_plane_id = event.welcome.control_plane_id
                self.connected.set()
                log.info(
                    "tunnel up to control plane %s (protocol %d)",
                    event.welcome.control_plane_id,
                    event.welcome.protocol_version,
                )
            elif isinstance(event, RequestReceived):
                self._start_request(event.request)
            elif isinstance(event, CancelReceived):
                self._handler.cancel(event.request_id)
            elif isinstance(event, DrainReceived):
                self._peer_drained(event.reason)
            elif isinstance(event, PeerDead):
                log.warning("no heartbeat from the control plane; dropping the tunnel")
                self._close_transport()
            elif (
                isinstance(event, PeerError)
                and event.code is ErrorCode.UNAUTHENTICATED
                and (reason := final_refusal(event.message)) is not None
            ):
                # A live tunnel cut because the edge was revoked: final.
                self._refused(reason, f"control plane closed the tunnel: {event.code.name}: {event.message}")
            elif isinstance(event, PeerError) and event.code is ErrorCode.DRAINING:
                # A control plane that was already draining when we connected turns us away.
                self._peer_drained(event.message)
                self._leaving = True
                self._close_transport()
            elif isinstance(event, ProtocolError | PeerError):
                log.error("tunnel protocol error %s: %s", event.code.value, event.message)
                self._close_transport()
        self._leave_if_drained()
        self._changed.set()
        self._wake_writer.set()

    def _peer_drained(self, reason: str) -> None:
        """The control plane takes no new calls: pick the address to move to (once per connection)."""
        if self._peer_draining:
            return
        self._peer_draining = True
        moved = self._on_peer_drain() if self._on_peer_drain is not None else False
        self._move_at_once = moved is not False
        if self._move_at_once:
            log.info(
                "control plane is draining (%s); moving to another address once calls in flight answered",
                reason,
            )
        else:
            log.info(
                "control plane is draining (%s); no other address to move to at once: staying until it "
                "closes the tunnel",
                reason,
            )

    def _leave_if_drained(self) -> None:
        """Leave a draining control plane once nothing is owed on this connection: no request
        running, every result acknowledged (results of requests still running when we left would
        be redelivered elsewhere, but a control plane that is draining waits for them here)."""
        if (
            not self._peer_draining
            or not self._move_at_once
            or self._leaving
            or self._transport is None
            or self._requests
            or self.session.unacked_results()
        ):
            return
        log.info("leaving the draining control plane")
        self._leaving = True
        self._close_transport()

    def _close_transport(self) -> None:
        if self._transport is not None:
            transport = self._transport
            task = asyncio.create_task(transport.close())
            self._tasks_keepalive(task)

    def _tasks_keepalive(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _start_request(self, request: Request) -> None:
        if self.state is LinkState.DRAINING:
            self.session.send_result(
                request.request_id, Failure(ErrorCode.DRAINING, "the edge is shutting down")
            )
            return
        task = asyncio.create_task(self._serve_request(request), name=f"req-{request.request_id}")
        self._tasks_keepalive(task)
        self._requests.add(task)
        task.add_done_callback(self._request_done)

    def _request_done(self, task: asyncio.Task[None]) -> None:
        self._requests.discard(task)
        self._report_sandboxes()  # a request makes and destroys sandboxes
        self._leave_if_drained()  # its result is acked already if the ack beat this callback

    async def _serve_request(self, request: Request) -> None:
        try:
            outcome = await self._handler.handle(request)
        except asyncio.CancelledError:
            outcome = Failure(ErrorCode.CANCELLED, "cancelled")
        self.session.send_result(request.request_id, outcome)
        self._changed.set()
        self._wake_writer.set()

    def send_catalog(self, digest: str, catalog_json: str) -> None:
        """Advertise a changed MCP catalog now if the tunnel is up (otherwise the next hello
        carries it)."""
        if not self.connected.is_set():
            return
        try:
            self.session.send_catalog(digest, catalog_json)
        except OutpostError as exc:
            log.warning("could not advertise the MCP catalog: %s", exc)
            return
        self._wake_writer.set()

    # -- shutdown -----------------------------------------------------------------------------
    async def drain(self, grace_s: float) -> None:
        """Stop taking requests, let in-flight ones finish and their results be acknowledged
        (within ``grace_s``), then stop. Idempotent."""
        if self.state in (LinkState.STOPPED, LinkState.REFUSED):
            for task in list(self._tasks):  # refused: results can go nowhere any more
                task.cancel()
            return
        if self.state is not LinkState.DRAINING:
            was_connected = self.connected.is_set()
            self._to(LinkState.DRAINING)
            if was_connected:
                self.session.send_drain("edge agent shutting down", int(grace_s * 1000))
                self._wake_writer.set()
        deadline = self._clock() + grace_s
        while self._busy() and self._clock() < deadline:
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=max(0.01, deadline - self._clock()))
        if self._busy() and grace_s > 0:
            log.warning(
                "drain grace period over with %d call(s) in flight and %d result(s) unacknowledged",
                len(self._tasks),
                len(self.session.unacked_results()),
            )
        self._to(LinkState.STOPPED)
        for task in list(self._tasks):
            task.cancel()
        if self._transport is not None:
            await self._transport.close()

    def _busy(self) -> bool:
        return bool(self._tasks) or (bool(self.session.unacked_results()) and self.connected.is_set())
