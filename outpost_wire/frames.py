"""The frames of the tunnel protocol, as plain frozen dataclasses.

Everything above the codec sees these types; the generated protobuf classes never leak past
:mod:`outpost_wire.codec`. One dataclass per ``Frame.body`` member of ``tunnel.proto``::

    edge  ── Hello ──────────────►  control       first frame of every connection
    edge  ◄────────────── Welcome ── control       the connection is open
    edge  ◄────────────── Request ── control       Provision | Execute | Destroy
    edge  ── ResultChunk ... ─────►  control       a serialized Outcome, split to fit frames
    edge  ◄────────────────── Ack ── control       the edge may forget that result
    edge  ◄─────────────── Cancel ── control
    edge  ◄── Heartbeat / Drain / ErrorFrame ──►   both directions

A request resolves to an :data:`Outcome`: a :class:`~outpost_wire.results.ToolResult` for
``Execute``, :class:`Provisioned` / :class:`Destroyed` for the sandbox operations, or a
:class:`Failure` (a closed :class:`~outpost_wire.errors.ErrorCode` plus a message) when the edge
could not carry the request out at all. A tool that ran and failed is a ``ToolResult`` with
``is_error=True``, not a ``Failure``.

Integers are unsigned on the wire unless noted; the codec refuses to encode a negative one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeAlias

from outpost_wire.errors import ErrorCode
from outpost_wire.results import ToolResult

__all__ = [
    "PROTOCOL_VERSION",
    "Ack",
    "Cancel",
    "Destroy",
    "Destroyed",
    "Drain",
    "ErrorFrame",
    "Execute",
    "Failure",
    "Frame",
    "Heartbeat",
    "Hello",
    "Operation",
    "Outcome",
    "Provision",
    "Provisioned",
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


@dataclass(frozen=True, slots=True)
class Provision:
    """Create the session's sandbox if it does not exist. 0 / "" = the edge's default."""

    image: str = ""
    cpus: float = 0.0
    memory_bytes: int = 0
    pids: int = 0


@dataclass(frozen=True, slots=True)
class Execute:
    """Run one tool call in the session's sandbox (provisioning it first if needed)."""

    tool: str
    input_json: str
    timeout_ms: int = 0


@dataclass(frozen=True, slots=True)
class Destroy:
    """Remove the session's sandbox."""


Operation: TypeAlias = Provision | Execute | Destroy


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
class Failure:
    """The edge could not carry the request out (policy, capacity, deadline, cancel, ...)."""

    code: ErrorCode
    message: str


Outcome: TypeAlias = ToolResult | Provisioned | Destroyed | Failure


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


Frame: TypeAlias = Hello | Welcome | Heartbeat | Request | ResultChunk | Cancel | Ack | Drain | ErrorFrame
