"""Frame codec: the only module that touches the generated protobuf classes.

Transports hand the codec raw bytes (gRPC with identity serializers, WebSocket binary messages), so
this is the one place that enforces the frame size limit and decides what counts as malformed:

* :func:`decode_frame` checks the size *before* parsing (:class:`FrameTooLarge`), then raises
  :class:`MalformedFrame` for bytes that do not parse, an empty ``body`` oneof (which is also what a
  frame type from a newer protocol looks like), an unknown enum number, or a missing required field
  (empty ``request_id``, ``edge_id``, no request ``op``, a non-finite number, an McpCall without
  ``server`` or ``tool``, an egress mode or host list outside the rules of
  :class:`~outpost_wire.frames.Egress`, a repository outside the rules of
  :class:`~outpost_wire.frames.Repository`).
* :func:`encode_frame` raises :class:`FrameTooLarge` when the encoded frame would exceed the limit,
  and :class:`MalformedFrame` when a dataclass holds a value the wire cannot carry (a negative
  unsigned integer, a wrong type) or breaks a rule the decoder enforces (``_validate`` serves
  both directions), so a bad frame fails at its sender, not by tearing down the peer's tunnel.
* Outcomes (what a request resolves to) have their own message; :func:`encode_outcome` produces the
  bytes that :class:`~outpost_wire.frames.ResultChunk` frames carry in slices.

:class:`~outpost_wire.errors.ErrorCode` maps to the proto enum by name (``ERROR_CODE_<MEMBER>``);
the mapping is built and checked for totality at import, so the two cannot drift apart silently.
Egress modes map the same way (``EGRESS_MODE_<MODE>``). Fields added after the first release are
encoded so that a frame using only their defaults is byte-for-byte what older code produced (an
``Egress()`` or an ``Execute.sandbox`` of ``None`` is left out), and decode to their defaults when
absent.
Semantic checks that concern one request only (unknown tool, bad JSON input, policy) are not made
here: they are answered with a :class:`~outpost_wire.frames.Failure` without tearing the tunnel down.
"""

from __future__ import annotations

import math
import re
from typing import Final, NoReturn

from google.protobuf.message import DecodeError

from outpost_wire._proto import tunnel_pb2 as pb
from outpost_wire.errors import ErrorCode, FrameTooLarge, MalformedFrame
from outpost_wire.frames import (
    BLOB_KINDS,
    CHECKOUT_KINDS,
    EGRESS_MODES,
    MAX_BLOB_MOUNTS,
    MAX_EGRESS_HOST_CHARS,
    MAX_EGRESS_HOSTS,
    MAX_MEMORY_MOUNTS,
    MAX_REPOSITORIES,
    MAX_REPOSITORY_FIELD_CHARS,
    Ack,
    BlobMount,
    BlobStored,
    Cancel,
    CatalogUpdate,
    Destroy,
    Destroyed,
    Drain,
    Egress,
    ErrorFrame,
    Execute,
    Failure,
    Frame,
    Heartbeat,
    Hello,
    McpCall,
    MemoryFile,
    MemoryMount,
    MemorySnapshot,
    Operation,
    Outcome,
    Provision,
    Provisioned,
    PutBlob,
    Repository,
    Request,
    ResultChunk,
    Welcome,
)
from outpost_wire.results import ContentBlock, DocumentBlock, ImageBlock, MemoryChange, TextBlock, ToolResult

__all__ = [
    "decode_frame",
    "decode_outcome",
    "encode_frame",
    "encode_outcome",
    "max_chunk_payload",
]

_CODE_TO_PB: Final[dict[ErrorCode, int]] = {
    code: pb.ErrorCode.Value(f"ERROR_CODE_{code.name}") for code in ErrorCode
}
_PB_TO_CODE: Final[dict[int, ErrorCode]] = {number: code for code, number in _CODE_TO_PB.items()}
if set(_PB_TO_CODE) != set(pb.ErrorCode.values()):  # pragma: no cover - guards regeneration drift
    raise ImportError("tunnel.proto ErrorCode and outpost_wire.errors.ErrorCode differ")

