"""Session: many requests over one tunnel, chunked results, acks and redelivery."""

from __future__ import annotations

import json
import random
from collections import defaultdict

import pytest

from outpost_wire import (
    Ack,
    ConnState,
    Destroyed,
    ErrorCode,
    Execute,
    Failure,
    FrameTooLarge,
    ImageBlock,
    Outcome,
    ProtocolError,
    Provisioned,
    Request,
    RequestReceived,
    ResultChunk,
    ResultReceived,
    SessionConfig,
    TextBlock,
    ToolResult,
    decode_frame,
    encode_frame,
    encode_outcome,
)

from .pair import HELLO, WELCOME, Pair, frames

MIB = 1024 * 1024


def _outcome(i: int, big: int) -> Outcome:
    """A mix of outcome types and sizes; request 0 gets the big one."""
    if i == 0:
        return ToolResult((TextBlock("head"), ImageBlock("image/png", random.Random(0).randbytes(big))))
    if i % 10 == 1:
        return Provisioned(f"sbx-{i}", "python:3.12", reused=i % 20 == 1)
    if i % 10 == 2:
        return Destroyed(existed=True)
    if i % 10 == 3:
        return Failure(ErrorCode.POLICY_DENIED, f"image not allowed ({i})")
    return ToolResult.text(f"result {i} " + "x" * (i * 997), is_error=i % 7 == 0)


def _interleave(session_frames: list[bytes], limit: int) -> list[bytes]:
    """Reorder ResultChunk frames round-robin across request ids, keeping each request's order."""
    queues: dict[str, list[bytes]] = defaultdict(list)
    for data in session_frames:
        frame = decode_frame(data, limit)
        assert isinstance(frame, ResultChunk)
        queues[frame.request_id].append(data)
    out: list[bytes] = []
    while queues:
        for rid in list(queues):
            out.append(queues[rid].pop(0))
            if not queues[rid]:
                del queues[rid]
    return out


@pytest.mark.parametrize(
    ("max_frame_bytes", "big"),
    [(4 * MIB, 10 * MIB), (1024, 200 * 1024)],
    ids=["4MiB-frames-10MiB-result", "1KiB-frames-all-chunked"],
)
def test_hundred_concurrent_requests_with_interleaved_chunks(max_frame_bytes: int, big: int) -> None:
    pair = Pair(SessionConfig(max_frame_bytes=max_frame_bytes))
    pair.connect()
    requests = [
        Request(f"req-{i}", f"sess-{i % 7}", f"toolu_{i}", 0, Execute("bash", json.dumps({"i": i})))
        for i in range(100)
    ]
    for request in requests:
        pair.control.send_request(request)
    pair.pump()
    assert pair.take_edge_events() == [RequestReceived(r) for r in requests]

    expected = {r.request_id: _outcome(i, big) for i, r in enumerate(requests)}
    for rid in reversed(list(expected)):  # finish in a different order than asked
        pair.edge.send_result(rid, expected[rid])
    assert sorted(pair.edge.unacked_results()) == sorted(expected)

    wire = pair.edge.data_to_send()
    assert all(len(data) <= max_frame_bytes for data in wire)
    assert len(wire) > 100  # some results were split
    for data in _interleave(wire, max_frame_bytes):
        pair.control.receive_data(data, 1.0)
    events = pair.take_control_events()
    assert {e.request_id: e.outcome for e in events if isinstance(e, ResultReceived)} == expected
    assert len(events) == 100

    pair.pump()  # acks flow back
    assert pair.edge.unacked_results() == []
    assert pair.edge.state is pair.control.state is ConnState.OPEN


def test_ack_clears_outbox() -> None:
    pair = Pair()
    pair.connect()
    pair.edge.send_result("r1", ToolResult.text("a"))
    pair.edge.send_result("r2", ToolResult.text("b"))
    assert pair.edge.unacked_results() == ["r1", "r2"]
    pair.pump()
    assert pair.take_control_events() == [
        ResultReceived("r1", ToolResult.text("a")),
        ResultReceived("r2", ToolResult.text("b")),
    ]
    assert pair.edge.unacked_results() == []


def test_disconnect_before_ack_then_redelivery() -> None:
    pair = Pair(SessionConfig(max_frame_bytes=512))
    pair.connect()
    big = ToolResult.text("y" * 5000)  # ~10 chunks
    pair.edge.send_result("r1", big)
    first = pair.edge.data_to_send()
    pair.control.receive_data(first[0], 1.0)  # only part of it arrives
    pair.disconnect()
    pair.edge.send_result("r2", Destroyed(existed=False))  # finished while disconnected
    assert pair.edge.data_to_send() == []
    assert pair.edge.unacked_results() == ["r1", "r2"]

    pair.now = 5.0
    pair.connect()  # the same session objects are reused
    assert pair.take_control_events() == [
        ResultReceived("r1", big),  # the half-received r1 was dropped, not glued to the resend
        ResultReceived("r2", Destroyed(existed=False)),
    ]
    assert pair.edge.unacked_results() == []


