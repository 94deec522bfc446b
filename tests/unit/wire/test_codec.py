"""Codec: every frame and outcome round-trips; bad bytes become typed errors."""

from __future__ import annotations

import random

import pytest

from outpost_wire import (
    Ack,
    Cancel,
    Destroy,
    Destroyed,
    DocumentBlock,
    Drain,
    ErrorCode,
    ErrorFrame,
    Execute,
    Failure,
    Frame,
    FrameTooLarge,
    Heartbeat,
    Hello,
    ImageBlock,
    MalformedFrame,
    Outcome,
    Provision,
    Provisioned,
    Request,
    ResultChunk,
    TextBlock,
    ToolResult,
    Welcome,
    decode_frame,
    decode_outcome,
    encode_frame,
    encode_outcome,
)
from outpost_wire._proto import tunnel_pb2 as pb
from outpost_wire.codec import max_chunk_payload

LIMIT = 4 * 1024 * 1024
U32 = 2**32 - 1
U64 = 2**64 - 1

FRAMES: list[Frame] = [
    Hello("edge-1", "0.1.0", 1, ("docker", "mcp"), "sha256:ab", 8, 3, "env-1"),
    Hello("édge-✓", "", 1, (), "", 0, 0),
    Hello("e", "v", U32, tuple(f"cap{i}" for i in range(50)), "d", U32, U32, "x"),
    Welcome("cp-1", "0.1.0", 1, 10.0),
    Welcome("", "", 2, 0.25),
    Heartbeat(0, 0),
    Heartbeat(U64, -(2**63), U32),
    Heartbeat(7, 123_456, 2),
    Request("r1", "s1", "toolu_1", 0, Provision()),
    Request("r2", "s1", "k", 1_700_000_000_000, Provision("python:3.12", 1.5, 2**31, 256)),
    Request("r3", "s1", "k", -1, Provision(memory_bytes=U64, pids=U32)),
    Request("r4", "s2", "toolu_2", 2**63 - 1, Execute("bash", '{"command": "ls"}', 30_000)),
    Request("r5", "s2", "", 0, Execute("", "")),
    Request("r6", "s3", "k", 0, Destroy()),
    ResultChunk("r1", 0, True, b""),
    ResultChunk("r1", U32, False, bytes(range(256)) * 10),
    Cancel("r1"),
    Ack("r1"),
    Drain("sigterm", 30_000),
    Drain("", 0),
    *(ErrorFrame(code, f"message for {code.name} ✓") for code in ErrorCode),
]

OUTCOMES: list[Outcome] = [
    ToolResult(),
    ToolResult.text("hello"),
    ToolResult.error("boom"),
    ToolResult(
        (TextBlock("a"), ImageBlock("image/png", b"\x89PNG\x00"), DocumentBlock("application/pdf", b"%PDF")),
        is_error=False,
    ),
    ToolResult((TextBlock(""), ImageBlock("", b"")), is_error=True),
    Provisioned("sbx-1", "python:3.12", True),
    Provisioned("", "", False),
    Destroyed(True),
    Destroyed(False),
    *(Failure(code, code.value) for code in ErrorCode),
]


@pytest.mark.parametrize("frame", FRAMES, ids=lambda f: type(f).__name__)
def test_frame_round_trip(frame: Frame) -> None:
    data = encode_frame(frame, LIMIT)
    assert decode_frame(data, LIMIT) == frame


@pytest.mark.parametrize("outcome", OUTCOMES, ids=lambda o: type(o).__name__)
def test_outcome_round_trip(outcome: Outcome) -> None:
    assert decode_outcome(encode_outcome(outcome)) == outcome


def test_every_frame_type_is_covered() -> None:
    assert {type(f) for f in FRAMES} == set(Frame.__args__)  # type: ignore[attr-defined]
    assert {type(o) for o in OUTCOMES} == set(Outcome.__args__)  # type: ignore[attr-defined]
    ops = {type(f.op) for f in FRAMES if isinstance(f, Request)}
    assert ops == {Provision, Execute, Destroy}


@pytest.mark.parametrize("code", list(ErrorCode), ids=lambda c: c.name)
def test_every_error_code_round_trips(code: ErrorCode) -> None:
    assert decode_frame(encode_frame(ErrorFrame(code, "m"), LIMIT), LIMIT) == ErrorFrame(code, "m")
    assert decode_outcome(encode_outcome(Failure(code, "m"))) == Failure(code, "m")


def test_error_code_mapping_is_a_bijection() -> None:
    proto_names = set(pb.ErrorCode.keys())
    assert proto_names == {f"ERROR_CODE_{code.name}" for code in ErrorCode}
    assert pb.ErrorCode.Value("ERROR_CODE_UNSPECIFIED") == 0
    numbers = [pb.ErrorCode.Value(f"ERROR_CODE_{code.name}") for code in ErrorCode]
    assert len(set(numbers)) == len(numbers)


# --- size limits ---------------------------------------------------------------------------------


def test_encode_rejects_oversized_frame() -> None:
    chunk = ResultChunk("r1", 0, True, b"x" * 1000)
    with pytest.raises(FrameTooLarge):
        encode_frame(chunk, 999)
    assert len(encode_frame(chunk, 2000)) <= 2000


def test_decode_checks_size_before_parsing() -> None:
    data = encode_frame(Ack("r1"), LIMIT)
    with pytest.raises(FrameTooLarge):
        decode_frame(data, len(data) - 1)
    with pytest.raises(FrameTooLarge):
        decode_frame(b"\xff" * 101, 100)  # garbage, but the size is checked first
    assert decode_frame(data, len(data)) == Ack("r1")


