"""A repository the edge could not clone, as the ``session.error`` the harness appends (no I/O).

The edge answers a sandbox request whose repository could not be put into the workspace with a
``Failure`` whose code is one of ``REPOSITORY_*`` and whose message is ``repository <url>:
<reason>`` (``edge_agent.errors.RepositoryError``). The gateway raises it as a ``RemoteError``;
the step (:func:`~control_plane.harness.step.tool_outcome_events`) turns it into a tool error for
the model *and* this non-fatal ``session.error`` (``retry_status: retrying``: the next sandbox
request tries the clone again), typed as the API documents:
``repository_{clone,authentication,forbidden,not_found,checkout}_error`` with ``repository_url``.
The fold does not count these as failed model requests.
"""

from __future__ import annotations

from typing import Final

from control_plane.harness.event_drafts import Draft, session_error
from outpost_wire.errors import ErrorCode, RemoteError

__all__ = ["REPOSITORY_ERROR_TYPES", "repository_error", "repository_error_for"]

REPOSITORY_ERROR_TYPES: Final[dict[ErrorCode, str]] = {
    ErrorCode.REPOSITORY_CLONE_FAILED: "repository_clone_error",
    ErrorCode.REPOSITORY_AUTHENTICATION_FAILED: "repository_authentication_error",
    ErrorCode.REPOSITORY_FORBIDDEN: "repository_forbidden_error",
    ErrorCode.REPOSITORY_NOT_FOUND: "repository_not_found_error",
    ErrorCode.REPOSITORY_CHECKOUT_FAILED: "repository_checkout_error",
}
_PREFIX = "repository "


def repository_error(exc: Exception) -> Draft | None:
    """The ``session.error`` for a repository failure, or None if ``exc`` is not one."""
    if not isinstance(exc, RemoteError):
        return None
    return repository_error_for(exc.code, exc.message)


def repository_error_for(code: ErrorCode, message: str) -> Draft | None:
    """The ``session.error`` for the edge's error ``code`` with ``message``, or None if it is not
    a repository failure."""
    error_type = REPOSITORY_ERROR_TYPES.get(code)
    if error_type is None:
        return None
    draft = session_error(error_type, message, "retrying")
    if message.startswith(_PREFIX):
        url, sep, _ = message[len(_PREFIX) :].partition(": ")
        if sep and url:
            draft.payload["error"]["repository_url"] = url
    return draft
