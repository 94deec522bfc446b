"""Session, CONTROL side: what it buffers of results — only awaited ids, and never more than
``max_reassembly_bytes`` for one connection."""

from __future__ import annotations

import pytest

from outpost_wire import (
    Ack,
    ConnState,
    ErrorCode,
    ProtocolError,
    ResultChunk,
    ResultReceived,
    Role,
    SessionConfig,
    ToolResult,
    TunnelSession,
    decode_frame,
    encode_frame,
    encode_outcome,
)

from .pair import HELLO, WELCOME

MIB = 1024 * 1024
LIMIT = 4 * MIB


def _open_control(config: SessionConfig, awaited: set[str]) -> TunnelSession:
    control = TunnelSession(Role.CONTROL, config, expects_result=awaited.__contains__)
    control.connection_made(0.0)
    control.receive_data(encode_frame(HELLO, config.max_frame_bytes), 0.0)
    control.send_welcome(WELCOME)
    control.events_received()
    control.data_to_send()
    return control


def _feed(control: TunnelSession, *chunks: ResultChunk) -> None:
    for chunk in chunks:
        control.receive_data(encode_frame(chunk, control.config.max_frame_bytes), 1.0)


def _acks(control: TunnelSession) -> list[str]:
    out = []
    for data in control.data_to_send():
        frame = decode_frame(data, control.config.max_frame_bytes)
        if isinstance(frame, Ack):
            out.append(frame.request_id)
    return out


def test_chunks_of_ids_not_awaited_are_dropped_unbuffered_and_the_last_acked() -> None:
    control = _open_control(SessionConfig(), awaited=set())
    for n in range(60):  # the probe: 60 partials of 3.9 MB for made-up ids
        _feed(control, ResultChunk(f"made-up-{n}", 0, False, b"\x00" * (39 * MIB // 10)))
    assert control.reassembly_bytes == 0
    assert control.dropped_result_chunks == 60
    assert control.events_received() == []
    assert _acks(control) == []  # nothing to ack: no result ended
    _feed(control, ResultChunk("made-up-0", 1, True, b"\x00"))
    assert _acks(control) == ["made-up-0"]  # an honest edge's outbox lets go of it
    assert control.events_received() == []
    assert control.state is ConnState.OPEN


def test_awaited_id_is_reassembled_and_others_never_mix_in() -> None:
    data = encode_outcome(ToolResult.text("x" * 5000))
    awaited = {"asked"}
    control = _open_control(SessionConfig(), awaited)
    _feed(
        control,
        ResultChunk("asked", 0, False, data[:2000]),
        ResultChunk("stranger", 0, False, b"\x00" * 1000),
        ResultChunk("asked", 1, True, data[2000:]),
    )
    assert control.events_received() == [ResultReceived("asked", ToolResult.text("x" * 5000))]
    assert control.reassembly_bytes == 0
    assert control.dropped_result_chunks == 1
    assert _acks(control) == ["asked"]


def test_partial_is_freed_when_the_id_stops_being_awaited() -> None:
    awaited = {"r1"}
    control = _open_control(SessionConfig(), awaited)
    _feed(control, ResultChunk("r1", 0, False, b"\x00" * 1000))
    assert control.reassembly_bytes == 1000
    awaited.clear()  # the caller gave up on r1 (a timeout, say)
    _feed(control, ResultChunk("r1", 1, False, b"\x00" * 1000))
    assert control.reassembly_bytes == 0
    assert control.dropped_result_chunks == 1


def test_reassembly_cap_per_connection_closes_it() -> None:
    config = SessionConfig(max_frame_bytes=64 * 1024, max_result_bytes=100_000, max_reassembly_bytes=250_000)
    control = _open_control(config, awaited={f"r{n}" for n in range(10)})
    for n in range(6):  # each partial is under max_result_bytes; together they pass the cap
        _feed(control, ResultChunk(f"r{n}", 0, False, b"\x00" * 60_000))
        if control.state is ConnState.CLOSED:
            break
    events = control.events_received()
    assert control.state is ConnState.CLOSED
    assert [type(e) for e in events] == [ProtocolError]
    error = events[0]
    assert isinstance(error, ProtocolError)
    assert error.code is ErrorCode.FRAME_TOO_LARGE
    assert "max_reassembly_bytes=250000" in error.message
    assert control.reassembly_bytes == 0


def test_completed_results_free_their_share_of_the_cap() -> None:
    config = SessionConfig(max_frame_bytes=64 * 1024, max_result_bytes=100_000, max_reassembly_bytes=100_000)
    data = encode_outcome(ToolResult.text("y" * 90_000))
    control = _open_control(config, awaited={f"r{n}" for n in range(20)})
    step = 60_000
    for n in range(20):  # 20 results of ~90 kB in sequence: never more than one partial at a time
        _feed(
            control, ResultChunk(f"r{n}", 0, False, data[:step]), ResultChunk(f"r{n}", 1, True, data[step:])
        )
    assert control.state is ConnState.OPEN
    assert len([e for e in control.events_received() if isinstance(e, ResultReceived)]) == 20
    assert control.reassembly_bytes == 0


def test_default_awaits_every_id_and_cap_default_is_256_mib() -> None:
    control = _open_control(SessionConfig(), awaited=set())
    plain = TunnelSession(Role.CONTROL, SessionConfig())
    assert SessionConfig().max_reassembly_bytes == 256 * MIB
    plain.connection_made(0.0)
    plain.receive_data(encode_frame(HELLO, LIMIT), 0.0)
    plain.send_welcome(WELCOME)
    plain.receive_data(encode_frame(ResultChunk("any", 0, False, b"\x00" * 10), LIMIT), 0.0)
    assert plain.reassembly_bytes == 10
    assert control.reassembly_bytes == 0


def test_reassembly_cap_below_result_cap_is_refused() -> None:
    with pytest.raises(ValueError, match="max_reassembly_bytes"):
        SessionConfig(max_result_bytes=10 * MIB, max_reassembly_bytes=MIB)
    with pytest.raises(ValueError, match="positive"):
        SessionConfig(max_reassembly_bytes=0)
