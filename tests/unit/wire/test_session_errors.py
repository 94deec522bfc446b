"""Session: bad input from the peer becomes ErrorFrame + ProtocolError + CLOSED, never an exception."""

from __future__ import annotations

import random

import pytest

from outpost_wire import (
    Cancel,
    ConnState,
    ErrorCode,
    ErrorFrame,
    PeerError,
    ProtocolError,
    Role,
    SessionConfig,
    encode_frame,
)
from outpost_wire._proto import tunnel_pb2 as pb

from .pair import Pair, frames


def _assert_rejected(pair: Pair, role: Role, code: ErrorCode) -> None:
    session, peer = (pair.edge, pair.control) if role is Role.EDGE else (pair.control, pair.edge)
    [event] = session.events_received()
    assert isinstance(event, ProtocolError) and event.code is code
    assert session.state is ConnState.CLOSED
    [goodbye] = frames(session)
    assert goodbye == ErrorFrame(code, event.message)
    # ...and the peer hears about it.
    peer.receive_data(encode_frame(goodbye, session.config.max_frame_bytes), 2.0)
    assert peer.events_received() == [PeerError(code, event.message)]
    assert peer.state is ConnState.CLOSED


@pytest.mark.parametrize("role", list(Role))
def test_oversized_frame(role: Role) -> None:
    pair = Pair(SessionConfig(max_frame_bytes=1024))
    pair.connect()
    session = pair.edge if role is Role.EDGE else pair.control
    session.receive_data(b"\x00" * 1025, 1.0)
    _assert_rejected(pair, role, ErrorCode.FRAME_TOO_LARGE)


GARBAGE = {
    "random": random.Random(42).randbytes(300),
    "truncated": encode_frame(Cancel("request-123"), 1024)[:-3],
    "empty oneof": b"",
    "unknown body": pb.Frame().SerializeToString() + b"\xa0\x06\x01",
    "unknown enum": pb.Frame(error=pb.Error(code=77)).SerializeToString(),  # type: ignore[arg-type]
    "missing request_id": pb.Frame(cancel=pb.Cancel()).SerializeToString(),
}


@pytest.mark.parametrize("data", GARBAGE.values(), ids=GARBAGE.keys())
@pytest.mark.parametrize("role", list(Role))
def test_malformed_bytes(role: Role, data: bytes) -> None:
    pair = Pair()
    pair.connect()
    session = pair.edge if role is Role.EDGE else pair.control
    session.receive_data(data, 1.0)
    _assert_rejected(pair, role, ErrorCode.MALFORMED_FRAME)


def test_malformed_bytes_during_handshake() -> None:
    pair = Pair()
    pair.control.connection_made(0.0)
    pair.edge.connection_made(0.0)
    pair.control.receive_data(b"\xff\xff\xff", 0.5)
    _assert_rejected(pair, Role.CONTROL, ErrorCode.MALFORMED_FRAME)


def test_error_message_is_truncated() -> None:
    pair = Pair()
    pair.connect()
    pair.edge.close(ErrorCode.INTERNAL, "x" * 100_000)
    [goodbye] = frames(pair.edge)
    assert isinstance(goodbye, ErrorFrame) and len(goodbye.message) <= 1024


def test_frame_limit_too_small_for_error_message_still_closes() -> None:
    pair = Pair(SessionConfig(max_frame_bytes=8))
    pair.control.connection_made(0.0)
    pair.control.receive_data(b"\xff" * 9, 0.0)
    assert pair.control.data_to_send() == []
    [event] = pair.control.events_received()
    assert isinstance(event, ProtocolError) and event.code is ErrorCode.FRAME_TOO_LARGE
    assert pair.control.state is ConnState.CLOSED