_MODE_TO_PB: Final[dict[str, int]] = {
    mode: pb.EgressMode.Value(f"EGRESS_MODE_{mode.upper()}") for mode in EGRESS_MODES
}
_PB_TO_MODE: Final[dict[int, str]] = {number: mode for mode, number in _MODE_TO_PB.items()}
if set(_PB_TO_MODE) != set(pb.EgressMode.values()):  # pragma: no cover - guards regeneration drift
    raise ImportError("tunnel.proto EgressMode and outpost_wire.frames.EGRESS_MODES differ")
_DEFAULT_EGRESS: Final = Egress()

# A ResultChunk frame grows by at most this much when data is added: the data field's tag (1) and
# length varint (<= 5 below 4 GiB), and the result_chunk length prefix growing from 1 to <= 5 bytes.
_CHUNK_DATA_OVERHEAD: Final = 10
_MAX_UINT32: Final = 0xFFFFFFFF
_SLUG: Final = re.compile(r"^[A-Za-z0-9._-]{1,100}$")
_SHA256: Final = re.compile(r"^[0-9a-f]{64}$")


# --- frames --------------------------------------------------------------------------------------


def encode_frame(frame: Frame, max_frame_bytes: int) -> bytes:
    """Serialize ``frame``; raise :class:`FrameTooLarge` if it exceeds ``max_frame_bytes``."""
    try:
        _validate(frame)
        msg = _frame_to_pb(frame)
    except (TypeError, ValueError) as exc:
        raise MalformedFrame(f"cannot encode {type(frame).__name__}: {exc}") from exc
    size = msg.ByteSize()
    if size > max_frame_bytes:
        raise FrameTooLarge(
            f"{type(frame).__name__} frame of {size} bytes exceeds the limit of {max_frame_bytes}"
        )
    return msg.SerializeToString()


def decode_frame(data: bytes, max_frame_bytes: int) -> Frame:
    """Parse one frame; raise :class:`FrameTooLarge` or :class:`MalformedFrame`."""
    if len(data) > max_frame_bytes:
        raise FrameTooLarge(f"frame of {len(data)} bytes exceeds the limit of {max_frame_bytes}")
    msg = pb.Frame()
    _parse(msg, data, "frame")
    frame = _frame_from_pb(msg)
    _validate(frame)
    return frame


def _frame_from_pb(msg: pb.Frame) -> Frame:
    kind = msg.WhichOneof("body")
    if kind == "hello":
        h = msg.hello
        return Hello(
            edge_id=h.edge_id,
            software_version=h.software_version,
            protocol_version=h.protocol_version,
            capabilities=tuple(h.capabilities),
            policy_digest=h.policy_digest,
            sandbox_capacity=h.sandbox_capacity,
            sandboxes_in_use=h.sandboxes_in_use,
            environment_id=h.environment_id,
            mcp_catalog_digest=h.mcp_catalog_digest,
            mcp_catalog_json=h.mcp_catalog_json,
            tunnel_tokens=tuple(h.tunnel_tokens),
        )
    if kind == "welcome":
        w = msg.welcome
        return Welcome(
            control_plane_id=w.control_plane_id,
            software_version=w.software_version,
            protocol_version=w.protocol_version,
            heartbeat_interval_s=w.heartbeat_interval_s,
        )
    if kind == "heartbeat":
        b = msg.heartbeat
        return Heartbeat(seq=b.seq, sent_at_ms=b.sent_at_ms, sandboxes_in_use=b.sandboxes_in_use)
    if kind == "request":
        return _request_from_pb(msg.request)
    if kind == "result_chunk":
        c = msg.result_chunk
        return ResultChunk(request_id=c.request_id, index=c.index, last=c.last, data=c.data)
    if kind == "cancel":
        return Cancel(request_id=msg.cancel.request_id)
    if kind == "ack":
        return Ack(request_id=msg.ack.request_id)
    if kind == "drain":
        return Drain(reason=msg.drain.reason, grace_ms=msg.drain.grace_ms)
    if kind == "error":
        return ErrorFrame(code=_code_from_pb(msg.error.code), message=msg.error.message)
    if kind == "catalog_update":
        u = msg.catalog_update
        return CatalogUpdate(digest=u.digest, catalog_json=u.catalog_json)
    _malformed("frame has no body (empty or unknown frame type)")


def max_chunk_payload(request_id: str, max_frame_bytes: int) -> int:
    """How many outcome bytes fit in one ResultChunk frame for ``request_id``.

    Raises :class:`FrameTooLarge` if not even one byte fits.
    """
    probe = pb.Frame(result_chunk=pb.ResultChunk(request_id=request_id, index=_MAX_UINT32, last=True))
    room = max_frame_bytes - probe.ByteSize() - _CHUNK_DATA_OVERHEAD
    if room <= 0:
        raise FrameTooLarge(f"max_frame_bytes={max_frame_bytes} leaves no room for result data")
    return room


