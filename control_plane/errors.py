"""Errors of the control plane.

::

    OutpostError (outpost_wire.errors)
    └── ControlPlaneError
        ├── NotFound              a resource, session, edge or event does not exist
        │   └── EnvironmentNotFound   (error_code environment_not_found)
        ├── Conflict              the id exists already
        │   ├── VersionConflict   optimistic concurrency: the resource moved on
        │   ├── MemoryPreconditionFailed  a memory's content is not the expected_sha256
        │   └── MemoryPathConflict        another memory holds the path (.conflicting_memory_id)
        ├── SequenceConflict      append: the log moved past the caller's expected_seq
        ├── Fenced                append: the writer's lease epoch is stale (a zombie harness)
        ├── TokenRejected         enrollment token unknown / revoked / used / expired (.reason)
        ├── ListenFailed          a listening address could not be bound (.address, in use?)
        ├── InvalidRequest        bad input from a client (.param)
        │   ├── EnvironmentArchived   an archived environment asked to take a session or a change
        │   │                         (error_code environment_archived)
        │   └── BudgetRefused     a session budget the rules refuse (error_code: the reason,
        │                         model_not_budgetable | budget_create_only | budget_not_raised)
        ├── PermissionDenied      the caller's key may not do this (e.g. a key limited to
        │                         environments making one)
        ├── NotConfigured         the request needs a part this control plane runs without (the vault)
        ├── ContentTooLarge       content past its size cap (an uploaded file; .limit in bytes)
        ├── DreamFailed           a dream cannot finish (.error_type: the dream's ``error.type``,
        │                         e.g. invalid_model_output, input_not_found, memory_limit)
        ├── OutboundRefused       (control_plane.outbound) a user-named URL resolves to an address
        │                         the outbound rules refuse; nothing was dialled (.rule)
        └── EdgeUnavailable       no connected edge can serve the environment
            └── GatewayDraining   this process is shutting down: retry on another one

Foreign exceptions (sqlite3, grpc, anthropic) are mapped to these where they are called. An error
with an ``error_code`` carries it to clients (the API's ``details.error_code``, from which the SDK
picks a more specific exception class).
"""

from __future__ import annotations

from outpost_wire.errors import OutpostError

__all__ = [
    "BudgetRefused",
    "Conflict",
    "ContentTooLarge",
    "ControlPlaneError",
    "DreamFailed",
    "EdgeUnavailable",
    "EnvironmentArchived",
    "EnvironmentNotFound",
    "Fenced",
    "GatewayDraining",
    "InvalidRequest",
    "ListenFailed",
    "MemoryPathConflict",
    "MemoryPreconditionFailed",
    "NotConfigured",
    "NotFound",
    "PermissionDenied",
    "SequenceConflict",
    "TokenRejected",
    "VersionConflict",
]


class ControlPlaneError(OutpostError):
    """Base class of control-plane errors."""

    #: A machine-readable code for clients (``None``: the error type says it all).
    error_code: str | None = None


class NotFound(ControlPlaneError):
    def __init__(self, kind: str, id: str) -> None:
        super().__init__(f"{kind} {id!r} not found")
        self.kind = kind
        self.id = id


class EnvironmentNotFound(NotFound):
    error_code = "environment_not_found"

    def __init__(self, environment_id: str) -> None:
        super().__init__("environment", environment_id)


class Conflict(ControlPlaneError):
    pass


class VersionConflict(Conflict):
    def __init__(self, kind: str, id: str, expected: int, actual: int) -> None:
        super().__init__(f"{kind} {id!r} is at version {actual}, not {expected}")
        self.expected = expected
        self.actual = actual


class MemoryPreconditionFailed(Conflict):
    """A memory write's ``content_sha256`` precondition failed: the memory changed meanwhile
    (the API answers 409 ``memory_precondition_failed_error``)."""

    def __init__(self, memory_id: str, expected: str) -> None:
        super().__init__(f"memory {memory_id!r} does not have content_sha256 {expected!r}")
        self.memory_id = memory_id
        self.expected = expected


class MemoryPathConflict(Conflict):
    """Another memory of the store holds the path (the API answers 409
    ``memory_path_conflict_error``)."""

    def __init__(self, path: str, conflicting_memory_id: str) -> None:
        super().__init__(f"memory {conflicting_memory_id!r} holds the path {path!r} already")
        self.path = path
        self.conflicting_memory_id = conflicting_memory_id


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


class EnvironmentArchived(InvalidRequest):
    """``refused``: what it cannot do, said after "is archived" (e.g. "and cannot be updated")."""

    error_code = "environment_archived"

    def __init__(self, environment_id: str, refused: str = "") -> None:
        message = f"environment {environment_id!r} is archived"
        super().__init__(f"{message} {refused}" if refused else message, param="environment_id")
        self.environment_id = environment_id


class BudgetRefused(InvalidRequest):
    """A session ``budget`` refused for ``reason`` (the API's ``details.error_code``), as the
    hosted product names them: ``model_not_budgetable``, ``budget_create_only``,
    ``budget_not_raised``."""

    def __init__(self, reason: str, message: str, param: str = "budget") -> None:
        super().__init__(message, param=param)
        self.error_code = reason


class PermissionDenied(ControlPlaneError):
    """The caller's key may not do what it asked, whatever it names (the API answers 403)."""


class NotConfigured(ControlPlaneError):
    """The request needs a part this control plane is not configured with (the vault, to seal a
    token): the API answers 503."""


class ContentTooLarge(ControlPlaneError):
    """Content (an uploaded file) is larger than its cap of ``limit`` bytes: the API answers 413
    ``request_too_large``; nothing of it was kept."""

    def __init__(self, limit: int, what: str = "content") -> None:
        super().__init__(f"{what} is larger than the limit of {limit} bytes")
        self.limit = limit


class DreamFailed(ControlPlaneError):
    """A dream cannot finish: ``error_type`` is what its ``error.type`` says (``invalid_model_output``:
    the model's answer is not a valid ``record_memories`` call; ``input_not_found``: an input went
    away; ``memory_limit``: a write broke the memory rules; a model error's own type)."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message


class EdgeUnavailable(ControlPlaneError):
    """No connected edge could take the call. ``environment_id``: the environment whose edges were
    looked for, when the error is about all of them (the API's ``details.environment_id``)."""

    def __init__(self, message: str, environment_id: str | None = None) -> None:
        super().__init__(message)
        self.environment_id = environment_id


class GatewayDraining(EdgeUnavailable):
    """This control-plane process is shutting down and takes no new calls to edges (retryable:
    another process, where the edge moved, will take them)."""