def test_lost_ack_means_duplicate_delivery_and_every_copy_is_acked() -> None:
    pair = Pair()
    pair.connect()
    pair.edge.send_result("r1", ToolResult.text("once"))
    for data in pair.edge.data_to_send():
        pair.control.receive_data(data, 1.0)
    assert pair.control.data_to_send()  # the ack is lost with the connection
    pair.disconnect()
    assert pair.edge.unacked_results() == ["r1"]
    pair.connect()
    pair.pump()
    results = [e for e in pair.take_control_events() if isinstance(e, ResultReceived)]
    assert results == [ResultReceived("r1", ToolResult.text("once"))] * 2
    assert pair.edge.unacked_results() == []


def test_results_produced_during_handshake_wait_for_welcome() -> None:
    pair = Pair()
    pair.edge.send_result("r0", ToolResult.text("early"))
    pair.edge.connection_made(0.0)
    pair.edge.send_result("r1", ToolResult.text("during"))
    pair.control.connection_made(0.0)
    pair.edge.send_hello(HELLO)
    assert len(pair.edge.data_to_send()) == 1  # the Hello only
    pair.edge.connection_lost()
    pair.control.connection_lost()
    pair.connect()
    results = [e for e in pair.take_control_events() if isinstance(e, ResultReceived)]
    assert [r.request_id for r in results] == ["r0", "r1"]
    assert pair.edge.peer_welcome == WELCOME


def test_resending_same_request_id_replaces_outbox_entry() -> None:
    pair = Pair()
    pair.edge.send_result("r1", ToolResult.text("old"))
    pair.edge.send_result("r1", ToolResult.text("new"))
    assert pair.edge.unacked_results() == ["r1"]
    pair.connect()
    assert pair.take_control_events() == [ResultReceived("r1", ToolResult.text("new"))]


def test_results_for_unknown_request_ids_are_accepted() -> None:
    pair = Pair()
    pair.connect()
    pair.edge.send_result("from-a-previous-control-plane", Destroyed(existed=True))
    pair.pump()
    assert pair.take_control_events() == [ResultReceived("from-a-previous-control-plane", Destroyed(True))]


def test_unknown_ack_is_harmless() -> None:
    pair = Pair()
    pair.connect()
    pair.edge.receive_data(encode_frame(Ack("never-sent"), 1024), 1.0)
    assert pair.edge.events_received() == []
    assert pair.edge.state is ConnState.OPEN


# --- bad chunk sequences ---------------------------------------------------------------------------


def _feed_chunks(chunks: list[ResultChunk], config: SessionConfig | None = None) -> Pair:
    pair = Pair(config)
    pair.connect()
    for chunk in chunks:
        pair.control.receive_data(encode_frame(chunk, pair.config.max_frame_bytes), 1.0)
    return pair


def _sole_protocol_error(pair: Pair) -> ProtocolError:
    events = pair.take_control_events()
    errors = [e for e in events if isinstance(e, ProtocolError)]
    assert len(errors) == 1 and events[-1] is errors[0]
    assert pair.control.state is ConnState.CLOSED
    return errors[0]


@pytest.mark.parametrize(
    "indexes",
    [[1], [0, 2], [0, 0], [0, 1, 1]],
    ids=["starts-at-1", "gap", "repeat", "repeat-later"],
)
def test_out_of_order_or_missing_chunk_is_protocol_violation(indexes: list[int]) -> None:
    data = encode_outcome(ToolResult.text("z" * 100))
    chunks = [ResultChunk("r1", i, False, data[:10]) for i in indexes]
    error = _sole_protocol_error(_feed_chunks(chunks))
    assert error.code is ErrorCode.PROTOCOL_VIOLATION


def test_reassembled_result_over_cap_is_rejected() -> None:
    config = SessionConfig(max_frame_bytes=4096, max_result_bytes=10_000)
    chunks = [ResultChunk("r1", i, False, b"\x00" * 3000) for i in range(4)]
    error = _sole_protocol_error(_feed_chunks(chunks, config))
    assert error.code is ErrorCode.FRAME_TOO_LARGE


def test_default_result_cap_is_64_mib() -> None:
    assert SessionConfig().max_result_bytes == 64 * MIB


def test_reassembled_garbage_is_malformed() -> None:
    chunks = [ResultChunk("r1", 0, False, b"\xff\xff"), ResultChunk("r1", 1, True, b"\xff")]
    error = _sole_protocol_error(_feed_chunks(chunks))
    assert error.code is ErrorCode.MALFORMED_FRAME


def test_edge_refuses_result_over_cap() -> None:
    pair = Pair(SessionConfig(max_result_bytes=1000))
    pair.connect()
    with pytest.raises(FrameTooLarge):
        pair.edge.send_result("r1", ToolResult.text("q" * 2000))
    assert pair.edge.unacked_results() == []
    assert frames(pair.edge) == []


def test_edge_refuses_request_id_too_long_for_frame() -> None:
    pair = Pair(SessionConfig(max_frame_bytes=100))
    with pytest.raises(FrameTooLarge):
        pair.edge.send_result("r" * 200, ToolResult.text("q"))
    with pytest.raises(ValueError):
        pair.edge.send_result("", ToolResult.text("q"))
    assert pair.edge.unacked_results() == []


def test_control_refuses_oversized_request() -> None:
    pair = Pair(SessionConfig(max_frame_bytes=1024))
    pair.connect()
    with pytest.raises(FrameTooLarge):
        pair.control.send_request(Request("r1", "s", "k", 0, Execute("bash", "x" * 2000)))
    assert pair.control.data_to_send() == []
    assert pair.control.state is ConnState.OPEN
