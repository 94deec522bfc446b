"""The frames of the tunnel protocol, as plain frozen dataclasses.

Everything above the codec sees these types; the generated protobuf classes never leak past
:mod:`outpost_wire.codec`. One dataclass per ``Frame.body`` member of ``tunnel.proto``::

    edge  ── Hello ──────────────►  control       first frame of every connection
    edge  ◄────────────── Welcome ── control       the connection is open
    edge  ◄────────────── Request ── control       Provision | Execute | Destroy | McpCall | PutBlob
    edge  ── ResultChunk ... ─────►  control       a serialized Outcome, split to fit frames
    edge  ◄────────────────── Ack ── control       the edge may forget that result
    edge  ◄─────────────── Cancel ── control
    edge  ── CatalogUpdate ───────►  control       the edge's MCP catalog changed (open/draining)
    edge  ◄── Heartbeat / Drain / ErrorFrame ──►   both directions

A request resolves to an :data:`Outcome`: a :class:`~outpost_wire.results.ToolResult` for
``Execute`` and ``McpCall``, :class:`Provisioned` / :class:`Destroyed` for the sandbox operations, or a
:class:`Failure` (a closed :class:`~outpost_wire.errors.ErrorCode` plus a message) when the edge
could not carry the request out at all. A tool that ran and failed is a ``ToolResult`` with
``is_error=True``, not a ``Failure``.

Integers are unsigned on the wire unless noted; the codec refuses to encode a negative one.
MCP catalogs (``Hello.mcp_catalog_json``, ``CatalogUpdate.catalog_json``) are JSON text that the
wire package carries without parsing; only the frame size limit applies to them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, TypeAlias

from outpost_wire.errors import ErrorCode
from outpost_wire.results import ToolResult

__all__ = [
    "BLOB_CHUNK_BYTES",
    "BLOB_KINDS",
    "MAX_BLOB_MOUNTS",
    "PROTOCOL_VERSION",
    "Ack",
    "BlobMount",
    "BlobStored",
    "Cancel",
    "CatalogUpdate",
    "Destroy",
    "Destroyed",
    "Drain",
    "Egress",
    "ErrorFrame",
    "Execute",
    "Failure",
    "Frame",
    "Heartbeat",
    "Hello",
    "McpCall",
    "MemoryFile",
    "MemoryMount",
    "MemorySnapshot",
    "Operation",
    "Outcome",
    "Provision",
    "Provisioned",
    "PutBlob",
    "Repository",
    "Request",
    "ResultChunk",
    "Welcome",
]

PROTOCOL_VERSION = 1
"""The version this code speaks; an edge sends it in Hello and the control plane echoes it."""


# --- handshake and liveness ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Hello:
    """edge -> control, the first frame on every connection."""

    edge_id: str
    software_version: str
    protocol_version: int
    capabilities: tuple[str, ...]
    policy_digest: str
    sandbox_capacity: int
    sandboxes_in_use: int
    environment_id: str = ""
    mcp_catalog_digest: str = ""
    """Identifies ``mcp_catalog_json`` (e.g. a hash of it); "" = no catalog announced."""
    mcp_catalog_json: str = field(default="", repr=False)
    """The edge's MCP catalog at connect time, as JSON text (opaque here); later changes travel
    in :class:`CatalogUpdate`."""
    tunnel_tokens: tuple[str, ...] = field(default=(), repr=False)
    """Connector tokens of the MCP tunnels the edge serves (secrets: never in ``repr``)."""


@dataclass(frozen=True, slots=True)
class Welcome:
    """control -> edge, answers Hello; both sides are OPEN from here on."""

    control_plane_id: str
    software_version: str
    protocol_version: int
    heartbeat_interval_s: float


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Both directions, when a side has sent nothing for a heartbeat interval.

    ``sent_at_ms`` is the sender's monotonic clock in milliseconds (diagnostics only); it is signed.
    """

    seq: int
    sent_at_ms: int
    sandboxes_in_use: int = 0


# --- requests ------------------------------------------------------------------------------------


EGRESS_MODES: Final[tuple[str, ...]] = ("none", "allowlist", "unrestricted")
"""The values :attr:`Egress.mode` may take; the codec rejects anything else, both ways."""
MAX_EGRESS_HOSTS: Final = 256
MAX_EGRESS_HOST_CHARS: Final = 253


