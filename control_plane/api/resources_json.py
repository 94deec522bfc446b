"""JSON shapes of agents and sessions, exactly as the SDK's ``BetaManagedAgentsAgent`` and
``BetaManagedAgentsSession`` types declare them. Stored bodies hold the resolved configuration;
the identity, version and timestamps come from the store's :class:`Resource`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from control_plane.sessions.agent_snapshot import (  # re-exported
    AGENT_CONFIG_FIELDS,
    agent_config,
    session_agent_snapshot,
)
from control_plane.sessions.commands import SessionView
from control_plane.sessions.events import SessionStatus
from control_plane.sessions.log import StatusView
from control_plane.sessions.repositories import repository_json
from control_plane.store.base import Resource
from control_plane.timestamps import timestamp

__all__ = ["AGENT_CONFIG_FIELDS", "agent_json", "session_agent_snapshot", "session_json", "session_view_json"]


def agent_json(res: Resource) -> dict[str, Any]:
    body = res.body
    return {
        "type": "agent",
        "id": res.id,
        "version": res.version,
        **agent_config(body),
        "metadata": body.get("metadata", {}),
        "created_at": timestamp(res.created_at),
        "updated_at": timestamp(res.updated_at),
        "archived_at": timestamp(res.archived_at) if res.archived_at else None,
    }


def session_json(
    res: Resource,
    status: StatusView,
    usage: dict[str, Any],
    now: datetime,
    resources: list[dict[str, Any]] | None = None,
    outcome_evaluations: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A session; ``status`` and ``usage`` are read from its log, ``resources`` (their API views)
    from their own rows, the rest from its body."""
    body = res.body
    current = SessionStatus.TERMINATED if res.archived_at is not None else status.status
    if current is SessionStatus.TERMINATED:
        end = min(t for t in (res.archived_at, status.since, now) if t is not None)
    else:
        end = now
    updated = max(t for t in (res.updated_at, status.since) if t is not None)
    active = usage.get("active_seconds")
    return {
        "type": "session",
        "id": res.id,
        "status": current.value,
        "agent": body["agent"],
        "environment_id": body["environment_id"],
        "vault_ids": body.get("vault_ids", []),
        "resources": resources if resources is not None else body.get("resources", []),
        "metadata": body.get("metadata", {}),
        "title": body.get("title"),
        "budget": body.get("budget"),
        "deployment_id": body.get("deployment_id"),
        "outcome_evaluations": outcome_evaluations or [],
        "usage": usage,
        "stats": {
            "active_seconds": float(active) if isinstance(active, int | float) else 0.0,
            "duration_seconds": max(0.0, (end - res.created_at).total_seconds()),
        },
        "created_at": timestamp(res.created_at),
        "updated_at": timestamp(updated),
        "archived_at": timestamp(res.archived_at) if res.archived_at else None,
    }


def session_view_json(view: SessionView) -> dict[str, Any]:
    """A session as :meth:`~control_plane.sessions.service.SessionService` reads it."""
    resources = [repository_json(r) for r in view.repositories]
    return session_json(view.session, view.status, view.usage, view.now, resources, view.outcome_evaluations)
