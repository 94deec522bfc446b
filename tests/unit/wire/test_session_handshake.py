"""Session: handshake, state transitions, and what may be sent or received when."""

from __future__ import annotations

import pytest

from outpost_wire import (
    PROTOCOL_VERSION,
    Ack,
    CancelReceived,
    ConnState,
    Destroy,
    DrainReceived,
    ErrorCode,
    ErrorFrame,
    Failure,
    Heartbeat,
    HelloReceived,
    PeerError,
    ProtocolError,
    ProtocolViolation,
    Request,
    RequestReceived,
    ResultChunk,
    ResultReceived,
    Role,
    SessionConfig,
    TunnelSession,
    Welcome,
    WelcomeReceived,
    encode_frame,
)

from .pair import HELLO, WELCOME, Pair, frames

LIMIT = SessionConfig().max_frame_bytes
REQUEST = Request("r1", "s1", "k1", 0, Destroy())


def _state(session: TunnelSession) -> ConnState:
    return session.state  # a call, so that mypy does not narrow across transitions


def _enc(frame: object) -> bytes:
    return encode_frame(frame, LIMIT)  # type: ignore[arg-type]


def test_handshake() -> None:
    pair = Pair()
    assert pair.edge.state is ConnState.DISCONNECTED
    pair.edge.connection_made(0.0)
    pair.control.connection_made(0.0)
    assert pair.edge.state is pair.control.state is ConnState.HANDSHAKING

    pair.edge.send_hello(HELLO)
    pair.pump()
    assert pair.take_control_events() == [HelloReceived(HELLO)]
    assert pair.control.peer_hello == HELLO
    assert pair.control.state is ConnState.HANDSHAKING  # until the caller accepts the edge

    pair.control.send_welcome(WELCOME)
    assert pair.control.state is ConnState.OPEN
    pair.pump()
    assert pair.take_edge_events() == [WelcomeReceived(WELCOME)]
    assert pair.edge.peer_welcome == WELCOME
    assert pair.edge.state is ConnState.OPEN
    assert pair.edge.role is Role.EDGE and pair.control.role is Role.CONTROL


def test_control_rejects_hello_with_error_frame() -> None:
    pair = Pair()
    pair.edge.connection_made(0.0)
    pair.control.connection_made(0.0)
    pair.edge.send_hello(HELLO)
    pair.pump()
    pair.control.close(ErrorCode.UNAUTHENTICATED, "unknown edge")
    assert pair.control.state is ConnState.CLOSED
    pair.pump()
    assert pair.take_edge_events() == [PeerError(ErrorCode.UNAUTHENTICATED, "unknown edge")]
    assert pair.edge.state is ConnState.CLOSED


def test_request_before_handshake_is_a_protocol_violation() -> None:
    edge = TunnelSession(Role.EDGE, SessionConfig())
    edge.connection_made(0.0)
    edge.send_hello(HELLO)
    edge.data_to_send()
    edge.receive_data(_enc(REQUEST), 1.0)
    [event] = edge.events_received()
    assert isinstance(event, ProtocolError) and event.code is ErrorCode.PROTOCOL_VIOLATION
    assert edge.state is ConnState.CLOSED
    assert frames(edge) == [ErrorFrame(ErrorCode.PROTOCOL_VIOLATION, event.message)]


@pytest.mark.parametrize(
    ("role", "frame"),
    [
        (Role.CONTROL, Heartbeat(1, 0)),  # before Hello
        (Role.CONTROL, ResultChunk("r1", 0, True, b"")),
        (Role.CONTROL, WELCOME),  # wrong direction
        (Role.EDGE, HELLO),  # wrong direction
        (Role.EDGE, Ack("r1")),  # before Welcome
        (Role.EDGE, Heartbeat(1, 0)),
    ],
    ids=lambda x: getattr(x, "name", type(x).__name__),
)
def test_only_handshake_frames_before_open(role: Role, frame: object) -> None:
    session = TunnelSession(role, SessionConfig())
    session.connection_made(0.0)
    if role is Role.EDGE:
        session.send_hello(HELLO)
        session.data_to_send()
    session.receive_data(_enc(frame), 0.0)
    [event] = session.events_received()
    assert event == ProtocolError(ErrorCode.PROTOCOL_VIOLATION, event.message)  # type: ignore[union-attr]
    assert session.state is ConnState.CLOSED


@pytest.mark.parametrize(
    ("role", "frame"),
    [
        (Role.CONTROL, REQUEST),
        (Role.CONTROL, Ack("r1")),
        (Role.CONTROL, HELLO),  # a second Hello once open
        (Role.EDGE, ResultChunk("r1", 0, True, b"")),
        (Role.EDGE, WELCOME),  # a second Welcome
        (Role.EDGE, HELLO),
    ],
    ids=lambda x: getattr(x, "name", type(x).__name__),
)
def test_wrong_frames_once_open(role: Role, frame: object) -> None:
    pair = Pair()
    pair.connect()
    session = pair.edge if role is Role.EDGE else pair.control
    session.receive_data(_enc(frame), 1.0)
    [event] = session.events_received()
    assert isinstance(event, ProtocolError) and event.code is ErrorCode.PROTOCOL_VIOLATION
    assert session.state is ConnState.CLOSED


def test_duplicate_hello_during_handshake() -> None:
    control = TunnelSession(Role.CONTROL, SessionConfig())
    control.connection_made(0.0)
    control.receive_data(_enc(HELLO), 0.0)
    control.receive_data(_enc(HELLO), 0.0)
    events = control.events_received()
    assert events[0] == HelloReceived(HELLO)
    assert isinstance(events[1], ProtocolError) and events[1].code is ErrorCode.PROTOCOL_VIOLATION


