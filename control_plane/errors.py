"""Errors of the control plane.

::

    OutpostError (outpost_wire.errors)
    └── ControlPlaneError
        ├── NotFound              a resource, session, edge or event does not exist
        ├── Conflict              the id exists already
        │   └── VersionConflict   optimistic concurrency: the resource moved on
        ├── SequenceConflict      append: the log moved past the caller's expected_seq
        ├── Fenced                append: the writer's lease epoch is stale (a zombie harness)
        ├── TokenRejected         enrollment token unknown / revoked / used / expired (.reason)
        ├── ListenFailed          a listening address could not be bound (.address, in use?)
        ├── InvalidRequest        bad input from a client (.param)
        ├── OutboundRefused       (control_plane.outbound) a user-named URL resolves to an address
        │                         the outbound rules refuse; nothing was dialled (.rule)
        └── EdgeUnavailable       no connected edge can serve the environment
            └── GatewayDraining   this process is shutting down: retry on another one

Foreign exceptions (sqlite3, grpc, anthropic) are mapped to these where they are called.
"""

from __future__ import annotations

from outpost_wire.errors import OutpostError

__all__ = [
    "Conflict",
    "ControlPlaneError",
    "EdgeUnavailable",
    "Fenced",
    "GatewayDraining",
    "InvalidRequest",
    "ListenFailed",
    "NotFound",
    "SequenceConflict",
    "TokenRejected",
    "VersionConflict",
]


class ControlPlaneError(OutpostError):
    """Base class of control-plane errors."""


class NotFound(ControlPlaneError):
    def __init__(self, kind: str, id: str) -> None:
        super().__init__(f"{kind} {id!r} not found")
        self.kind = kind
        self.id = id


class Conflict(ControlPlaneError):
    pass


class VersionConflict(Conflict):
    def __init__(self, kind: str, id: str, expected: int, actual: int) -> None:
        super().__init__(f"{kind} {id!r} is at version {actual}, not {expected}")
        self.expected = expected
        self.actual = actual


class SequenceConflict(ControlPlaneError):
    def __init__(self, session_id: str, expected: int, actual: int) -> None:
        super().__init__(f"session {session_id!r} log is at seq {actual}, not {expected}")
        self.expected = expected
        self.actual = actual


class Fenced(ControlPlaneError):
    def __init__(self, session_id: str, epoch: int, current: int | None) -> None:
        super().__init__(f"session {session_id!r}: writer epoch {epoch} is fenced (lease epoch {current})")
        self.epoch = epoch
        self.current = current


class TokenRejected(ControlPlaneError):
    def __init__(self, reason: str) -> None:
        super().__init__(f"enrollment token rejected: {reason}")
        self.reason = reason  # "unknown" | "revoked" | "used" | "expired"


class ListenFailed(ControlPlaneError):
    """The control plane could not listen on ``address`` (``what``: "API" or "tunnel"): another
    process holds the port, or the address is not one of this host's."""

    def __init__(self, what: str, address: str, reason: str) -> None:
        super().__init__(f"cannot listen on {address} ({what}): {reason}")
        self.what = what
        self.address = address
        self.reason = reason


class InvalidRequest(ControlPlaneError):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class EdgeUnavailable(ControlPlaneError):
    """No connected edge could take the call. ``environment_id``: the environment whose edges were
    looked for, when the error is about all of them (the API's ``details.environment_id``)."""

    def __init__(self, message: str, environment_id: str | None = None) -> None:
        super().__init__(message)
        self.environment_id = environment_id


class GatewayDraining(EdgeUnavailable):
    """This control-plane process is shutting down and takes no new calls to edges (retryable:
    another process, where the edge moved, will take them)."""