@dataclass(frozen=True, slots=True)
class Egress:
    """Network egress of a sandbox.

    ``mode`` is one of :data:`EGRESS_MODES`: ``"none"`` (no network access, the default and what a
    sender without this field means), ``"allowlist"`` (only ``allowed_hosts``) or
    ``"unrestricted"``. Each host is a non-empty string of at most 253 characters, at most 256 of
    them; their syntax and meaning are the edge's business. The edge's local policy may narrow
    what is asked for.
    """

    mode: str = "none"
    allowed_hosts: tuple[str, ...] = ()


CHECKOUT_KINDS: Final[tuple[str, ...]] = ("", "branch", "commit")
"""The values :attr:`Repository.checkout_kind` may take ("" = the remote's default branch)."""
MAX_REPOSITORIES: Final = 16
MAX_REPOSITORY_FIELD_CHARS: Final = 2048


@dataclass(frozen=True, slots=True)
class Repository:
    """A git repository of the session, cloned by the edge into the workspace at ``mount_path``
    when the sandbox is made (left alone if that directory already has files).

    ``checkout_kind`` is one of :data:`CHECKOUT_KINDS`; ``checkout_ref`` is then the branch name
    or the commit sha (empty for the default branch). ``token`` is a credential for this
    repository that the control plane delivers to the edge, which uses it outside the sandbox
    only (clone, and the pull/push it relays); "" = the edge's own credential for the host, if
    any. It is never shown by ``repr``. ``id``, ``url`` and ``mount_path`` are non-empty, at most
    2048 characters each, and ``mount_path`` is absolute; at most 16 repositories per sandbox.
    """

    id: str
    url: str
    mount_path: str
    checkout_kind: str = ""
    checkout_ref: str = ""
    token: str = field(default="", repr=False)


MAX_MEMORY_MOUNTS: Final = 8


@dataclass(frozen=True, slots=True)
class MemoryMount:
    """A memory store of the session, bind-mounted into the sandbox at ``/mnt/memory/<slug>``
    (read-only when ``read_only``). ``slug`` is one path segment of ``[A-Za-z0-9._-]`` (not ``.``
    or ``..``); at most 8 mounts per sandbox. The contents travel in :attr:`Execute.memory`."""

    store_id: str
    slug: str
    read_only: bool = False


@dataclass(frozen=True, slots=True)
class MemoryFile:
    """One memory: ``path`` as the API shows it (``/notes.md``), relative to its mount."""

    path: str
    content: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class MemorySnapshot:
    """The whole current content of one mounted memory store."""

    store_id: str
    files: tuple[MemoryFile, ...] = ()


BLOB_KINDS: Final[tuple[str, ...]] = ("file", "skill")
"""The values :attr:`BlobMount.kind` may take."""
MAX_BLOB_MOUNTS: Final = 128
BLOB_CHUNK_BYTES: Final = 256 * 1024
"""How many bytes of a blob one :class:`PutBlob` carries (the last chunk may carry fewer)."""


@dataclass(frozen=True, slots=True)
class BlobMount:
    """Content of the session mounted read-only in its sandbox: ``kind`` ``"file"`` (a file
    resource: the blob itself, at ``mount_path``) or ``"skill"`` (a skill version's zip archive,
    unpacked at ``mount_path``). ``name`` (the file id, the skill's name) is for messages;
    ``sha256`` (64 lower-case hex digits) and ``size`` identify the bytes, which the control plane
    sends before the spec in :class:`PutBlob` requests. ``mount_path`` is absolute."""

    kind: str
    name: str
    sha256: str
    size: int
    mount_path: str


@dataclass(frozen=True, slots=True)
class Provision:
    """Create the session's sandbox if it does not exist. 0 / "" = the edge's default.

    ``repositories``: the session's git repositories (see :class:`Repository`). The spec is sent
    once per connection and session (as a ``Provision``, or in the first :class:`Execute`) and
    again when it changes, so the edge knows the session's current set (and tokens).
    """

    image: str = ""
    cpus: float = 0.0
    memory_bytes: int = 0
    pids: int = 0
    egress: Egress = Egress()
    repositories: tuple[Repository, ...] = ()
    memory_mounts: tuple[MemoryMount, ...] = ()
    blob_mounts: tuple[BlobMount, ...] = ()