def _frame_to_pb(frame: Frame) -> pb.Frame:
    match frame:
        case Hello():
            return pb.Frame(
                hello=pb.Hello(
                    edge_id=frame.edge_id,
                    software_version=frame.software_version,
                    protocol_version=frame.protocol_version,
                    capabilities=frame.capabilities,
                    policy_digest=frame.policy_digest,
                    sandbox_capacity=frame.sandbox_capacity,
                    sandboxes_in_use=frame.sandboxes_in_use,
                    environment_id=frame.environment_id,
                    mcp_catalog_digest=frame.mcp_catalog_digest,
                    mcp_catalog_json=frame.mcp_catalog_json,
                    tunnel_tokens=frame.tunnel_tokens,
                )
            )
        case Welcome():
            return pb.Frame(
                welcome=pb.Welcome(
                    control_plane_id=frame.control_plane_id,
                    software_version=frame.software_version,
                    protocol_version=frame.protocol_version,
                    heartbeat_interval_s=frame.heartbeat_interval_s,
                )
            )
        case Heartbeat():
            return pb.Frame(
                heartbeat=pb.Heartbeat(
                    seq=frame.seq, sent_at_ms=frame.sent_at_ms, sandboxes_in_use=frame.sandboxes_in_use
                )
            )
        case Request():
            return pb.Frame(request=_request_to_pb(frame))
        case ResultChunk():
            return pb.Frame(
                result_chunk=pb.ResultChunk(
                    request_id=frame.request_id, index=frame.index, last=frame.last, data=frame.data
                )
            )
        case Cancel():
            return pb.Frame(cancel=pb.Cancel(request_id=frame.request_id))
        case Ack():
            return pb.Frame(ack=pb.Ack(request_id=frame.request_id))
        case Drain():
            return pb.Frame(drain=pb.Drain(reason=frame.reason, grace_ms=frame.grace_ms))
        case ErrorFrame():
            return pb.Frame(error=pb.Error(code=_code_to_pb(frame.code), message=frame.message))
        case CatalogUpdate():
            return pb.Frame(
                catalog_update=pb.CatalogUpdate(digest=frame.digest, catalog_json=frame.catalog_json)
            )
    raise TypeError(f"not a frame: {frame!r}")


def _request_to_pb(request: Request) -> pb.Request:
    msg = pb.Request(
        request_id=request.request_id,
        session_id=request.session_id,
        idempotency_key=request.idempotency_key,
        deadline_ms=request.deadline_ms,
    )
    op = request.op
    match op:
        case Provision():
            msg.provision.CopyFrom(_provision_to_pb(op))
        case Execute():
            msg.execute.CopyFrom(pb.Execute(tool=op.tool, input_json=op.input_json, timeout_ms=op.timeout_ms))
            if op.sandbox is not None:
                msg.execute.sandbox.CopyFrom(_provision_to_pb(op.sandbox))
            if op.memory is not None:
                msg.execute.memory.SetInParent()
                msg.execute.memory.stores.extend(
                    pb.MemorySnapshot(
                        store_id=snap.store_id,
                        files=[pb.MemoryFile(path=f.path, content=f.content) for f in snap.files],
                    )
                    for snap in op.memory
                )
        case Destroy():
            msg.destroy.SetInParent()
        case PutBlob():
            msg.put_blob.CopyFrom(
                pb.PutBlob(sha256=op.sha256, total_size=op.total_size, offset=op.offset, data=op.data)
            )
        case McpCall():
            msg.mcp_call.CopyFrom(
                pb.McpCall(
                    server=op.server, tool=op.tool, arguments_json=op.arguments_json, timeout_ms=op.timeout_ms
                )
            )
        case _:
            raise TypeError(f"not an operation: {op!r}")
    return msg


