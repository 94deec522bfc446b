"""The tunnel protocol core: a sans-I/O state machine for one side of the tunnel.

A :class:`TunnelSession` owns no socket, task or clock. A transport (gRPC, WebSocket) feeds it what
happens and pumps out what it produced::

    transport                          TunnelSession
    ─────────                          ─────────────
    stream opened        ──────────►  connection_made(now)
    message received     ──────────►  receive_data(data, now)
    timer fired          ──────────►  tick(now)          (schedule with next_timer(now))
    stream ended         ──────────►  connection_lost()
    write these          ◄──────────  data_to_send()     (encoded frames, in order)
    react to these       ◄──────────  events_received()  (RequestReceived, ResultReceived, ...)

Connection states and the inputs that move between them (an input missing from
``_TRANSITIONS`` raises :class:`~outpost_wire.errors.ProtocolViolation`)::

    DISCONNECTED ──made──► HANDSHAKING ──handshake done──► OPEN ──drain──► DRAINING
         ▲                      │                           │                 │
         │                      └──────── close / protocol error / peer dead ─┴──► CLOSED
         └───────────────────────────── connection lost (from any state) ◄────────────┘

The handshake: the EDGE sends Hello; the CONTROL side emits HelloReceived, and its caller either
``send_welcome`` (both sides are then OPEN) or ``close`` (e.g. UNAUTHENTICATED). Before OPEN only
Hello, Welcome and ErrorFrame may arrive. Which frame each role may receive in which state is the
table ``_RECEIVABLE``.

MCP catalog: the EDGE announces its catalog in Hello (``mcp_catalog_digest`` / ``mcp_catalog_json``)
and, whenever it changes while OPEN or DRAINING, with ``send_catalog``; the CONTROL side emits
CatalogReceived for each CatalogUpdate. The session only carries the JSON text, it never parses it.

Bad input never raises out of :meth:`TunnelSession.receive_data`: an oversized or malformed frame
or a protocol violation queues an ErrorFrame for the peer, emits :class:`ProtocolError` and moves
to CLOSED; the transport flushes ``data_to_send()`` and ends the stream.

Results are at-least-once. The EDGE serializes an outcome, splits it into ResultChunk frames that
fit ``max_frame_bytes``, and keeps it in an outbox until the CONTROL side acks it. The EDGE session
object is reused across reconnects: the outbox survives ``connection_lost`` and is re-sent as soon
as the next Welcome arrives. The CONTROL side reassembles chunks per request id (results of
different requests may interleave chunk by chunk; within one request the indexes must run 0, 1, 2,
...), emits ResultReceived for every complete result (duplicates included: deduplication belongs
to the caller, which knows the idempotency keys) and always acks.

What the CONTROL side buffers is bounded, because an authenticated edge is still not trusted with
the control plane's memory: chunks are reassembled only for request ids the caller says it awaits
from this peer (``expects_result``; the control plane: requests pending on this edge). Chunks of
any other id are dropped unbuffered (counted in ``dropped_result_chunks``; the last one is still
acked, so an honest edge's outbox empties) and emit no event. Across all request ids, partial
results may hold at most ``max_reassembly_bytes``; past that the session fails with
FRAME_TOO_LARGE and closes. Without ``expects_result`` every id is awaited (tests and tools that
play a control plane).

Time: methods that depend on time take ``now`` (monotonic seconds). Methods that queue a frame
without a ``now`` argument stamp it with the latest ``now`` the session was given, a lower bound of
the real send time, so a heartbeat is never late. A heartbeat goes out when nothing else was sent
for the heartbeat interval (the EDGE uses the shorter of its own and the one announced in Welcome);
the peer is declared dead (PeerDead, CLOSED) when nothing arrived for ``heartbeat_timeout_s``,
during the handshake too.
"""

from __future__ import annotations

