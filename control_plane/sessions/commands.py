"""What :class:`~control_plane.sessions.service.SessionService` is asked, and what it answers.

Typed values, not HTTP models: the API's routers translate request bodies and query strings into
these, and the service's results (domain objects: resources, events, status read from the log)
back into the JSON the SDK parses. Client-sent lists the domain validates itself (initial events,
repository params) travel raw, as the client sent them. The :class:`Viewer` (the environments a
caller's key sees; a session of another environment is "not found", as if unknown) is the
environments' (:mod:`control_plane.environments.commands`), re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from control_plane.environments.commands import Viewer  # re-exported
from control_plane.sessions.agent_snapshot import KEEP, AgentChange, AgentOverrides, Keep
from control_plane.sessions.events import SessionStatus
from control_plane.sessions.log import StatusView
from control_plane.store.base import Event, Order, Resource

__all__ = [
    "AgentChoice",
    "CreateSession",
    "EventPage",
    "EventQuery",
    "SessionPage",
    "SessionQuery",
    "SessionView",
    "UpdateSession",
    "Viewer",
]


@dataclass(frozen=True, slots=True)
class AgentChoice:
    """The agent a new session snapshots: a version (``None``: the latest), optionally with
    overrides (``agent_with_overrides``; an empty :class:`AgentOverrides` still re-resolves)."""

    id: str
    version: int | None = None
    overrides: AgentOverrides | None = None


@dataclass(frozen=True, slots=True)
class CreateSession:
    agent: AgentChoice
    environment_id: str
    title: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    initial_events: Sequence[Any] = ()  # raw client events (``user.message`` only)
    vault_ids: Sequence[str] = ()
    resources: Sequence[Any] = ()  # raw ``github_repository`` params
    budget: Mapping[str, Any] | None = None  # raw ``budget`` param (checked by the service)
    # Deployments: the deployment stamped on the session (its initial events may then hold a
    # ``system.message``), and the id a scheduled tick derives (``Conflict`` if it exists).
    deployment_id: str | None = None
    session_id: str | None = None


@dataclass(frozen=True, slots=True)
class UpdateSession:
    """A patch: :data:`KEEP` (or ``None`` where ``None`` cannot mean "clear") leaves a field be."""

    agent: AgentChange | None = None
    title: str | Keep | None = KEEP
    metadata: Mapping[str, str | None] | None = None  # upsert, ``None`` values delete
    budget: Mapping[str, Any] | Keep | None = KEEP  # raw; ``None`` removes the budget
    vault_ids: Sequence[str] | Keep | None = KEEP  # refused when sent at all


@dataclass(frozen=True, slots=True)
class SessionQuery:
    """A page of sessions. ``cursor`` is the store's (``forward``: it came as a next page);
    time bounds are inclusive."""

    limit: int = 20
    cursor: str | None = None
    forward: bool = True
    order: Order = Order.DESC
    include_archived: bool = False
    statuses: frozenset[SessionStatus] = frozenset()  # empty: any
    agent_id: str | None = None
    agent_version: int | None = None  # only with agent_id
    deployment_id: str | None = None
    memory_store_id: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None


@dataclass(frozen=True, slots=True)
class EventQuery:
    """A page of a session's log: up to ``limit`` events past the seq ``after`` (in ``order``),
    of ``types`` (``None``: all), ``processed_at`` within the inclusive bounds."""

    limit: int
    after: int | None = None
    order: Order = Order.ASC
    types: Sequence[str] | None = None
    processed_after: datetime | None = None
    processed_before: datetime | None = None

    @property
    def unbounded(self) -> bool:
        return self.processed_after is None and self.processed_before is None

    def in_bounds(self, value: datetime) -> bool:
        return (self.processed_after is None or value >= self.processed_after) and (
            self.processed_before is None or value <= self.processed_before
        )


@dataclass(frozen=True, slots=True)
class SessionView:
    """A session as read now: its resource, its status and usage read from its log, its
    repositories, and the time of reading (its durations run to it)."""

    session: Resource
    status: StatusView
    usage: dict[str, Any]
    repositories: list[Resource]
    now: datetime
    outcome_evaluations: list[dict[str, Any]] = field(default_factory=list)  # read from its log

    @property
    def current_status(self) -> SessionStatus:
        """An archived session is terminated whatever its log says."""
        return SessionStatus.TERMINATED if self.session.archived_at is not None else self.status.status


@dataclass(frozen=True, slots=True)
class SessionPage:
    items: list[SessionView]
    next_cursor: str | None  # the store's cursors
    prev_cursor: str | None


@dataclass(frozen=True, slots=True)
class EventPage:
    events: list[Event]
    more: bool  # more events follow the last one