def _provision_to_pb(op: Provision) -> pb.Provision:
    msg = pb.Provision(image=op.image, cpus=op.cpus, memory_bytes=op.memory_bytes, pids=op.pids)
    if op.egress != _DEFAULT_EGRESS:  # left out otherwise: the bytes older code produced
        msg.egress.CopyFrom(
            pb.Egress(mode=_mode_to_pb(op.egress.mode), allowed_hosts=op.egress.allowed_hosts)
        )
    msg.repositories.extend(
        pb.Repository(
            id=r.id,
            url=r.url,
            mount_path=r.mount_path,
            checkout_kind=r.checkout_kind,
            checkout_ref=r.checkout_ref,
            token=r.token,
        )
        for r in op.repositories
    )
    msg.memory_mounts.extend(
        pb.MemoryMount(store_id=m.store_id, slug=m.slug, read_only=m.read_only) for m in op.memory_mounts
    )
    msg.blob_mounts.extend(
        pb.BlobMount(kind=b.kind, name=b.name, sha256=b.sha256, size=b.size, mount_path=b.mount_path)
        for b in op.blob_mounts
    )
    return msg


def _provision_from_pb(msg: pb.Provision) -> Provision:
    egress = Egress(mode=_mode_from_pb(msg.egress.mode), allowed_hosts=tuple(msg.egress.allowed_hosts))
    repositories = tuple(
        Repository(
            id=r.id,
            url=r.url,
            mount_path=r.mount_path,
            checkout_kind=r.checkout_kind,
            checkout_ref=r.checkout_ref,
            token=r.token,
        )
        for r in msg.repositories
    )
    return Provision(
        image=msg.image,
        cpus=msg.cpus,
        memory_bytes=msg.memory_bytes,
        pids=msg.pids,
        egress=egress,
        repositories=repositories,
        memory_mounts=tuple(
            MemoryMount(store_id=m.store_id, slug=m.slug, read_only=m.read_only) for m in msg.memory_mounts
        ),
        blob_mounts=tuple(
            BlobMount(kind=b.kind, name=b.name, sha256=b.sha256, size=b.size, mount_path=b.mount_path)
            for b in msg.blob_mounts
        ),
    )


def _request_from_pb(msg: pb.Request) -> Request:
    kind = msg.WhichOneof("op")
    op: Operation
    if kind == "provision":
        op = _provision_from_pb(msg.provision)
    elif kind == "execute":
        e = msg.execute
        sandbox = _provision_from_pb(e.sandbox) if e.HasField("sandbox") else None
        memory = (
            tuple(
                MemorySnapshot(s.store_id, tuple(MemoryFile(f.path, f.content) for f in s.files))
                for s in e.memory.stores
            )
            if e.HasField("memory")
            else None
        )
        op = Execute(
            tool=e.tool, input_json=e.input_json, timeout_ms=e.timeout_ms, sandbox=sandbox, memory=memory
        )
    elif kind == "destroy":
        op = Destroy()
    elif kind == "put_blob":
        b = msg.put_blob
        op = PutBlob(sha256=b.sha256, total_size=b.total_size, offset=b.offset, data=b.data)
    elif kind == "mcp_call":
        m = msg.mcp_call
        op = McpCall(server=m.server, tool=m.tool, arguments_json=m.arguments_json, timeout_ms=m.timeout_ms)
    else:
        _malformed("request has no op")
    return Request(
        request_id=msg.request_id,
        session_id=msg.session_id,
        idempotency_key=msg.idempotency_key,
        deadline_ms=msg.deadline_ms,
        op=op,
    )


# --- outcomes ------------------------------------------------------------------------------------


def encode_outcome(outcome: Outcome) -> bytes:
    """Serialize what a request resolved to (the payload that ResultChunk frames carry)."""
    try:
        msg = _outcome_to_pb(outcome)
    except (TypeError, ValueError) as exc:
        raise MalformedFrame(f"cannot encode {type(outcome).__name__}: {exc}") from exc
    return msg.SerializeToString()


def decode_outcome(data: bytes) -> Outcome:
    """Parse a reassembled outcome; raise :class:`MalformedFrame` if it is not one."""
    msg = pb.Outcome()
    _parse(msg, data, "outcome")
    kind = msg.WhichOneof("kind")
    if kind == "tool_result":
        blocks = tuple(_block_from_pb(b) for b in msg.tool_result.content)
        changes = tuple(
            MemoryChange(
                store_id=c.store_id,
                path=c.path,
                content=c.content if c.HasField("content") else None,
                base_sha256=c.base_sha256,
                error=c.error,
            )
            for c in msg.tool_result.memory_changes
        )
        return ToolResult(content=blocks, is_error=msg.tool_result.is_error, memory_changes=changes)
    if kind == "provisioned":
        p = msg.provisioned
        return Provisioned(sandbox_id=p.sandbox_id, image=p.image, reused=p.reused)
    if kind == "destroyed":
        return Destroyed(existed=msg.destroyed.existed)
    if kind == "failure":
        return Failure(code=_code_from_pb(msg.failure.code), message=msg.failure.message)
    if kind == "blob_stored":
        s = msg.blob_stored
        return BlobStored(sha256=s.sha256, received=s.received, complete=s.complete)
    _malformed("outcome has no kind")


