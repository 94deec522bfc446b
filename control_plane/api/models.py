"""Request bodies of the agents, environments and sessions endpoints (pydantic, ``extra="forbid"``).

Every field the SDK can send is declared, so an unknown key is a clear 400. Fields that are part of
the API but not served by Outpost yet (session ``resources``, ``vault_ids`` on
update) are accepted by the model and refused by the route with a message naming
the field. Whether an optional field was sent at all (``null`` clears, omitted preserves) is read
from ``model_fields_set``.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from control_plane.agents.configuration import (
    ExecutionIdentityParams,
    McpServerParams,
    ModelConfigParams,
    SkillParams,
    ToolParams,
)
from control_plane.metadata import apply_metadata_patch, check_metadata  # re-exported for the routers

__all__ = [
    "MAX_INT",
    "AgentCreate",
    "AgentRef",
    "AgentUpdate",
    "AgentWithOverrides",
    "EnvironmentCreate",
    "EnvironmentUpdate",
    "EventsSend",
    "SessionAgentUpdate",
    "SessionCreate",
    "SessionUpdate",
    "apply_metadata_patch",
    "check_metadata",
]

MAX_INT = 2**63 - 1  # the store's integers are 64-bit: larger numbers are a 400, not a 500
# Names are shown in terminals, logs and consoles: no control characters (NUL, escape sequences) and no
# bidirectional overrides (U+202A..U+202E, U+2066..U+2069) that make one name read as another.
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _printable(value: str) -> str:
    if _UNPRINTABLE.search(value):
        raise ValueError("control characters and bidirectional overrides are not allowed in names")
    return value


Name = Annotated[str, Field(min_length=1, max_length=256), AfterValidator(_printable)]
Version = Annotated[int, Field(ge=1, le=MAX_INT)]
Description = Annotated[str, Field(max_length=2048)]
SystemPrompt = Annotated[str, Field(max_length=100_000)]
Model = str | ModelConfigParams


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- agents --------------------------------------------------------------------------------------


class AgentCreate(_Body):
    name: Name
    model: Model
    description: Description | None = None
    system: SystemPrompt | None = None
    tools: list[ToolParams] = Field(default_factory=list)
    mcp_servers: list[McpServerParams] = Field(default_factory=list)
    skills: list[SkillParams] = Field(default_factory=list)
    metadata: dict[str, str] = Field(default_factory=dict)
    execution_identity: ExecutionIdentityParams | None = None
    multiagent: dict[str, Any] | None = None


class AgentUpdate(_Body):
    version: Version | None = None
    name: Name | None = None
    model: Model | None = None
    description: Description | None = None
    system: SystemPrompt | None = None
    tools: list[ToolParams] | None = None
    mcp_servers: list[McpServerParams] | None = None
    skills: list[SkillParams] | None = None
    metadata: dict[str, str | None] | None = None
    execution_identity: ExecutionIdentityParams | None = None
    multiagent: dict[str, Any] | None = None


# -- environments --------------------------------------------------------------------------------


class EnvironmentCreate(_Body):
    name: Annotated[str, Field(min_length=1, max_length=255), AfterValidator(_printable)]
    description: Description | None = None
    config: dict[str, Any] | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    scope: Literal["organization", "account"] | None = None


class EnvironmentUpdate(_Body):
    name: Annotated[str, Field(min_length=1, max_length=255), AfterValidator(_printable)] | None = None
    description: Description | None = None
    config: dict[str, Any] | None = None
    metadata: dict[str, str | None] | None = None
    scope: Literal["organization", "account"] | None = None


# -- sessions ------------------------------------------------------------------------------------


class AgentRef(_Body):
    type: Literal["agent"]
    id: Annotated[str, Field(min_length=1)]
    version: Version | None = None


class AgentWithOverrides(_Body):
    type: Literal["agent_with_overrides"]
    id: Annotated[str, Field(min_length=1)]
    version: Version | None = None
    model: Model | None = None
    system: SystemPrompt | None = None
    tools: list[ToolParams] | None = None
    mcp_servers: list[McpServerParams] | None = None
    skills: list[SkillParams] | None = None


class SessionCreate(_Body):
    agent: (
        Annotated[str, Field(min_length=1)]
        | Annotated[AgentRef | AgentWithOverrides, Field(discriminator="type")]
    )
    environment_id: Annotated[str, Field(min_length=1)]
    title: Annotated[str, Field(max_length=1024)] | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    initial_events: Annotated[list[Any], Field(max_length=50)] = Field(default_factory=list)
    vault_ids: list[str] = Field(default_factory=list)
    resources: list[dict[str, Any]] = Field(default_factory=list)
    budget: dict[str, Any] | None = None


class SessionAgentUpdate(_Body):
    tools: list[ToolParams] | None = None
    mcp_servers: list[McpServerParams] | None = None


class SessionUpdate(_Body):
    agent: SessionAgentUpdate | None = None
    title: Annotated[str, Field(max_length=1024)] | None = None
    metadata: dict[str, str | None] | None = None
    budget: dict[str, Any] | None = None
    vault_ids: list[str] | None = None


class EventsSend(_Body):
    """The events themselves are checked by ``control_plane.sessions.input_events``."""

    events: list[Any]
