"""Fuzzing the tunnel's frames (hypothesis, fixed budget, derandomized so CI is repeatable).

Whatever bytes a peer sends: ``decode_frame`` answers a frame or a typed wire error (never another
exception), and a connected ``TunnelSession`` of either role never raises from ``receive_data``:
bad input ends in a typed protocol error for the peer, as the module promises."""

from __future__ import annotations

import contextlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outpost_wire import (
    Ack,
    Cancel,
    Execute,
    Frame,
    Heartbeat,
    Request,
    ResultChunk,
    SessionConfig,
    decode_frame,
    encode_frame,
)
from outpost_wire.errors import WireError

from .pair import Pair

FUZZ = settings(
    max_examples=300,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
LIMIT = SessionConfig().max_frame_bytes

VALID: list[Frame] = [
    Heartbeat(1, 1_700_000_000_000),
    Ack("req_1"),
    Cancel("req_1"),
    ResultChunk("req_1", 0, True, b"\x00\x01payload"),
    Request("req_1", "sesn_1", "key_1", 0, Execute("bash", '{"command": "true"}')),
]
ENCODED = [encode_frame(f, LIMIT) for f in VALID]


def _decode(data: bytes) -> None:
    with contextlib.suppress(WireError):  # typed: MalformedFrame or FrameTooLarge
        decode_frame(data, LIMIT)


@FUZZ
@given(st.binary(max_size=4096))
def test_arbitrary_bytes_decode_to_a_frame_or_a_typed_error(data: bytes) -> None:
    _decode(data)


@FUZZ
@given(st.sampled_from(ENCODED), st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=8))
def test_mutated_frames_decode_to_a_frame_or_a_typed_error(
    frame: bytes, flips: list[tuple[int, int]]
) -> None:
    data = bytearray(frame)
    for position, value in flips:
        if data:
            data[position % len(data)] = value
    _decode(bytes(data))


@FUZZ
@given(
    st.lists(st.one_of(st.binary(max_size=512), st.sampled_from(ENCODED)), min_size=1, max_size=20),
    st.booleans(),
)
def test_a_connected_session_never_raises_on_what_its_peer_sends(chunks: list[bytes], to_edge: bool) -> None:
    pair = Pair()
    pair.connect()
    receiver = pair.edge if to_edge else pair.control
    for i, data in enumerate(chunks):
        receiver.receive_data(data, float(i))
        receiver.data_to_send()
        receiver.events_received()
