"""Codec: every frame and outcome round-trips; bad bytes become typed errors."""

from __future__ import annotations

import random

import pytest

from outpost_wire import (
    Ack,
    Cancel,
    CatalogUpdate,
    Destroy,
    Destroyed,
    DocumentBlock,
    Drain,
    Egress,
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
    McpCall,
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
from outpost_wire.frames import BLOB_CHUNK_BYTES, BlobMount, BlobStored, PutBlob

LIMIT = 4 * 1024 * 1024
U32 = 2**32 - 1
U64 = 2**64 - 1
CATALOG = '{"servers": [{"name": "github", "tools": [{"name": "search", "input_schema": {}}]}]}'
MAX_HOSTS = tuple(f"{i:03d}" + "h" * 250 for i in range(256))  # 256 hosts of 253 characters
SHA = "ab" * 32
BLOBS = (
    BlobMount("file", "file_1", SHA, 10, "/mnt/session/uploads/file_1"),
    BlobMount("skill", "my-skill", "cd" * 32, 2**40, "/mnt/skills/my-skill"),
)
ALLOWLIST = Egress("allowlist", ("pypi.org", "files.pythonhosted.org", "*.github.com"))

FRAMES: list[Frame] = [
    Hello("edge-1", "0.1.0", 1, ("docker", "mcp"), "sha256:ab", 8, 3, "env-1"),
    Hello("édge-✓", "", 1, (), "", 0, 0),
    Hello("e", "v", U32, tuple(f"cap{i}" for i in range(50)), "d", U32, U32, "x"),
    Hello("edge-1", "0.1.0", 1, ("mcp",), "", 1, 0, "env-1", "sha256:cat", CATALOG),
    Hello("e", "v", 1, (), "", 0, 0, mcp_catalog_digest="d"),
    Hello("e", "v", 1, (), "", 0, 0, mcp_catalog_json="[]"),
    Welcome("cp-1", "0.1.0", 1, 10.0),
    Welcome("", "", 2, 0.25),
    Heartbeat(0, 0),
    Heartbeat(U64, -(2**63), U32),
    Heartbeat(7, 123_456, 2),
    Request("r1", "s1", "toolu_1", 0, Provision()),
    Request("r2", "s1", "k", 1_700_000_000_000, Provision("python:3.12", 1.5, 2**31, 256)),
    Request("r3", "s1", "k", -1, Provision(memory_bytes=U64, pids=U32)),
    Request("r3a", "s1", "k", 0, Provision("python:3.12", egress=ALLOWLIST)),
    Request("r3b", "s1", "k", 0, Provision(egress=Egress("unrestricted"))),
    Request("r3c", "s1", "k", 0, Provision(egress=Egress("allowlist"))),  # allowlist of nothing
    Request("r3d", "s1", "k", 0, Provision(egress=Egress("none", ("ignored.example",)))),
    Request("r3e", "s1", "k", 0, Provision(egress=Egress("allowlist", MAX_HOSTS))),
    Request("r3f", "s1", "k", 0, Provision(egress=Egress("allowlist", ("a", "é✓.example")))),
    Request("r4", "s2", "toolu_2", 2**63 - 1, Execute("bash", '{"command": "ls"}', 30_000)),
    Request("r5", "s2", "", 0, Execute("", "")),
    Request("r5a", "s2", "k", 0, Execute("bash", "{}", sandbox=Provision())),
    Request("r5b", "s2", "k", 0, Execute("bash", "{}", 5, Provision("node:22", 0.5, 2**30, 64, ALLOWLIST))),
    Request("r6", "s3", "k", 0, Destroy()),
    Request("r6a", "s3", "", 0, PutBlob(SHA, 10, 0, b"0123456789")),
    Request(
        "r6b", "s3", "", 0, PutBlob(SHA, BLOB_CHUNK_BYTES * 2, BLOB_CHUNK_BYTES, b"x" * BLOB_CHUNK_BYTES)
    ),
    Request("r6c", "s3", "", 0, PutBlob(SHA, 0, 0, b"")),
    Request("r6d", "s3", "k", 0, Execute("bash", "{}", sandbox=Provision(blob_mounts=BLOBS))),
    Request("r7", "s4", "toolu_3", 0, McpCall("github", "search", '{"q": "outpost"}', 10_000)),
    Request("r8", "s4", "", -1, McpCall("s", "t", "", U64)),
    Request("r9", "s4", "k", 0, McpCall("sérvér", "tööl", "{}")),
    ResultChunk("r1", 0, True, b""),
    ResultChunk("r1", U32, False, bytes(range(256)) * 10),
    Cancel("r1"),
    Ack("r1"),
    Drain("sigterm", 30_000),
    Drain("", 0),
    CatalogUpdate("sha256:cat", CATALOG),
    CatalogUpdate("", ""),
    CatalogUpdate("d✓", '{"x": "' + "y" * 100_000 + '"}'),
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
    BlobStored(SHA, 262_144, False),
    BlobStored(SHA, U64, True),
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
    assert ops == {Provision, Execute, Destroy, McpCall, PutBlob}


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


def test_mcp_connection_failed_code() -> None:
    code = ErrorCode.MCP_CONNECTION_FAILED
    assert code.value == "mcp_connection_failed"
    assert (
        pb.ErrorCode.Name(pb.ErrorCode.Value("ERROR_CODE_MCP_CONNECTION_FAILED")) == f"ERROR_CODE_{code.name}"
    )
    assert decode_outcome(encode_outcome(Failure(code, "github: refused"))) == Failure(
        code, "github: refused"
    )


def test_egress_mode_mapping_is_total() -> None:
    assert set(pb.EgressMode.keys()) == {
        "EGRESS_MODE_NONE",
        "EGRESS_MODE_ALLOWLIST",
        "EGRESS_MODE_UNRESTRICTED",
    }
    assert pb.EgressMode.Value("EGRESS_MODE_NONE") == 0  # an absent egress means no network


def test_defaults_of_the_new_fields() -> None:
    assert Provision().egress == Egress() == Egress("none", ())
    assert Execute("t", "{}").sandbox is None
    assert McpCall("s", "t", "{}").timeout_ms == 0
    hello = Hello("e", "v", 1, (), "", 0, 0)
    assert hello.mcp_catalog_digest == hello.mcp_catalog_json == ""


def test_catalog_json_is_kept_out_of_reprs() -> None:
    assert "servers" not in repr(CatalogUpdate("d", CATALOG))
    assert "servers" not in repr(
        Hello("e", "v", 1, (), "", 0, 0, mcp_catalog_digest="d", mcp_catalog_json=CATALOG)
    )
    assert "'d'" in repr(CatalogUpdate("d", CATALOG))


# --- compatibility with frames from before the MCP / egress additions ------------------------------

# Encoded by the codec as it was before Hello.mcp_catalog_*, Provision.egress, Execute.sandbox and
# McpCall existed (same PROTOCOL_VERSION): they must decode to the new fields' defaults, and a new
# frame that uses only those defaults must encode to exactly these bytes.
OLD_BYTES: dict[str, tuple[str, Frame]] = {
    "hello": (
        "0a340a06656467652d311205302e312e3018012206646f636b657222036d63702a097368613235363a61623008"
        "38034205656e762d31",
        Hello("edge-1", "0.1.0", 1, ("docker", "mcp"), "sha256:ab", 8, 3, "env-1"),
    ),
    "provision": (
        "22330a027232120273311a016b2080d095ffbc312a1f0a0b707974686f6e3a332e313211000000000000f83f18"
        "8080808008208002",
        Request("r2", "s1", "k", 1_700_000_000_000, Provision("python:3.12", 1.5, 2**31, 256)),
    ),
    "execute": (
        "22300a027234120273321a07746f6f6c755f32321d0a046261736812117b22636f6d6d616e64223a20226c7322"
        "7d18b0ea01",
        Request("r4", "s2", "toolu_2", 0, Execute("bash", '{"command": "ls"}', 30_000)),
    ),
}


@pytest.mark.parametrize(("hex_bytes", "frame"), OLD_BYTES.values(), ids=OLD_BYTES.keys())
def test_old_frames_decode_with_defaults(hex_bytes: str, frame: Frame) -> None:
    decoded = decode_frame(bytes.fromhex(hex_bytes), LIMIT)
    assert decoded == frame
    if isinstance(decoded, Hello):
        assert decoded.mcp_catalog_digest == decoded.mcp_catalog_json == ""
    elif isinstance(decoded, Request) and isinstance(decoded.op, Provision):
        assert decoded.op.egress == Egress("none", ())
    elif isinstance(decoded, Request) and isinstance(decoded.op, Execute):
        assert decoded.op.sandbox is None
    assert encode_frame(frame, LIMIT).hex() == hex_bytes


def test_empty_egress_and_sandbox_messages_decode_as_defaults() -> None:
    provision = _frame_bytes(request=pb.Request(request_id="r", provision=pb.Provision(egress=pb.Egress())))
    assert decode_frame(provision, LIMIT) == Request("r", "", "", 0, Provision())
    execute = _frame_bytes(request=pb.Request(request_id="r", execute=pb.Execute(sandbox=pb.Provision())))
    assert decode_frame(execute, LIMIT) == Request("r", "", "", 0, Execute("", "", sandbox=Provision()))


def test_execute_sandbox_presence_survives_the_wire() -> None:
    with_default = encode_frame(Request("r", "s", "k", 0, Execute("t", "{}", sandbox=Provision())), LIMIT)
    without = encode_frame(Request("r", "s", "k", 0, Execute("t", "{}")), LIMIT)
    assert with_default != without
    decoded = decode_frame(with_default, LIMIT)
    assert isinstance(decoded, Request) and isinstance(decoded.op, Execute)
    assert decoded.op.sandbox == Provision()


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


def _provision_bytes(egress: pb.Egress) -> bytes:
    return _frame_bytes(request=pb.Request(request_id="r1", provision=pb.Provision(egress=egress)))


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
    "unknown egress mode": _provision_bytes(pb.Egress(mode=3)),  # type: ignore[arg-type]
    "empty egress host": _provision_bytes(pb.Egress(mode=1, allowed_hosts=["a", ""])),  # type: ignore[arg-type]
    "egress host of 254 characters": _provision_bytes(pb.Egress(mode=1, allowed_hosts=["h" * 254])),  # type: ignore[arg-type]
    "257 egress hosts": _provision_bytes(pb.Egress(mode=1, allowed_hosts=[f"h{i}" for i in range(257)])),  # type: ignore[arg-type]
    "execute sandbox with bad egress": _frame_bytes(
        request=pb.Request(
            request_id="r1",
            execute=pb.Execute(tool="t", sandbox=pb.Provision(egress=pb.Egress(mode=7))),  # type: ignore[arg-type]
        )
    ),
    "execute sandbox with NaN cpus": _frame_bytes(
        request=pb.Request(request_id="r1", execute=pb.Execute(sandbox=pb.Provision(cpus=float("nan"))))
    ),
    "mcp call without server": _frame_bytes(
        request=pb.Request(request_id="r1", mcp_call=pb.McpCall(tool="t", arguments_json="{}"))
    ),
    "mcp call without tool": _frame_bytes(
        request=pb.Request(request_id="r1", mcp_call=pb.McpCall(server="s", arguments_json="{}"))
    ),
    "empty mcp call": _frame_bytes(request=pb.Request(request_id="r1", mcp_call=pb.McpCall())),
    "invalid utf-8 in catalog": b"\x52\x03\x12\x01\xff",
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
        # egress, McpCall and Execute.sandbox
        Request("r", "s", "k", 0, Provision(egress=Egress("bogus"))),
        Request("r", "s", "k", 0, Provision(egress=Egress(""))),
        Request("r", "s", "k", 0, Provision(egress=Egress("NONE"))),
        Request("r", "s", "k", 0, Provision(egress=Egress("allowlist", ("ok", "")))),
        Request("r", "s", "k", 0, Provision(egress=Egress("allowlist", ("h" * 254,)))),
        Request("r", "s", "k", 0, Provision(egress=Egress("allowlist", (*MAX_HOSTS, "one.more")))),
        Request("r", "s", "k", 0, Provision(egress=Egress("allowlist", (b"bytes.example",)))),  # type: ignore[arg-type]
        Request("r", "s", "k", 0, Provision(egress=None)),  # type: ignore[arg-type]
        Request("r", "s", "k", 0, Provision(egress=Egress("allowlist", "pypi.org"))),  # type: ignore[arg-type]
        Request("r", "s", "k", 0, Execute("t", "{}", sandbox=Provision(egress=Egress("open")))),
        Request("r", "s", "k", 0, Execute("t", "{}", sandbox=Provision(cpus=float("inf")))),
        Request("r", "s", "k", 0, Execute("t", "{}", sandbox=Provision(pids=-1))),
        Request("r", "s", "k", 0, Execute("t", "{}", sandbox=Destroy())),  # type: ignore[arg-type]
        Request("r", "s", "k", 0, McpCall("", "t", "{}")),
        Request("r", "s", "k", 0, McpCall("s", "", "{}")),
        Request("r", "s", "k", 0, McpCall("s", "t", "{}", timeout_ms=-1)),
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


def test_oversized_catalog_fails_at_encode() -> None:
    update = CatalogUpdate("d", "x" * 2000)
    with pytest.raises(FrameTooLarge):
        encode_frame(update, 2000)
    hello = Hello("e", "v", 1, (), "", 0, 0, mcp_catalog_json="x" * 2000)
    with pytest.raises(FrameTooLarge):
        encode_frame(hello, 2000)


def test_chunk_repr_hides_data() -> None:
    assert "data" not in repr(ResultChunk("r", 0, True, b"x" * 100))


@pytest.mark.parametrize(
    "op",
    [
        PutBlob("AB" * 32, 1, 0, b"x"),  # the sha256 is lower-case hex
        PutBlob("ab" * 31, 1, 0, b"x"),
        PutBlob(SHA, 1, 0, b"xy"),  # past total_size
        PutBlob(SHA, 4, 3, b"xy"),
        Provision(blob_mounts=(BlobMount("dir", "n", SHA, 1, "/mnt/session/x"),)),
        Provision(blob_mounts=(BlobMount("file", "n", SHA, 1, "relative/x"),)),
    ],
)
def test_bad_blob_requests_are_refused(op: PutBlob | Provision) -> None:
    with pytest.raises(MalformedFrame):
        encode_frame(Request("r", "s", "", 0, op), LIMIT)


def test_a_full_blob_chunk_fits_a_default_frame() -> None:
    frame = Request(
        "req_" + "f" * 32,
        "sesn_" + "f" * 24,
        "",
        2**62,
        PutBlob(SHA, 2**40, 2**39, b"\xff" * BLOB_CHUNK_BYTES),
    )
    assert len(encode_frame(frame, LIMIT)) < LIMIT