import contextlib
import enum
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from outpost_wire.codec import decode_frame, decode_outcome, encode_frame, encode_outcome, max_chunk_payload
from outpost_wire.errors import ErrorCode, FrameTooLarge, ProtocolViolation, WireError
from outpost_wire.frames import (
    PROTOCOL_VERSION,
    Ack,
    Cancel,
    CatalogUpdate,
    Drain,
    ErrorFrame,
    Frame,
    Heartbeat,
    Hello,
    Outcome,
    Request,
    ResultChunk,
    Welcome,
)
from outpost_wire.tunnel_events import (
    CancelReceived,
    CatalogReceived,
    DrainReceived,
    Event,
    HelloReceived,
    PeerDead,
    PeerError,
    ProtocolError,
    RequestReceived,
    ResultReceived,
    WelcomeReceived,
)

__all__ = [
    "CancelReceived",
    "CatalogReceived",
    "ConnState",
    "DrainReceived",
    "Event",
    "HelloReceived",
    "PeerDead",
    "PeerError",
    "ProtocolError",
    "RequestReceived",
    "ResultReceived",
    "Role",
    "SessionConfig",
    "TunnelSession",
    "WelcomeReceived",
]

_MAX_ERROR_MESSAGE_CHARS: Final = 1024


@dataclass(frozen=True, slots=True)
class SessionConfig:
    max_frame_bytes: int = 4 * 1024 * 1024
    heartbeat_interval_s: float = 10.0
    heartbeat_timeout_s: float = 30.0
    max_result_bytes: int = 64 * 1024 * 1024
    """Cap on one serialized outcome: the EDGE refuses to send more, the CONTROL side to reassemble."""
    max_reassembly_bytes: int = 256 * 1024 * 1024
    """CONTROL: cap on the partial results held for one connection, all request ids together."""

    def __post_init__(self) -> None:
        names = (
            "max_frame_bytes",
            "heartbeat_interval_s",
            "heartbeat_timeout_s",
            "max_result_bytes",
            "max_reassembly_bytes",
        )
        for name in names:
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"SessionConfig.{name} must be a positive number, got {value!r}")
        if self.max_reassembly_bytes < self.max_result_bytes:
            raise ValueError(
                f"SessionConfig.max_reassembly_bytes ({self.max_reassembly_bytes}) must be at least "
                f"max_result_bytes ({self.max_result_bytes})"
            )


class Role(enum.Enum):
    CONTROL = "control"
    EDGE = "edge"


class ConnState(enum.Enum):
    DISCONNECTED = "disconnected"
    HANDSHAKING = "handshaking"
    OPEN = "open"
    DRAINING = "draining"
    CLOSED = "closed"


# --- tables --------------------------------------------------------------------------------------


class _Input(enum.Enum):
    CONNECTION_MADE = "connection made"
    HANDSHAKE_DONE = "handshake done"
    DRAIN = "drain"
    CLOSE = "close"
    CONNECTION_LOST = "connection lost"


_S = ConnState
_I = _Input
_TRANSITIONS: Final[Mapping[tuple[ConnState, _Input], ConnState]] = {
    (_S.DISCONNECTED, _I.CONNECTION_MADE): _S.HANDSHAKING,
    (_S.DISCONNECTED, _I.CLOSE): _S.CLOSED,
    (_S.DISCONNECTED, _I.CONNECTION_LOST): _S.DISCONNECTED,
    (_S.HANDSHAKING, _I.HANDSHAKE_DONE): _S.OPEN,
    (_S.HANDSHAKING, _I.CLOSE): _S.CLOSED,
    (_S.HANDSHAKING, _I.CONNECTION_LOST): _S.DISCONNECTED,
    (_S.OPEN, _I.DRAIN): _S.DRAINING,
    (_S.OPEN, _I.CLOSE): _S.CLOSED,
    (_S.OPEN, _I.CONNECTION_LOST): _S.DISCONNECTED,
    (_S.DRAINING, _I.DRAIN): _S.DRAINING,
    (_S.DRAINING, _I.CLOSE): _S.CLOSED,
    (_S.DRAINING, _I.CONNECTION_LOST): _S.DISCONNECTED,
    (_S.CLOSED, _I.CLOSE): _S.CLOSED,
    (_S.CLOSED, _I.CONNECTION_LOST): _S.DISCONNECTED,
}