def _outcome_to_pb(outcome: Outcome) -> pb.Outcome:
    match outcome:
        case ToolResult():
            blocks = [_block_to_pb(b) for b in outcome.content]
            changes = [
                pb.MemoryChange(
                    store_id=c.store_id,
                    path=c.path,
                    content=c.content,
                    base_sha256=c.base_sha256,
                    error=c.error,
                )
                for c in outcome.memory_changes
            ]
            result = pb.ToolResult(content=blocks, is_error=outcome.is_error, memory_changes=changes)
            return pb.Outcome(tool_result=result)
        case Provisioned():
            return pb.Outcome(
                provisioned=pb.Provisioned(
                    sandbox_id=outcome.sandbox_id, image=outcome.image, reused=outcome.reused
                )
            )
        case Destroyed():
            return pb.Outcome(destroyed=pb.Destroyed(existed=outcome.existed))
        case BlobStored():
            return pb.Outcome(
                blob_stored=pb.BlobStored(
                    sha256=outcome.sha256, received=outcome.received, complete=outcome.complete
                )
            )
        case Failure():
            return pb.Outcome(failure=pb.Failure(code=_code_to_pb(outcome.code), message=outcome.message))
    raise TypeError(f"not an outcome: {outcome!r}")


def _block_to_pb(block: ContentBlock) -> pb.ContentBlock:
    match block:
        case TextBlock():
            return pb.ContentBlock(text=pb.TextBlock(text=block.text))
        case ImageBlock():
            return pb.ContentBlock(image=pb.ImageBlock(media_type=block.media_type, data=block.data))
        case DocumentBlock():
            return pb.ContentBlock(document=pb.DocumentBlock(media_type=block.media_type, data=block.data))
    raise TypeError(f"not a content block: {block!r}")


def _block_from_pb(msg: pb.ContentBlock) -> ContentBlock:
    kind = msg.WhichOneof("block")
    if kind == "text":
        return TextBlock(text=msg.text.text)
    if kind == "image":
        return ImageBlock(media_type=msg.image.media_type, data=msg.image.data)
    if kind == "document":
        return DocumentBlock(media_type=msg.document.media_type, data=msg.document.data)
    _malformed("content block has no kind")


# --- helpers -------------------------------------------------------------------------------------


def _validate(frame: Frame) -> None:
    """Rules a frame must follow beyond its types; checked on encode and on decode alike."""
    match frame:
        case Hello():
            _require(frame.edge_id, "hello.edge_id")
            _require(frame.protocol_version >= 1, "hello.protocol_version")
        case Welcome():
            _require(frame.protocol_version >= 1, "welcome.protocol_version")
            interval = frame.heartbeat_interval_s
            _require(math.isfinite(interval) and interval > 0, "welcome.heartbeat_interval_s")
        case Request():
            _require(frame.request_id, "request.request_id")
            _validate_op(frame.op)
        case ResultChunk() | Cancel() | Ack():
            _require(frame.request_id, f"{type(frame).__name__}.request_id")


def _validate_op(op: Operation) -> None:
    match op:
        case Provision():
            _validate_provision(op, "provision")
        case Execute():
            if op.sandbox is not None:
                _require(isinstance(op.sandbox, Provision), "execute.sandbox")
                _validate_provision(op.sandbox, "execute.sandbox")
        case McpCall():
            _require(op.server, "mcp_call.server")
            _require(op.tool, "mcp_call.tool")
        case PutBlob():
            _require(_SHA256.match(op.sha256), "put_blob.sha256")
            _require(isinstance(op.data, bytes), "put_blob.data")
            _require(op.offset + len(op.data) <= op.total_size, "put_blob (offset + data past total_size)")


