"""Errors raised by the edge agent.

Every local failure of the edge derives from :class:`EdgeError`, itself an
:class:`~outpost_wire.errors.OutpostError`. Each class carries the wire code it maps to, so the
tunnel turns any of them into ``(code, message)`` without knowing the class::

    OutpostError                      (outpost_wire.errors)
    └── EdgeError                     a local failure at the edge             INTERNAL
        ├── PolicyDenied              the local policy refuses the request    POLICY_DENIED
        ├── CapacityExhausted         no room for another sandbox             CAPACITY_EXHAUSTED
        ├── SandboxUnavailable        a sandbox could not be created/reached  SANDBOX_UNAVAILABLE
        ├── UnknownSession            no sandbox exists for the session       UNKNOWN_SESSION
        ├── ConfigError               the edge's configuration is invalid     INVALID_REQUEST
        ├── InvalidToolInput          a tool call's input is not JSON, not an INVALID_REQUEST
        │                             object, or does not match the tool's schema
        ├── SandboxSpecRequired       an execute without a sandbox spec for a SANDBOX_SPEC_REQUIRED
        │                             session this edge holds none for
        ├── EdgeRefused               the control plane refuses this edge for UNAUTHENTICATED
        │                             good: revoked, unknown (.reason)
        └── RepositoryError           a session repository could not be put   REPOSITORY_CLONE_FAILED
            │                         into the workspace (.url)
            ├── RepositoryAuthenticationFailed                                REPOSITORY_AUTHENTICATION_FAILED
            ├── RepositoryForbidden                                           REPOSITORY_FORBIDDEN
            ├── RepositoryNotFound                                            REPOSITORY_NOT_FOUND
            ├── RepositoryCheckoutFailed  the branch or commit is not there   REPOSITORY_CHECKOUT_FAILED
            └── RepositoryRefused     the policy's repositories rule refuses  REPOSITORY_CLONE_FAILED
                                      the URL or its address (.rule)

Foreign exceptions (docker, grpc, OS errors) are mapped to these once, at the boundary that calls
the foreign library (for Docker: :class:`edge_agent.sandbox.docker_runtime.DockerRuntime`).
"""

from __future__ import annotations

from typing import ClassVar

from outpost_wire.errors import ErrorCode, OutpostError

__all__ = [
    "CapacityExhausted",
    "ConfigError",
    "EdgeError",
    "EdgeRefused",
    "InvalidToolInput",
    "PolicyDenied",
    "RepositoryAuthenticationFailed",
    "RepositoryCheckoutFailed",
    "RepositoryError",
    "RepositoryForbidden",
    "RepositoryNotFound",
    "RepositoryRefused",
    "SandboxSpecRequired",
    "SandboxUnavailable",
    "UnknownSession",
]


class EdgeError(OutpostError):
    """Base class of the edge agent's own errors."""

    code: ClassVar[ErrorCode] = ErrorCode.INTERNAL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class PolicyDenied(EdgeError):
    """The edge's local policy refuses the request; ``rule`` names the rule that refused it."""

    code = ErrorCode.POLICY_DENIED

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(f"{message} (policy rule: {rule})")
        self.rule = rule
        self.message = message


class CapacityExhausted(EdgeError):
    """No room for another sandbox on this edge (``max_sandboxes`` reached)."""

    code = ErrorCode.CAPACITY_EXHAUSTED


class SandboxUnavailable(EdgeError):
    """A sandbox could not be created or reached (Docker error, dead container, lost channel)."""

    code = ErrorCode.SANDBOX_UNAVAILABLE


class UnknownSession(EdgeError):
    """No sandbox exists for the session."""

    code = ErrorCode.UNKNOWN_SESSION


class ConfigError(EdgeError):
    """The edge's configuration (file, environment, arguments) is invalid."""

    code = ErrorCode.INVALID_REQUEST


class InvalidToolInput(EdgeError):
    """A tool call's input is not valid JSON, not an object, or does not match the tool's schema
    (an unknown tool, field or value). The dispatcher answers it as a tool error, with this
    message, before anything runs."""

    code = ErrorCode.INVALID_REQUEST


class SandboxSpecRequired(EdgeError):
    """An ``Execute`` came without a sandbox spec for a session this edge holds no spec for (it
    restarted, or destroyed the session's sandbox). The control plane sends the call again, with
    the spec; nothing ran."""

    code = ErrorCode.SANDBOX_SPEC_REQUIRED


class EdgeRefused(EdgeError):
    """The control plane refuses this edge's identity for a final ``reason`` (``revoked``,
    ``unknown_edge``, ...: :data:`outpost_wire.admission.FINAL_REASONS`); only a new enrollment
    helps."""

    code = ErrorCode.UNAUTHENTICATED

    def __init__(self, reason: str, detail: str = "") -> None:
        words = reason.replace("_", " ")
        super().__init__(f"the control plane refuses this edge: {words}" + (f" ({detail})" if detail else ""))
        self.reason = reason


class RepositoryError(EdgeError):
    """A repository of the session could not be cloned into its workspace. ``url`` is the
    repository's URL (never with a credential); the message starts with it."""

    code = ErrorCode.REPOSITORY_CLONE_FAILED

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"repository {url}: {reason}")
        self.url = url
        self.reason = reason


class RepositoryAuthenticationFailed(RepositoryError):
    """The remote asked for a credential and none was given, or it refused the one given."""

    code = ErrorCode.REPOSITORY_AUTHENTICATION_FAILED


class RepositoryForbidden(RepositoryError):
    """The credential was accepted but may not read the repository."""

    code = ErrorCode.REPOSITORY_FORBIDDEN


class RepositoryNotFound(RepositoryError):
    code = ErrorCode.REPOSITORY_NOT_FOUND


class RepositoryCheckoutFailed(RepositoryError):
    """The clone worked but the requested branch or commit does not exist in it."""

    code = ErrorCode.REPOSITORY_CHECKOUT_FAILED


class RepositoryRefused(RepositoryError):
    """The edge's ``repositories`` policy refuses the URL: its scheme, its host, or an address it
    resolves to (loopback, metadata, private ...). ``rule`` names the rule; nothing was dialled."""

    def __init__(self, url: str, rule: str, reason: str) -> None:
        super().__init__(url, f"{reason} (policy rule: {rule})")
        self.rule = rule
