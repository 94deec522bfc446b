"""The edge error tree and its wire codes."""

from __future__ import annotations

import pytest

from edge_agent import errors
from edge_agent.errors import (
    CapacityExhausted,
    ConfigError,
    EdgeError,
    PolicyDenied,
    SandboxUnavailable,
    UnknownSession,
)
from outpost_wire.errors import ErrorCode, OutpostError


def test_exports() -> None:
    assert sorted(errors.__all__) == [
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


@pytest.mark.parametrize(
    ("cls", "code"),
    [
        (CapacityExhausted, ErrorCode.CAPACITY_EXHAUSTED),
        (SandboxUnavailable, ErrorCode.SANDBOX_UNAVAILABLE),
        (UnknownSession, ErrorCode.UNKNOWN_SESSION),
        (ConfigError, ErrorCode.INVALID_REQUEST),
        (errors.InvalidToolInput, ErrorCode.INVALID_REQUEST),
        (errors.SandboxSpecRequired, ErrorCode.SANDBOX_SPEC_REQUIRED),
    ],
)
def test_codes(cls: type[EdgeError], code: ErrorCode) -> None:
    exc = cls("message")
    assert isinstance(exc, EdgeError) and isinstance(exc, OutpostError)
    assert cls.code is code and exc.code is code
    assert exc.message == str(exc) == "message"


def test_edge_refused_names_the_reason_in_words() -> None:
    exc = errors.EdgeRefused("unknown_edge")
    assert exc.code is ErrorCode.UNAUTHENTICATED and exc.reason == "unknown_edge"
    assert str(exc) == "the control plane refuses this edge: unknown edge"


def test_policy_denied_names_the_rule() -> None:
    exc = PolicyDenied("images.allowed", "image evil:latest is not allowed")
    assert exc.code is ErrorCode.POLICY_DENIED
    assert exc.rule == "images.allowed"
    assert exc.message == "image evil:latest is not allowed"
    assert "images.allowed" in str(exc)


def test_tree_is_documented() -> None:
    doc = errors.__doc__ or ""
    for name in errors.__all__:
        assert name in doc