@pytest.mark.parametrize("request_id", ["r", "r" * 100, "☃" * 30])
@pytest.mark.parametrize("limit", [200, 16_500, 2_097_200, 4 * 1024 * 1024])  # around varint widths
def test_max_chunk_payload_fits_and_is_tight(request_id: str, limit: int) -> None:
    room = max_chunk_payload(request_id, limit)
    size = len(encode_frame(ResultChunk(request_id, U32, True, b"x" * room), limit))
    assert limit - 10 <= size <= limit


def test_max_chunk_payload_refuses_tiny_frames() -> None:
    with pytest.raises(FrameTooLarge):
        max_chunk_payload("r" * 100, 100)


# --- malformed input -----------------------------------------------------------------------------


def _frame_bytes(**body: object) -> bytes:
    return pb.Frame(**body).SerializeToString()  # type: ignore[arg-type]


MALFORMED: dict[str, bytes] = {
    "empty bytes (empty oneof)": b"",
    "unknown field only (frame type from the future)": b"\xa0\x06\x01",
    "truncated": encode_frame(FRAMES[11], LIMIT)[:-5],
    "bad wire type": b"\x0f\x00",
    "varint overflow": b"\x18" + b"\xff" * 11,
    "invalid utf-8 in string": b"\x3a\x03\x0a\x01\xff",
    "hello without edge_id": _frame_bytes(hello=pb.Hello(protocol_version=1)),
    "hello without protocol_version": _frame_bytes(hello=pb.Hello(edge_id="e")),
    "welcome without protocol_version": _frame_bytes(welcome=pb.Welcome(heartbeat_interval_s=1)),
    "welcome with NaN heartbeat": _frame_bytes(
        welcome=pb.Welcome(protocol_version=1, heartbeat_interval_s=float("nan"))
    ),
    "welcome with zero heartbeat": _frame_bytes(welcome=pb.Welcome(protocol_version=1)),
    "request without request_id": _frame_bytes(request=pb.Request(destroy=pb.Destroy())),
    "request without op": _frame_bytes(request=pb.Request(request_id="r1")),
    "provision with NaN cpus": _frame_bytes(
        request=pb.Request(request_id="r1", provision=pb.Provision(cpus=float("nan")))
    ),
    "provision with infinite cpus": _frame_bytes(
        request=pb.Request(request_id="r1", provision=pb.Provision(cpus=float("inf")))
    ),
    "provision with negative cpus": _frame_bytes(
        request=pb.Request(request_id="r1", provision=pb.Provision(cpus=-1.0))
    ),
    "result chunk without request_id": _frame_bytes(result_chunk=pb.ResultChunk(last=True)),
    "cancel without request_id": _frame_bytes(cancel=pb.Cancel()),
    "ack without request_id": _frame_bytes(ack=pb.Ack()),
    "unknown error code": _frame_bytes(error=pb.Error(code=99, message="?")),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("data", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_frames(data: bytes) -> None:
    with pytest.raises(MalformedFrame) as info:
        decode_frame(data, LIMIT)
    assert info.value.code is ErrorCode.MALFORMED_FRAME


@pytest.mark.parametrize("seed", range(200))
def test_random_garbage_is_malformed(seed: int) -> None:
    rng = random.Random(seed)
    data = rng.randbytes(rng.randint(1, 512))
    with pytest.raises(MalformedFrame):
        decode_frame(data, LIMIT)


MALFORMED_OUTCOMES: dict[str, bytes] = {
    "empty": b"",
    "garbage": b"\xff\xff\xff",
    "empty content block": pb.Outcome(
        tool_result=pb.ToolResult(content=[pb.ContentBlock()])
    ).SerializeToString(),
    "unknown failure code": pb.Outcome(failure=pb.Failure(code=1234)).SerializeToString(),  # type: ignore[arg-type]
    "truncated": encode_outcome(ToolResult.text("x" * 100))[:-10],
}


@pytest.mark.parametrize("data", MALFORMED_OUTCOMES.values(), ids=MALFORMED_OUTCOMES.keys())
def test_malformed_outcomes(data: bytes) -> None:
    with pytest.raises(MalformedFrame):
        decode_outcome(data)


@pytest.mark.parametrize(
    "frame",
    [
        Hello("e", "v", -1, (), "", 0, 0),
        Heartbeat(-1, 0),
        Request("r", "s", "k", 0, Provision(memory_bytes=-5)),
        Request("r", "s", "k", 0, Execute("t", "{}", timeout_ms=2**64)),
        ResultChunk("r", -1, True, b""),
        Drain("x", -1),
        # the rules decode_frame enforces hold on the way out too
        Hello("", "v", 1, (), "", 0, 0),
        Hello("e", "v", 0, (), "", 0, 0),
        Welcome("cp", "v", 1, 0.0),
        Welcome("cp", "v", 1, float("inf")),
        Request("", "s", "k", 0, Destroy()),
        Request("r", "s", "k", 0, Provision(cpus=float("nan"))),
        ResultChunk("", 0, True, b""),
        Cancel(""),
        Ack(""),
    ],
    ids=lambda f: type(f).__name__,
)
def test_encode_rejects_values_the_wire_cannot_carry(frame: Frame) -> None:
    with pytest.raises(MalformedFrame):
        encode_frame(frame, LIMIT)


def test_encode_rejects_non_frames() -> None:
    with pytest.raises(MalformedFrame):
        encode_frame(ToolResult.text("not a frame"), LIMIT)  # type: ignore[arg-type]
    with pytest.raises(MalformedFrame):
        encode_outcome(Ack("r"))  # type: ignore[arg-type]


def test_chunk_repr_hides_data() -> None:
    assert "data" not in repr(ResultChunk("r", 0, True, b"x" * 100))
