"""An agent's configuration: the request models for its parts and their resolution to the stored form.

What a client sends is loose (a model as a bare string, a toolset with no ``default_config``); what
is stored and returned is resolved, in the shape of the SDK's ``BetaManagedAgentsAgent``:

* ``model`` is always ``{"id", "effort", "inference_geo", "speed"}`` (``effort`` as ``{"type"}``);
* an ``agent_toolset_20260401`` lists every tool of the toolset in ``configs`` with a resolved
  ``enabled`` and ``permission_policy`` (the toolset default is enabled + ``always_allow``);
* an ``mcp_toolset`` gets a resolved ``default_config`` (enabled + ``always_ask``) and resolved
  ``configs`` for the tools it names; custom tools are kept as given;
* every ``mcp_servers`` entry must be used by an ``mcp_toolset`` and every toolset must name a
  server; skills get ``version: "latest"`` when none is given.

The resolved form is also valid input, so a client can GET an agent, edit it and POST it back.
:func:`agent_tool_settings` gives the harness the per-tool switches it needs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from control_plane.errors import InvalidRequest
from control_plane.outbound import OutboundGuard

__all__ = [
    "AGENT_TOOLSET_TYPE",
    "AGENT_TOOL_NAMES",
    "AgentToolConfig",
    "AgentToolsetParams",
    "CustomToolParams",
    "ExecutionIdentityParams",
    "McpServerParams",
    "McpToolsetParams",
    "ModelConfigParams",
    "SkillParams",
    "ToolParams",
    "ToolSetting",
    "agent_tool_settings",
    "resolve_execution_identity",
    "resolve_mcp_servers",
    "resolve_model",
    "resolve_skills",
    "resolve_tools",
    "stored_tool_params",
]

AGENT_TOOLSET_TYPE = "agent_toolset_20260401"
AGENT_TOOL_NAMES: tuple[str, ...] = (
    "bash",
    "edit",
    "read",
    "write",
    "glob",
    "grep",
    "web_fetch",
    "web_search",
)
MAX_TOOLS = 256
MAX_MCP_SERVERS = 20

PolicyType = Literal["always_allow", "always_ask", "auto"]
Effort = Literal["low", "medium", "high", "xhigh", "max"]
_WEB_EXTRAS: dict[str, frozenset[str]] = {
    "web_fetch": frozenset({"allowed_domains", "blocked_domains", "max_content_tokens", "url_sources"}),
    "web_search": frozenset({"allowed_domains", "blocked_domains", "user_location"}),
}
_EXTRA_FIELDS = frozenset().union(*_WEB_EXTRAS.values())


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PermissionPolicy(_Params):
    type: PolicyType


class DefaultConfig(_Params):
    enabled: bool | None = None
    permission_policy: PermissionPolicy | None = None


class AgentToolConfig(_Params):
    """One tool of the agent toolset: ``name`` (and optionally ``type``) is the tool."""

    name: Literal["bash", "edit", "read", "write", "glob", "grep", "web_fetch", "web_search"]
    type: Literal["bash", "edit", "read", "write", "glob", "grep", "web_fetch", "web_search"] | None = None
    enabled: bool | None = None
    permission_policy: PermissionPolicy | None = None
    allowed_domains: Annotated[list[str], Field(min_length=1, max_length=64)] | None = None
    blocked_domains: Annotated[list[str], Field(min_length=1, max_length=64)] | None = None
    max_content_tokens: Annotated[int, Field(ge=1)] | None = None
    url_sources: dict[str, Any] | None = None
    user_location: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _check(self) -> AgentToolConfig:
        if self.type is not None and self.type != self.name:
            raise ValueError(f"type {self.type!r} does not match name {self.name!r}")
        given = {f for f in _EXTRA_FIELDS if getattr(self, f) is not None}
        unexpected = given - _WEB_EXTRAS.get(self.name, frozenset())
        if unexpected:
            raise ValueError(f"{', '.join(sorted(unexpected))} not allowed for the {self.name} tool")
        if self.allowed_domains is not None and self.blocked_domains is not None:
            raise ValueError("allowed_domains and blocked_domains cannot be combined")
        return self


class AgentToolsetParams(_Params):
    type: Literal["agent_toolset_20260401"]
    configs: list[AgentToolConfig] = Field(default_factory=list)
    default_config: DefaultConfig | None = None


class McpToolConfig(_Params):
    name: Annotated[str, Field(min_length=1, max_length=128)]
    enabled: bool | None = None
    permission_policy: PermissionPolicy | None = None


class McpToolsetParams(_Params):
    type: Literal["mcp_toolset"]
    mcp_server_name: Annotated[str, Field(min_length=1, max_length=255)]
    configs: list[McpToolConfig] = Field(default_factory=list)
    default_config: DefaultConfig | None = None


class CustomToolInputSchema(BaseModel):
    """A JSON Schema object; keys beyond these are kept."""

    model_config = ConfigDict(extra="allow")
    type: Literal["object"]
    properties: dict[str, Any] | None = None
    required: list[str] | None = None


class CustomToolParams(_Params):
    type: Literal["custom"]
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,128}$")]
    description: str
    input_schema: CustomToolInputSchema


ToolParams = Annotated[AgentToolsetParams | McpToolsetParams | CustomToolParams, Field(discriminator="type")]


class McpServerParams(_Params):
    type: Literal["url"]
    name: Annotated[str, Field(min_length=1, max_length=255)]
    #: ``http(s)://`` servers are called by the control plane; ``edge://<name>`` names a private
    #: server fronted by the session's edge (reached through the tunnel).
    url: Annotated[str, Field(pattern=r"^(https?://\S+|edge://[a-z0-9][a-z0-9_-]{0,47})$", max_length=2048)]


class EffortObject(_Params):
    type: Effort


class ModelConfigParams(_Params):
    id: Annotated[str, Field(min_length=1, max_length=256)]
    effort: Effort | EffortObject | None = None
    inference_geo: str | None = None
    speed: Literal["standard", "fast"] | None = None


class SkillParams(_Params):
    type: Literal["anthropic", "custom"]
    skill_id: Annotated[str, Field(min_length=1, max_length=256)]
    version: str | None = None


class ServiceAccountIdentity(_Params):
    type: Literal["service_account"]


class AwsRoleIdentity(_Params):
    type: Literal["aws_role"]
    role_arn: Annotated[str, Field(min_length=1, max_length=2048)]


ExecutionIdentityParams = Annotated[ServiceAccountIdentity | AwsRoleIdentity, Field(discriminator="type")]


# -- resolution ----------------------------------------------------------------------------------


def resolve_model(model: str | ModelConfigParams) -> dict[str, Any]:
    """The stored model object; a bare string is the model id."""
    if isinstance(model, str):
        if not model.strip():
            raise InvalidRequest("model must not be empty", param="model")
        model = ModelConfigParams(id=model)
    effort = model.effort
    if isinstance(effort, str):
        effort = EffortObject(type=effort)
    return {
        "id": model.id,
        "effort": None if effort is None else {"type": effort.type},
        "inference_geo": model.inference_geo,
        "speed": model.speed or "standard",
    }


def resolve_skills(skills: Sequence[SkillParams]) -> list[dict[str, Any]]:
    seen: set[tuple[str, str]] = set()
    out = []
    for index, skill in enumerate(skills):
        key = (skill.type, skill.skill_id)
        if key in seen:
            raise InvalidRequest(f"skills[{index}]: skill {skill.skill_id!r} listed twice", param="skills")
        seen.add(key)
        out.append({"type": skill.type, "skill_id": skill.skill_id, "version": skill.version or "latest"})
    return out


def resolve_execution_identity(identity: ServiceAccountIdentity | AwsRoleIdentity | None) -> dict[str, Any]:
    if isinstance(identity, AwsRoleIdentity):
        return {"type": "aws_role", "role_arn": identity.role_arn}
    return {"type": "service_account"}


def resolve_mcp_servers(
    servers: Sequence[McpServerParams], outbound: OutboundGuard | None = None
) -> list[dict[str, Any]]:
    """The stored ``mcp_servers``. A server the control plane would dial itself (``http(s)://``)
    must pass ``outbound``'s static check (default: no private networks; 400 naming the rule)."""
    guard = outbound or OutboundGuard()
    if len(servers) > MAX_MCP_SERVERS:
        raise InvalidRequest(f"mcp_servers: at most {MAX_MCP_SERVERS} servers", param="mcp_servers")
    names: set[str] = set()
    for index, server in enumerate(servers):
        if server.name in names:
            raise InvalidRequest(
                f"mcp_servers[{index}]: server name {server.name!r} is used twice", param="mcp_servers"
            )
        names.add(server.name)
        if server.url.partition("://")[0].lower() in ("http", "https"):
            guard.check_url(server.url, param=f"mcp_servers[{index}].url")
    return [{"type": "url", "name": s.name, "url": s.url} for s in servers]


def _policy(policy: PermissionPolicy | None, default: str) -> dict[str, str]:
    return {"type": policy.type if policy is not None else default}


def _resolve_agent_toolset(tool: AgentToolsetParams, where: str) -> dict[str, Any]:
    default = tool.default_config or DefaultConfig()
    default_enabled = True if default.enabled is None else default.enabled
    default_policy = _policy(default.permission_policy, "always_allow")
    overrides: dict[str, AgentToolConfig] = {}
    for index, given in enumerate(tool.configs):
        if given.name in overrides:
            raise InvalidRequest(
                f"{where}.configs[{index}]: tool {given.name!r} is configured twice", param=where
            )
        overrides[given.name] = given
    configs = []
    for name in AGENT_TOOL_NAMES:
        config = overrides.get(name)
        enabled = default_enabled if config is None or config.enabled is None else config.enabled
        policy = (
            default_policy if config is None else _policy(config.permission_policy, default_policy["type"])
        )
        resolved: dict[str, Any] = {
            "type": name,
            "name": name,
            "enabled": enabled,
            "permission_policy": dict(policy),
        }
        if config is not None:
            extras = set(_WEB_EXTRAS.get(name, ()))
            resolved.update(config.model_dump(mode="json", include=extras, exclude_none=True))
        configs.append(resolved)
    return {
        "type": AGENT_TOOLSET_TYPE,
        "default_config": {"enabled": default_enabled, "permission_policy": default_policy},
        "configs": configs,
    }


def _resolve_mcp_toolset(tool: McpToolsetParams, where: str) -> dict[str, Any]:
    default = tool.default_config or DefaultConfig()
    default_enabled = True if default.enabled is None else default.enabled
    default_policy = _policy(default.permission_policy, "always_ask")
    names: set[str] = set()
    configs = []
    for index, config in enumerate(tool.configs):
        if config.name in names:
            raise InvalidRequest(
                f"{where}.configs[{index}]: tool {config.name!r} is configured twice", param=where
            )
        names.add(config.name)
        configs.append(
            {
                "name": config.name,
                "enabled": default_enabled if config.enabled is None else config.enabled,
                "permission_policy": _policy(config.permission_policy, default_policy["type"]),
            }
        )
    return {
        "type": "mcp_toolset",
        "mcp_server_name": tool.mcp_server_name,
        "default_config": {"enabled": default_enabled, "permission_policy": default_policy},
        "configs": configs,
    }


def resolve_tools(
    tools: Sequence[AgentToolsetParams | McpToolsetParams | CustomToolParams],
    mcp_servers: Sequence[Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """Resolve ``tools`` against the (resolved) ``mcp_servers`` they may reference.

    Raises ``InvalidRequest`` for a second agent toolset, a toolset naming an unknown server or a
    server twice, a server no toolset uses, a custom tool name used twice or clashing with an agent
    tool, or more than 256 tools in all.
    """
    server_names = {str(s["name"]) for s in mcp_servers}
    used_servers: set[str] = set()
    custom_names: set[str] = set()
    has_toolset = False
    count = 0
    out: list[dict[str, Any]] = []
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        if isinstance(tool, AgentToolsetParams):
            if has_toolset:
                raise InvalidRequest(f"{where}: {AGENT_TOOLSET_TYPE} may appear only once", param="tools")
            has_toolset = True
            count += len(AGENT_TOOL_NAMES)
            out.append(_resolve_agent_toolset(tool, where))
        elif isinstance(tool, McpToolsetParams):
            name = tool.mcp_server_name
            if name not in server_names:
                raise InvalidRequest(
                    f"{where}: mcp_server_name {name!r} is not in mcp_servers", param="tools"
                )
            if name in used_servers:
                raise InvalidRequest(
                    f"{where}: MCP server {name!r} already has an mcp_toolset", param="tools"
                )
            used_servers.add(name)
            count += max(1, len(tool.configs))
            out.append(_resolve_mcp_toolset(tool, where))
        else:
            if tool.name in custom_names or tool.name in AGENT_TOOL_NAMES:
                raise InvalidRequest(f"{where}: tool name {tool.name!r} is already in use", param="tools")
            custom_names.add(tool.name)
            count += 1
            out.append(tool.model_dump(mode="json", exclude_none=True))
    if count > MAX_TOOLS:
        raise InvalidRequest(f"tools: at most {MAX_TOOLS} tools across all toolsets", param="tools")
    unused = sorted(server_names - used_servers)
    if unused:
        raise InvalidRequest(
            f"mcp_servers: {', '.join(repr(n) for n in unused)} not referenced by any mcp_toolset in tools",
            param="mcp_servers",
        )
    return out


_TOOLS: TypeAdapter[list[ToolParams]] = TypeAdapter(list[ToolParams])


def stored_tool_params(tools: Any) -> list[Any]:
    """Stored (resolved) tools read back as request models, to resolve them again."""
    try:
        return list(_TOOLS.validate_python(tools or []))
    except ValidationError as exc:  # a stored body is ours; this is a bug, not bad input
        raise RuntimeError(f"stored tools do not validate: {exc}") from exc


# -- for the harness -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolSetting:
    """Whether a configured tool may be offered to the model, and how a call is permitted."""

    name: str
    kind: Literal["agent_toolset", "mcp_toolset", "custom"]
    enabled: bool
    permission_policy: str  # always_allow | always_ask | auto ("always_allow" for custom tools)
    mcp_server_name: str | None = None


def agent_tool_settings(tools: Sequence[Mapping[str, Any]]) -> list[ToolSetting]:
    """Flatten resolved ``tools`` (as stored) into one :class:`ToolSetting` per named tool: the
    agent toolset's tools, the MCP tools named in a toolset's ``configs``, and custom tools. An MCP
    toolset's ``default_config`` (for tools it does not name) stays on the toolset entry."""
    out: list[ToolSetting] = []
    for tool in tools:
        kind = tool.get("type")
        if kind == AGENT_TOOLSET_TYPE:
            for config in tool.get("configs", ()):
                out.append(
                    ToolSetting(
                        name=str(config["name"]),
                        kind="agent_toolset",
                        enabled=bool(config["enabled"]),
                        permission_policy=str(config["permission_policy"]["type"]),
                    )
                )
        elif kind == "mcp_toolset":
            for config in tool.get("configs", ()):
                out.append(
                    ToolSetting(
                        name=str(config["name"]),
                        kind="mcp_toolset",
                        enabled=bool(config["enabled"]),
                        permission_policy=str(config["permission_policy"]["type"]),
                        mcp_server_name=str(tool["mcp_server_name"]),
                    )
                )
        elif kind == "custom":
            out.append(
                ToolSetting(
                    name=str(tool["name"]), kind="custom", enabled=True, permission_policy="always_allow"
                )
            )
    return out