@dataclass(frozen=True, slots=True)
class Execute:
    """Run one tool call in the session's sandbox (provisioning it first if needed).

    ``sandbox`` is the session's sandbox spec (image, limits, egress, repositories), so a lazily
    provisioned sandbox matches what a ``Provision`` would have asked for. It travels at provision
    only: the control plane sends it with the first call of the session on a connection (and again
    when it changed), ``None`` afterwards = the spec the edge holds for the session. An edge that
    holds none (it restarted, or destroyed the sandbox) answers ``Failure(SANDBOX_SPEC_REQUIRED)``
    before running or journaling anything, and the call comes again with the spec and the same
    idempotency key. ``timeout_ms`` caps the tool's own timeout (0 = the tool's); the request's
    ``deadline_ms`` bounds the whole call, provisioning included.
    """

    tool: str
    input_json: str
    timeout_ms: int = 0
    sandbox: Provision | None = None
    memory: tuple[MemorySnapshot, ...] | None = None
    """The session's memory stores' whole contents, applied to the mounts before the tool runs
    (and taken as the baseline of the post-call scan); ``None`` = unchanged. The control plane
    sends it with the spec, and whenever the stores changed behind the edge's back."""


@dataclass(frozen=True, slots=True)
class Destroy:
    """Remove the session's sandbox."""


@dataclass(frozen=True, slots=True)
class McpCall:
    """Call ``tool`` of the MCP server ``server`` that the edge connects to (both non-empty).

    ``arguments_json`` is the tool's arguments as JSON text (not checked by the codec);
    ``timeout_ms`` 0 = the edge's default. Resolves to a :class:`~outpost_wire.results.ToolResult`
    (``is_error=True`` for an error the tool reported) or a :class:`Failure` (e.g.
    ``MCP_CONNECTION_FAILED`` when the server cannot be reached).
    """

    server: str
    tool: str
    arguments_json: str
    timeout_ms: int = 0


@dataclass(frozen=True, slots=True)
class PutBlob:
    """Bytes ``[offset, offset + len(data))`` of the blob ``sha256`` of ``total_size`` bytes, for
    the edge's blob cache. Chunks of a blob go in order, at most :data:`BLOB_CHUNK_BYTES` each;
    the edge checks the sha256 once it holds ``total_size`` bytes. Resolves to
    :class:`BlobStored` (or a :class:`Failure`: a checksum mismatch, a gap, the edge's disk budget)."""

    sha256: str
    total_size: int
    offset: int
    data: bytes = field(repr=False)


Operation: TypeAlias = Provision | Execute | Destroy | McpCall | PutBlob


@dataclass(frozen=True, slots=True)
class Request:
    """control -> edge. ``deadline_ms`` is unix epoch milliseconds (signed), 0 = none."""

    request_id: str
    session_id: str
    idempotency_key: str
    deadline_ms: int
    op: Operation


# --- outcomes ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Provisioned:
    sandbox_id: str
    image: str
    reused: bool


@dataclass(frozen=True, slots=True)
class Destroyed:
    existed: bool


@dataclass(frozen=True, slots=True)
class BlobStored:
    """The edge holds ``received`` bytes of blob ``sha256``; ``complete``: all, checksum verified
    (also the answer to the first chunk of a blob it already holds: the sender stops there)."""

    sha256: str
    received: int
    complete: bool


@dataclass(frozen=True, slots=True)
class Failure:
    """The edge could not carry the request out (policy, capacity, deadline, cancel, ...)."""

    code: ErrorCode
    message: str


Outcome: TypeAlias = ToolResult | Provisioned | Destroyed | Failure | BlobStored


# --- results, flow control, errors ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResultChunk:
    """edge -> control: ``data`` is a slice of the serialized Outcome of ``request_id``.

    Chunks of one request carry ``index`` 0, 1, 2, ... in order; ``last`` marks the final one.
    """

    request_id: str
    index: int
    last: bool
    data: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class Cancel:
    request_id: str


@dataclass(frozen=True, slots=True)
class Ack:
    """control -> edge: the result of ``request_id`` arrived whole; the edge may drop it."""

    request_id: str


@dataclass(frozen=True, slots=True)
class Drain:
    """The sender takes no new requests; in-flight work should finish within ``grace_ms``."""

    reason: str
    grace_ms: int


@dataclass(frozen=True, slots=True)
class ErrorFrame:
    """A protocol error ("goodbye"): the sender closes the stream right after it."""

    code: ErrorCode
    message: str


@dataclass(frozen=True, slots=True)
class CatalogUpdate:
    """edge -> control, any time while OPEN or DRAINING: the edge's MCP catalog changed.

    Same meaning as ``Hello.mcp_catalog_digest`` / ``Hello.mcp_catalog_json``, which it replaces.
    """

    digest: str
    catalog_json: str = field(repr=False)


Frame: TypeAlias = (
    Hello | Welcome | Heartbeat | Request | ResultChunk | Cancel | Ack | Drain | ErrorFrame | CatalogUpdate
)