_CONNECTED: Final = frozenset({_S.HANDSHAKING, _S.OPEN, _S.DRAINING})
_LIVE: Final = frozenset({_S.OPEN, _S.DRAINING})

# Which frame types each role accepts, and in which states. Anything else is a protocol violation.
_RECEIVABLE: Final[Mapping[Role, Mapping[type[Frame], frozenset[ConnState]]]] = {
    Role.CONTROL: {
        Hello: frozenset({_S.HANDSHAKING}),
        Heartbeat: _LIVE,
        ResultChunk: _LIVE,
        CatalogUpdate: _LIVE,
        Drain: _LIVE,
        ErrorFrame: _CONNECTED,
    },
    Role.EDGE: {
        Welcome: frozenset({_S.HANDSHAKING}),
        Heartbeat: _LIVE,
        Request: _LIVE,  # DRAINING too: a request may cross our Drain; the caller answers DRAINING
        Cancel: _LIVE,
        Ack: _LIVE,
        Drain: _LIVE,
        ErrorFrame: _CONNECTED,
    },
}


class _Reassembly:
    """The chunks of one result received so far (CONTROL side)."""

    __slots__ = ("parts", "size")

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0


# --- the session ---------------------------------------------------------------------------------


class TunnelSession:
    """One side (``role``) of the tunnel protocol; see the module docstring."""

    def __init__(
        self, role: Role, config: SessionConfig, *, expects_result: Callable[[str], bool] | None = None
    ) -> None:
        """``expects_result(request_id)`` (CONTROL): whether a result for that id is awaited from
        this peer; chunks of other ids are dropped unbuffered. ``None``: every id is awaited."""
        self._role = role
        self._config = config
        self._expects_result = expects_result
        self._state = ConnState.DISCONNECTED
        self._outgoing: list[bytes] = []
        self._events: list[Event] = []
        self._peer_hello: Hello | None = None
        self._peer_welcome: Welcome | None = None
        self._last_peer_heartbeat: Heartbeat | None = None
        self._hello_sent = False
        self._clock = 0.0  # the latest `now` we were given
        self._last_sent_at = 0.0
        self._last_received_at = 0.0
        self._heartbeat_seq = 0
        self._reassembly: dict[str, _Reassembly] = {}  # CONTROL: partial results by request id
        self._reassembly_bytes = 0  # CONTROL: their sizes together (max_reassembly_bytes)
        self.dropped_result_chunks = 0
        """CONTROL: chunks dropped unbuffered because no result was awaited for their id."""
        self._outbox: dict[str, bytes] = {}  # EDGE: encoded outcomes awaiting an Ack
        self.sandboxes_in_use = 0
        """EDGE: reported in outgoing heartbeats; the caller keeps it current."""

    # --- introspection ---

    @property
    def role(self) -> Role:
        return self._role

    @property
    def config(self) -> SessionConfig:
        return self._config

    @property
    def state(self) -> ConnState:
        return self._state

    @property
    def peer_hello(self) -> Hello | None:
        """CONTROL: the Hello of the current connection, once received."""
        return self._peer_hello

    @property
    def peer_welcome(self) -> Welcome | None:
        """EDGE: the Welcome of the current connection, once received."""
        return self._peer_welcome

    @property
    def last_peer_heartbeat(self) -> Heartbeat | None:
        """The latest Heartbeat from the peer on this connection (carries its sandboxes_in_use)."""
        return self._last_peer_heartbeat

    @property
    def heartbeat_interval_s(self) -> float:
        """How long we stay silent before sending a Heartbeat."""
        interval = self._config.heartbeat_interval_s
        if self._peer_welcome is not None:
            interval = min(interval, self._peer_welcome.heartbeat_interval_s)
        return interval

    @property
    def reassembly_bytes(self) -> int:
        """CONTROL: bytes of partial results held now, all request ids together."""
        return self._reassembly_bytes

    def unacked_results(self) -> list[str]:
        """EDGE: request ids whose results were not acked yet, oldest first."""
        return list(self._outbox)

    # --- transport side ---

    def connection_made(self, now: float) -> None:
        """A transport is up; the handshake starts (the EDGE caller sends Hello next)."""
        self._transition(_Input.CONNECTION_MADE)
        self._clock = self._last_sent_at = self._last_received_at = now

    def connection_lost(self) -> None:
        """The transport is gone. Unsent frames and partial results are dropped; the outbox stays."""
        self._transition(_Input.CONNECTION_LOST)
        self._outgoing.clear()
        self._drop_partials()
        self._peer_hello = self._peer_welcome = self._last_peer_heartbeat = None
        self._hello_sent = False

    def receive_data(self, data: bytes, now: float) -> None:
        """Handle the bytes of one frame. Never raises for bad input (see the module docstring)."""
        if self._state is ConnState.CLOSED:
            return  # frames still in flight while the transport tears down
        if self._state is ConnState.DISCONNECTED:
            raise ProtocolViolation("receive_data() before connection_made()")
        self._clock = self._last_received_at = now
        try:
            self._handle(decode_frame(data, self._config.max_frame_bytes))
        except (WireError, ProtocolViolation) as exc:
            self._fail(exc.code, str(exc))

    def data_to_send(self) -> list[bytes]:
        """Encoded frames to write, in order; the queue is emptied."""
        out, self._outgoing = self._outgoing, []
        return out

    def events_received(self) -> list[Event]:
        """Events since the last call, in order; the queue is emptied."""
        out, self._events = self._events, []
        return out

    def tick(self, now: float) -> None:
        """Send a heartbeat if we were silent too long; declare the peer dead if it was."""
        self._clock = now
        if self._state not in _CONNECTED:
            return
        if now - self._last_received_at >= self._config.heartbeat_timeout_s:
            self._transition(_Input.CLOSE)
            self._drop_partials()
            self._events.append(PeerDead())
            return
        if self._state in _LIVE and now - self._last_sent_at >= self.heartbeat_interval_s:
            self._heartbeat_seq += 1
            self._queue(Heartbeat(self._heartbeat_seq, int(now * 1000), self.sandboxes_in_use))

    def next_timer(self, now: float) -> float:
        """The absolute time at which :meth:`tick` should next run (``inf``: no timer needed)."""
        if self._state not in _CONNECTED:
            return math.inf
        deadline = self._last_received_at + self._config.heartbeat_timeout_s
        if self._state in _LIVE:
            deadline = min(deadline, self._last_sent_at + self.heartbeat_interval_s)
        return max(deadline, now)

    def close(self, code: ErrorCode | None = None, message: str = "") -> None:
        """Move to CLOSED, first queueing an ErrorFrame for the peer if ``code`` is given."""
        if code is not None and self._state in _CONNECTED:
            self._queue_error(code, message)
        self._transition(_Input.CLOSE)
        self._drop_partials()

    # --- sending ---

    def send_hello(self, hello: Hello) -> None:
        """EDGE, right after connection_made."""
        self._require(Role.EDGE, {ConnState.HANDSHAKING}, "send Hello")
        if self._hello_sent:
            raise ProtocolViolation("Hello already sent on this connection")
        self._queue(hello)
        self._hello_sent = True

    def send_welcome(self, welcome: Welcome) -> None:
        """CONTROL, after HelloReceived: accept the edge; the session is OPEN."""
        self._require(Role.CONTROL, {ConnState.HANDSHAKING}, "send Welcome")
        if self._peer_hello is None:
            raise ProtocolViolation("cannot send Welcome before receiving Hello")
        self._queue(welcome)
        self._transition(_Input.HANDSHAKE_DONE)

    def send_request(self, request: Request) -> None:
        """CONTROL, only while OPEN (not once either side has announced Drain)."""
        self._require(Role.CONTROL, {ConnState.OPEN}, "send a Request")
        self._queue(request)

    def send_cancel(self, request_id: str) -> None:
        self._require(Role.CONTROL, _LIVE, "send Cancel")
        self._queue(Cancel(request_id))

    def send_drain(self, reason: str, grace_ms: int) -> None:
        """Either side: announce that we take no new requests. The session moves to DRAINING."""
        self._require(self._role, _LIVE, "send Drain")
        self._queue(Drain(reason, grace_ms))
        self._transition(_Input.DRAIN)

    def send_catalog(self, digest: str, catalog_json: str) -> None:
        """EDGE, while OPEN or DRAINING: announce that the MCP catalog is now ``catalog_json``.

        Raises :class:`FrameTooLarge` if the CatalogUpdate frame exceeds ``max_frame_bytes``.
        """
        self._require(Role.EDGE, _LIVE, "send CatalogUpdate")
        self._queue(CatalogUpdate(digest, catalog_json))

    def send_result(self, request_id: str, outcome: Outcome) -> None:
        """EDGE: deliver ``outcome`` now if the link is up, and keep it until the peer acks it.

        Raises :class:`FrameTooLarge` if the serialized outcome exceeds ``max_result_bytes`` (the
        caller should answer with a smaller result or a Failure instead).
        """
        if self._role is not Role.EDGE:
            raise ProtocolViolation("only the EDGE sends results")
        if not request_id:
            raise ValueError("request_id must not be empty")
        data = encode_outcome(outcome)
        if len(data) > self._config.max_result_bytes:
            raise FrameTooLarge(
                f"result of {len(data)} bytes exceeds max_result_bytes={self._config.max_result_bytes}"
            )
        max_chunk_payload(request_id, self._config.max_frame_bytes)  # fail now, not at redelivery
        self._outbox.pop(request_id, None)
        self._outbox[request_id] = data
        if self._state in _LIVE:
            self._queue_chunks(request_id, data)

    # --- internals ---

    def _transition(self, event: _Input) -> None:
        try:
            self._state = _TRANSITIONS[(self._state, event)]
        except KeyError:
            message = f"illegal transition: {event.value} in state {self._state.name}"
            raise ProtocolViolation(message) from None

    def _require(self, role: Role, states: Iterable[ConnState], action: str) -> None:
        if self._role is not role:
            raise ProtocolViolation(f"the {self._role.name} side cannot {action}")
        if self._state not in states:
            raise ProtocolViolation(f"cannot {action} in state {self._state.name}")

    def _queue(self, frame: Frame) -> None:
        self._outgoing.append(encode_frame(frame, self._config.max_frame_bytes))
        self._last_sent_at = self._clock

    def _queue_chunks(self, request_id: str, data: bytes) -> None:
        step = max_chunk_payload(request_id, self._config.max_frame_bytes)
        count = max(1, -(-len(data) // step))
        for index in range(count):
            piece = data[index * step : (index + 1) * step]
            self._queue(ResultChunk(request_id, index, index == count - 1, piece))

    def _drop_partials(self) -> None:
        self._reassembly.clear()
        self._reassembly_bytes = 0

    def _queue_error(self, code: ErrorCode, message: str) -> None:
        # A frame limit too small for an error message: the end of the stream says enough.
        with contextlib.suppress(WireError):
            self._queue(ErrorFrame(code, message[:_MAX_ERROR_MESSAGE_CHARS]))

    def _fail(self, code: ErrorCode, message: str) -> None:
        self._queue_error(code, message)
        self._transition(_Input.CLOSE)
        self._drop_partials()
        self._events.append(ProtocolError(code, message))

    def _handle(self, frame: Frame) -> None:
        allowed = _RECEIVABLE[self._role].get(type(frame))
        if allowed is None or self._state not in allowed:
            raise ProtocolViolation(
                f"the {self._role.name} side cannot receive {type(frame).__name__} "
                f"in state {self._state.name}"
            )
        match frame:
            case Hello():
                if self._peer_hello is not None:
                    raise ProtocolViolation("duplicate Hello")
                self._peer_hello = frame
                self._events.append(HelloReceived(frame))
            case Welcome():
                if not self._hello_sent:
                    raise ProtocolViolation("Welcome before Hello")
                if frame.protocol_version != PROTOCOL_VERSION:
                    raise ProtocolViolation(f"unsupported protocol version {frame.protocol_version}")
                self._peer_welcome = frame
                self._transition(_Input.HANDSHAKE_DONE)
                self._events.append(WelcomeReceived(frame))
                for request_id, data in self._outbox.items():
                    self._queue_chunks(request_id, data)
            case Heartbeat():
                self._last_peer_heartbeat = frame
            case Request():
                self._events.append(RequestReceived(frame))
            case ResultChunk():
                self._receive_chunk(frame)
            case Cancel():
                self._events.append(CancelReceived(frame.request_id))
            case CatalogUpdate():
                self._events.append(CatalogReceived(frame.digest, frame.catalog_json))
            case Ack():
                self._outbox.pop(frame.request_id, None)  # unknown ids: a duplicate ack, harmless
            case Drain():
                self._transition(_Input.DRAIN)
                self._events.append(DrainReceived(frame.reason, frame.grace_ms))
            case ErrorFrame():
                self._transition(_Input.CLOSE)
                self._drop_partials()
                self._events.append(PeerError(frame.code, frame.message))

    def _receive_chunk(self, chunk: ResultChunk) -> None:
        if self._expects_result is not None and not self._expects_result(chunk.request_id):
            # Nobody waits for it (a made-up id, another edge's request, one given up on): never
            # buffered. The last chunk is acked so that an honest edge's outbox lets go of it.
            gone = self._reassembly.pop(chunk.request_id, None)
            if gone is not None:
                self._reassembly_bytes -= gone.size
            self.dropped_result_chunks += 1
            if chunk.last:
                self._queue(Ack(chunk.request_id))
            return
        partial = self._reassembly.get(chunk.request_id)
        expected = 0 if partial is None else len(partial.parts)
        if chunk.index != expected:
            raise ProtocolViolation(
                f"result chunk {chunk.index} of {chunk.request_id!r} out of order (expected {expected})"
            )
        size = len(chunk.data) + (0 if partial is None else partial.size)
        if size > self._config.max_result_bytes:
            raise FrameTooLarge(
                f"result {chunk.request_id!r} exceeds max_result_bytes={self._config.max_result_bytes}"
            )
        if not chunk.last:
            if self._reassembly_bytes + len(chunk.data) > self._config.max_reassembly_bytes:
                raise FrameTooLarge(
                    f"partial results on this connection exceed "
                    f"max_reassembly_bytes={self._config.max_reassembly_bytes}"
                )
            if partial is None:
                partial = self._reassembly[chunk.request_id] = _Reassembly()
            partial.parts.append(chunk.data)
            partial.size = size
            self._reassembly_bytes += len(chunk.data)
            return
        if partial is None:
            data = chunk.data
        else:
            del self._reassembly[chunk.request_id]
            self._reassembly_bytes -= partial.size
            data = b"".join([*partial.parts, chunk.data])
        self._events.append(ResultReceived(chunk.request_id, decode_outcome(data)))
        self._queue(Ack(chunk.request_id))
