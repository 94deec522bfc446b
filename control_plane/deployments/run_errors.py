"""Why a deployment run could not start: the SDK's typed run errors, one place.

A run whose session cannot be created records ``{"type": <error type>, "message": ...}`` instead
of a session id (``BetaManagedAgentsDeploymentRun.error``). :func:`precheck` names the common
causes precisely before the session service is asked (the environment, the agent, the vaults, the
memory stores and files the deployment names); :func:`from_exception` maps what the session service
still refuses. An auto-pause records the failed run's type (:func:`paused_error`), narrowed to the
types ``paused_reason.error`` knows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from control_plane.errors import (
    ControlPlaneError,
    EnvironmentArchived,
    EnvironmentNotFound,
    InvalidRequest,
    NotFound,
)
from control_plane.store.base import Resources

__all__ = ["RunError", "from_exception", "paused_error", "precheck"]

RunError = dict[str, str]

# The types BetaManagedAgentsDeploymentPausedReasonErrorObject holds (no rate limit, no rejection).
_PAUSE_TYPES = frozenset(
    {
        "environment_archived_error",
        "agent_archived_error",
        "environment_not_found_error",
        "vault_not_found_error",
        "file_not_found_error",
        "session_resource_not_found_error",
        "workspace_archived_error",
        "organization_disabled_error",
        "memory_store_archived_error",
        "skill_not_found_error",
        "vault_archived_error",
        "unknown_error",
        "self_hosted_resources_unsupported_error",
        "mcp_egress_blocked_error",
    }
)

_NOT_FOUND = {
    "environment": "environment_not_found_error",
    "vault": "vault_not_found_error",
    "file": "file_not_found_error",
    "skill": "skill_not_found_error",
    "skill_version": "skill_not_found_error",
}


def _error(error_type: str, message: str) -> RunError:
    return {"type": error_type, "message": message}


async def _archived(store: Resources, kind: str, id: str) -> bool | None:
    """Whether the resource is archived; ``None`` if it does not exist."""
    try:
        return (await store.get_resource(kind, id)).archived_at is not None
    except NotFound:
        return None


async def precheck(store: Resources, body: Mapping[str, Any]) -> RunError | None:
    """The first thing the deployment names that is gone or archived, as a run error."""
    env = str(body.get("environment_id"))
    state = await _archived(store, "environment", env)
    if state is None:
        return _error("environment_not_found_error", f"environment {env!r} no longer exists")
    if state:
        return _error("environment_archived_error", f"environment {env!r} is archived")
    agent = str(body.get("agent", {}).get("id"))
    if await _archived(store, "agent", agent):
        return _error("agent_archived_error", f"agent {agent!r} is archived")
    for vault_id in body.get("vault_ids", []):
        state = await _archived(store, "vault", vault_id)
        if state is None:
            return _error("vault_not_found_error", f"vault {vault_id!r} no longer exists")
        if state:
            return _error("vault_archived_error", f"vault {vault_id!r} is archived")
    for item in body.get("resources", []):
        if item.get("type") == "file":
            if await _archived(store, "file", str(item.get("file_id"))) is None:
                return _error("file_not_found_error", f"file {item.get('file_id')!r} no longer exists")
        elif item.get("type") == "memory_store":
            store_id = str(item.get("memory_store_id"))
            state = await _archived(store, "memory_store", store_id)
            if state is None:
                return _error(
                    "session_resource_not_found_error", f"memory store {store_id!r} no longer exists"
                )
            if state and item.get("access", "read_write") == "read_write":
                return _error("memory_store_archived_error", f"memory store {store_id!r} is archived")
    return None


def from_exception(exc: ControlPlaneError) -> RunError:
    """What the session service refused, as a run error."""
    if isinstance(exc, EnvironmentNotFound):
        return _error("environment_not_found_error", str(exc))
    if isinstance(exc, EnvironmentArchived):
        return _error("environment_archived_error", str(exc))
    if isinstance(exc, NotFound):
        return _error(_NOT_FOUND.get(exc.kind, "session_resource_not_found_error"), str(exc))
    if isinstance(exc, InvalidRequest):
        return _error("session_creation_rejected_error", str(exc))
    return _error("unknown_error", str(exc))


def paused_error(error: Mapping[str, Any]) -> dict[str, str]:
    """``paused_reason.error`` for an auto-pause by a run that failed with ``error``."""
    error_type = str(error.get("type"))
    return {"type": error_type if error_type in _PAUSE_TYPES else "unknown_error"}
