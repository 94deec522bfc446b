"""A repository the edge could not clone: the typed ``session.error`` and the fold ignoring it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from control_plane.harness import event_drafts as ev
from control_plane.harness.fold import SessionState
from control_plane.harness.repository_errors import REPOSITORY_ERROR_TYPES, repository_error
from outpost_wire.errors import ErrorCode, RemoteError


@pytest.mark.parametrize(("code", "error_type"), REPOSITORY_ERROR_TYPES.items())
def test_each_code_has_its_documented_type(code: ErrorCode, error_type: str) -> None:
    draft = repository_error(RemoteError(code, "repository https://git.internal/a.git: no"))
    assert draft is not None
    assert draft.type == "session.error"
    assert draft.payload == {
        "error": {
            "type": error_type,
            "message": "repository https://git.internal/a.git: no",
            "retry_status": {"type": "retrying"},
            "repository_url": "https://git.internal/a.git",
        }
    }


def test_other_errors_are_not_repository_errors() -> None:
    assert repository_error(RemoteError(ErrorCode.POLICY_DENIED, "x")) is None
    assert repository_error(ValueError("x")) is None
    draft = repository_error(RemoteError(ErrorCode.REPOSITORY_NOT_FOUND, "odd message"))
    assert draft is not None and "repository_url" not in draft.payload["error"]
    assert set(REPOSITORY_ERROR_TYPES.values()) == {
        "repository_clone_error",
        "repository_authentication_error",
        "repository_forbidden_error",
        "repository_not_found_error",
        "repository_checkout_error",
    }


@dataclass
class _Event:
    id: str
    type: str
    payload: dict[str, Any] = field(default_factory=dict)


def test_the_fold_does_not_count_them_as_failed_model_requests() -> None:
    state = SessionState()
    draft = repository_error(RemoteError(ErrorCode.REPOSITORY_CLONE_FAILED, "repository u: x"))
    assert draft is not None
    state.apply(_Event("e1", draft.type, draft.payload))
    assert state.failures == 0
    model = ev.session_error("model_overloaded_error", "busy", "retrying")
    state.apply(_Event("e2", model.type, model.payload))
    assert state.failures == 1
