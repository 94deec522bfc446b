"""What :class:`~control_plane.deployments.service.DeploymentService` is asked, and what it answers.

Typed values, not HTTP models: the router translates request bodies and query strings into these.
Client-sent lists the domain validates itself (initial events, resources, the schedule, the
budget) travel raw, as the client sent them. Page cursors are the store's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from control_plane.patch import KEEP, Keep
from control_plane.store.base import Resource

__all__ = [
    "CreateDeployment",
    "DeploymentQuery",
    "DeploymentView",
    "RunQuery",
    "UpdateDeployment",
]


@dataclass(frozen=True, slots=True)
class CreateDeployment:
    agent: str | Mapping[str, Any]  # an id (the latest version, pinned now) or {type, id, version?}
    environment_id: str
    initial_events: Sequence[Any]
    name: str
    description: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    resources: Sequence[Any] = ()
    schedule: Mapping[str, Any] | None = None
    vault_ids: Sequence[str] = ()
    budget: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class UpdateDeployment:
    """A patch: :data:`KEEP` leaves a field; ``None`` clears the fields that may be cleared
    (description, resources, schedule, vault_ids, budget); ``metadata`` upserts, ``None`` values
    delete."""

    agent: str | Mapping[str, Any] | Keep = KEEP
    environment_id: str | Keep = KEEP
    initial_events: Sequence[Any] | Keep = KEEP
    name: str | Keep = KEEP
    description: str | Keep | None = KEEP
    metadata: Mapping[str, str | None] | Keep | None = KEEP
    resources: Sequence[Any] | Keep | None = KEEP
    schedule: Mapping[str, Any] | Keep | None = KEEP
    vault_ids: Sequence[str] | Keep | None = KEEP
    budget: Mapping[str, Any] | Keep | None = KEEP


@dataclass(frozen=True, slots=True)
class DeploymentQuery:
    """A page of deployments, newest first; time bounds are inclusive."""

    limit: int = 20
    cursor: str | None = None
    agent_id: str | None = None
    status: str | None = None  # active | paused
    include_archived: bool = False
    created_after: datetime | None = None
    created_before: datetime | None = None


@dataclass(frozen=True, slots=True)
class RunQuery:
    """A page of deployment runs, newest first; time bounds are inclusive."""

    limit: int = 20
    cursor: str | None = None
    deployment_id: str | None = None
    has_error: bool | None = None
    trigger_type: str | None = None  # schedule | manual
    created_after: datetime | None = None
    created_before: datetime | None = None


@dataclass(frozen=True, slots=True)
class DeploymentView:
    """A deployment as read now: its resource and its next fire times (UTC; empty when it has
    no schedule or is archived)."""

    deployment: Resource
    upcoming_runs_at: list[datetime]