def test_welcome_before_hello_sent() -> None:
    edge = TunnelSession(Role.EDGE, SessionConfig())
    edge.connection_made(0.0)
    edge.receive_data(_enc(WELCOME), 0.0)
    [event] = edge.events_received()
    assert isinstance(event, ProtocolError) and event.code is ErrorCode.PROTOCOL_VIOLATION


def test_edge_refuses_unsupported_protocol_version() -> None:
    pair = Pair()
    welcome = Welcome("cp", "9.9", PROTOCOL_VERSION + 1, 10.0)
    pair.connect(welcome)
    [event] = pair.take_edge_events()  # no WelcomeReceived
    assert isinstance(event, ProtocolError) and event.code is ErrorCode.PROTOCOL_VIOLATION
    assert pair.edge.state is ConnState.CLOSED
    assert isinstance(pair.take_control_events()[-1], PeerError)


# --- caller misuse raises ProtocolViolation -------------------------------------------------------


def test_illegal_transitions_raise() -> None:
    edge = TunnelSession(Role.EDGE, SessionConfig())
    with pytest.raises(ProtocolViolation):
        edge.receive_data(b"", 0.0)  # no connection
    with pytest.raises(ProtocolViolation):
        edge.send_hello(HELLO)  # not connected
    edge.connection_made(0.0)
    with pytest.raises(ProtocolViolation):
        edge.connection_made(0.0)  # already connected
    edge.send_hello(HELLO)
    with pytest.raises(ProtocolViolation):
        edge.send_hello(HELLO)  # twice
    with pytest.raises(ProtocolViolation):
        edge.send_drain("x", 0)  # not open yet
    edge.close()
    assert edge.state is ConnState.CLOSED
    edge.close()  # idempotent
    with pytest.raises(ProtocolViolation):
        edge.connection_made(1.0)  # a closed connection must be lost first
    edge.connection_lost()
    assert _state(edge) is ConnState.DISCONNECTED
    edge.connection_lost()  # idempotent
    edge.connection_made(2.0)
    assert _state(edge) is ConnState.HANDSHAKING


def test_role_checks() -> None:
    pair = Pair()
    pair.connect()
    with pytest.raises(ProtocolViolation):
        pair.edge.send_request(REQUEST)
    with pytest.raises(ProtocolViolation):
        pair.edge.send_cancel("r1")
    with pytest.raises(ProtocolViolation):
        pair.control.send_hello(HELLO)
    with pytest.raises(ProtocolViolation):
        pair.edge.send_welcome(WELCOME)
    with pytest.raises(ProtocolViolation):
        pair.control.send_result("r1", Ack("x"))  # type: ignore[arg-type]


def test_send_welcome_requires_hello() -> None:
    control = TunnelSession(Role.CONTROL, SessionConfig())
    control.connection_made(0.0)
    with pytest.raises(ProtocolViolation):
        control.send_welcome(WELCOME)


def test_send_request_requires_open() -> None:
    control = TunnelSession(Role.CONTROL, SessionConfig())
    with pytest.raises(ProtocolViolation):
        control.send_request(REQUEST)
    control.connection_made(0.0)
    with pytest.raises(ProtocolViolation):
        control.send_request(REQUEST)


# --- drain and close --------------------------------------------------------------------------------


def test_edge_drain_stops_new_requests_but_not_results() -> None:
    pair = Pair()
    pair.connect()
    pair.control.send_request(REQUEST)
    pair.edge.send_drain("sigterm", 5000)  # crosses the request on the wire
    assert pair.edge.state is ConnState.DRAINING
    pair.pump()
    assert pair.take_edge_events() == [RequestReceived(REQUEST)]  # the caller answers DRAINING
    assert pair.take_control_events() == [DrainReceived("sigterm", 5000)]
    assert pair.control.state is ConnState.DRAINING
    with pytest.raises(ProtocolViolation):
        pair.control.send_request(Request("r2", "s1", "k2", 0, Destroy()))
    pair.control.send_cancel("r1")  # still allowed
    pair.edge.send_result("r1", Failure(ErrorCode.DRAINING, "draining"))
    pair.pump()
    assert pair.take_edge_events() == [CancelReceived("r1")]
    assert pair.take_control_events() == [ResultReceived("r1", Failure(ErrorCode.DRAINING, "draining"))]
    assert pair.edge.unacked_results() == []


def test_control_drain() -> None:
    pair = Pair()
    pair.connect()
    pair.control.send_drain("deploy", 1000)
    pair.pump()
    assert pair.take_edge_events() == [DrainReceived("deploy", 1000)]
    assert pair.edge.state is pair.control.state is ConnState.DRAINING
    with pytest.raises(ProtocolViolation):
        pair.control.send_request(REQUEST)
    pair.control.send_drain("deploy", 500)  # draining again is allowed
    pair.pump()
    assert pair.take_edge_events() == [DrainReceived("deploy", 500)]


def test_close_without_code_sends_nothing() -> None:
    pair = Pair()
    pair.connect()
    pair.control.close()
    assert pair.control.data_to_send() == []
    assert pair.control.state is ConnState.CLOSED


def test_data_after_close_is_ignored() -> None:
    pair = Pair()
    pair.connect()
    pair.edge.close(ErrorCode.INTERNAL, "bye")
    pair.edge.receive_data(_enc(REQUEST), 1.0)
    pair.edge.receive_data(b"garbage", 1.0)
    assert pair.edge.events_received() == []
    assert frames(pair.edge) == [ErrorFrame(ErrorCode.INTERNAL, "bye")]
