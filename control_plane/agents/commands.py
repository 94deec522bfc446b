"""What :class:`~control_plane.agents.service.AgentService` is asked.

Typed values, not HTTP models: the API's router translates request bodies and query strings into
these. An agent's parts are the configuration models of :mod:`control_plane.agents.configuration`
(as a client sends them); the service resolves them. Its answers are the store's ``Resource`` (an
agent version) and ``Page``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from control_plane.agents.configuration import (
    AwsRoleIdentity,
    McpServerParams,
    ModelConfigParams,
    ServiceAccountIdentity,
    SkillParams,
    ToolParams,
)
from control_plane.patch import KEEP, Keep

__all__ = ["AgentQuery", "CreateAgent", "ExecutionIdentity", "Model", "UpdateAgent"]

Model = str | ModelConfigParams
ExecutionIdentity = ServiceAccountIdentity | AwsRoleIdentity


@dataclass(frozen=True, slots=True)
class CreateAgent:
    name: str
    model: Model
    description: str | None = None  # None or "": none
    system: str | None = None  # None or "": no system prompt
    tools: Sequence[ToolParams] = ()
    mcp_servers: Sequence[McpServerParams] = ()
    skills: Sequence[SkillParams] = ()
    metadata: Mapping[str, str] = field(default_factory=dict)
    execution_identity: ExecutionIdentity | None = None
    multiagent: Mapping[str, Any] | None = None  # resolved: control_plane/agents/multiagent.py


@dataclass(frozen=True, slots=True)
class UpdateAgent:
    """A patch: :data:`KEEP` leaves a field as it is, ``None`` clears it (``name`` and ``model``
    cannot be cleared). ``version``: apply only if the agent is still at that version."""

    version: int | None = None
    name: str | Keep | None = KEEP
    model: Model | Keep | None = KEEP  # a model object without ``effort`` keeps the current effort
    description: str | Keep | None = KEEP
    system: str | Keep | None = KEEP
    tools: Sequence[ToolParams] | Keep | None = KEEP  # lists are replaced whole
    mcp_servers: Sequence[McpServerParams] | Keep | None = KEEP
    skills: Sequence[SkillParams] | Keep | None = KEEP
    metadata: Mapping[str, str | None] | Keep | None = KEEP  # upsert, ``None`` values delete
    execution_identity: ExecutionIdentity | Keep | None = KEEP
    multiagent: Mapping[str, Any] | Keep | None = KEEP  # None: removed


@dataclass(frozen=True, slots=True)
class AgentQuery:
    """A page of agents (latest versions), newest first; time bounds are inclusive."""

    limit: int = 20
    cursor: str | None = None  # the store's
    include_archived: bool = False
    created_after: datetime | None = None
    created_before: datetime | None = None