def _validate_provision(op: Provision, where: str) -> None:
    _require(math.isfinite(op.cpus) and op.cpus >= 0, f"{where}.cpus")
    egress = op.egress
    _require(isinstance(egress, Egress), f"{where}.egress")
    _require(egress.mode in EGRESS_MODES, f"{where}.egress.mode {egress.mode!r}")
    hosts = egress.allowed_hosts
    _require(not isinstance(hosts, str | bytes), f"{where}.egress.allowed_hosts (a string, not a tuple)")
    _require(len(hosts) <= MAX_EGRESS_HOSTS, f"{where}.egress.allowed_hosts (more than {MAX_EGRESS_HOSTS})")
    for host in hosts:
        _require(
            isinstance(host, str) and 0 < len(host) <= MAX_EGRESS_HOST_CHARS,
            f"{where}.egress.allowed_hosts entry {host!r:.40}",
        )
    mounts = op.memory_mounts
    _require(len(mounts) <= MAX_MEMORY_MOUNTS, f"{where}.memory_mounts (more than {MAX_MEMORY_MOUNTS})")
    for mount in mounts:
        _require(isinstance(mount, MemoryMount) and mount.store_id, f"{where}.memory_mounts entry")
        _require(_SLUG.match(mount.slug) and mount.slug not in (".", ".."), f"{where}.memory_mounts slug")
    blobs = op.blob_mounts
    _require(len(blobs) <= MAX_BLOB_MOUNTS, f"{where}.blob_mounts (more than {MAX_BLOB_MOUNTS})")
    for blob in blobs:
        _require(isinstance(blob, BlobMount) and blob.kind in BLOB_KINDS, f"{where}.blob_mounts kind")
        _require(_SHA256.match(blob.sha256), f"{where}.blob_mounts sha256")
        _require(blob.mount_path.startswith("/"), f"{where}.blob_mounts mount_path")
    repositories = op.repositories
    _require(isinstance(repositories, tuple), f"{where}.repositories (a tuple)")
    _require(len(repositories) <= MAX_REPOSITORIES, f"{where}.repositories (more than {MAX_REPOSITORIES})")
    for repo in repositories:
        _validate_repository(repo, f"{where}.repositories")


def _validate_repository(repo: Repository, where: str) -> None:
    """Field shape only; what a URL or path may be is the edge's business (it refuses with a
    failure naming the problem). Messages never include the token."""
    _require(isinstance(repo, Repository), f"{where} entry")
    for name in ("id", "url", "mount_path", "checkout_ref", "token"):
        value = getattr(repo, name)
        _require(isinstance(value, str) and len(value) <= MAX_REPOSITORY_FIELD_CHARS, f"{where}.{name}")
    _require(repo.id and repo.url, f"{where} entry {repo.id!r:.40} (id and url)")
    _require(repo.mount_path.startswith("/"), f"{where}.mount_path {repo.mount_path!r:.60}")
    _require(repo.checkout_kind in CHECKOUT_KINDS, f"{where}.checkout_kind {repo.checkout_kind!r:.20}")
    _require(
        bool(repo.checkout_ref) == bool(repo.checkout_kind),
        f"{where}.checkout_ref (required with a checkout_kind, and only then)",
    )


def _code_to_pb(code: ErrorCode) -> pb.ErrorCode.ValueType:
    return pb.ErrorCode.ValueType(_CODE_TO_PB[code])


def _code_from_pb(number: int) -> ErrorCode:
    try:
        return _PB_TO_CODE[number]
    except KeyError:
        _malformed(f"unknown error code {number}")


def _mode_to_pb(mode: str) -> pb.EgressMode.ValueType:
    return pb.EgressMode.ValueType(_MODE_TO_PB[mode])  # a KeyError: _validate lets no bad mode by


def _mode_from_pb(number: int) -> str:
    try:
        return _PB_TO_MODE[number]
    except KeyError:
        _malformed(f"unknown egress mode {number}")


def _parse(msg: pb.Frame | pb.Outcome, data: bytes, what: str) -> None:
    try:
        msg.ParseFromString(data)
    except (DecodeError, ValueError, TypeError) as exc:
        raise MalformedFrame(f"{what} does not parse: {exc}") from exc


def _require(ok: object, field: str) -> None:
    if not ok:
        _malformed(f"missing or invalid {field}")


def _malformed(message: str) -> NoReturn:
    raise MalformedFrame(message)
