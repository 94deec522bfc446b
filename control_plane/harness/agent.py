"""The agent configuration as the harness uses it: which tools the model sees, and their policies.

:class:`AgentSpec` is parsed once from the session's resolved ``agent`` snapshot. The tools go to
the model in a stable order (the toolset's tools in :data:`TOOLSET_ORDER`, then custom tools in the
agent's order) so that prompt caching keeps hitting. Nothing here does I/O.

Toolset policies: ``always_allow`` → ``evaluated_permission: allow``; ``always_ask`` → ``ask`` (the
call waits for ``user.tool_confirmation``); ``auto`` is evaluated per tool by a fixed, documented rule
that never fails open: the toolset's tools that only read the workspace (``read``, ``glob``,
``grep``: :data:`AUTO_ALLOWED_TOOLS`) are ``allow``, every other tool (``bash``, ``write``, ``edit``,
any MCP tool) is ``ask``. Tools the model names that the agent does not enable are ``deny``.
``web_fetch`` / ``web_search`` (server-executed upstream) are not offered yet.

MCP servers: each ``mcp_servers`` entry that an ``mcp_toolset`` refers to becomes an
:class:`McpServerSpec` (its URL, the toolset's ``default_config`` and per-tool ``configs``). Which of
its tools are offered depends on what the server lists at the time
(:mod:`~control_plane.harness.mcp_offer`); their policies map as above (default ``always_ask``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from control_plane.agents.configuration import agent_tool_settings
from control_plane.harness.skills_prompt import SkillOffer, parse_skill_offers, skills_section

__all__ = [
    "AUTO_ALLOWED_TOOLS",
    "TOOLSET_ORDER",
    "AgentSpec",
    "CustomTool",
    "McpServerSpec",
    "McpToolSetting",
    "Permission",
    "ToolsetTool",
    "permission_of",
]

#: The sandbox tools of ``agent_toolset_20260401``, in the order the model sees them.
TOOLSET_ORDER: tuple[str, ...] = ("bash", "edit", "read", "write", "glob", "grep")

_TOOLSET_DEFINITIONS: dict[str, dict[str, Any]] = {
    "bash": {
        "description": (
            "Run a command in a persistent bash shell in the session's sandbox. The working "
            "directory and environment persist between calls. A non-zero exit status is an error "
            "result carrying the output. Set restart to true (without a command) to start a fresh shell."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "Shell command to execute."},
                "restart": {"type": "boolean", "description": "Restart the bash session instead."},
                "timeout_ms": {"type": "integer", "description": "Per-call timeout in milliseconds."},
            },
        },
    },
    "edit": {
        "description": (
            "Replace old_string with new_string in a file. old_string must occur exactly once "
            "unless replace_all is true."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "file_path": {"type": "string", "description": "Path of the file to edit."},
                "old_string": {"type": "string", "description": "Substring to find and replace."},
                "new_string": {"type": "string", "description": "Replacement text."},
                "replace_all": {"type": "boolean", "description": "Replace every occurrence."},
            },
            "required": ["file_path", "old_string", "new_string"],
        },
    },
    "read": {
        "description": (
            "Read a file. Text files are returned as text; images and PDFs as content blocks. "
            "view_range [start, end] selects 1-indexed inclusive lines (end <= 0 means to the end)."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "file_path": {"type": "string", "description": "Path of the file to read."},
                "view_range": {
                    "type": "array",
                    "items": {"type": "integer"},
                    "description": "Optional [start_line, end_line], 1-indexed inclusive.",
                },
            },
            "required": ["file_path"],
        },
    },
    "write": {
        "description": "Write (overwrite) a whole file, creating parent directories.",
        "input_schema": {
            "type": "object",
            "properties": {
                "file_path": {"type": "string", "description": "Path of the file to write."},
                "content": {"type": "string", "description": "Full file contents to write."},
            },
            "required": ["file_path", "content"],
        },
    },
    "glob": {
        "description": "List paths matching a glob pattern (** allowed), newest first.",
        "input_schema": {
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Glob pattern, e.g. **/*.py."},
                "path": {"type": "string", "description": "Directory to search under."},
            },
            "required": ["pattern"],
        },
    },
    "grep": {
        "description": "Search file contents for a regular expression; returns path:line:text lines.",
        "input_schema": {
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Regular expression to search for."},
                "path": {"type": "string", "description": "Directory to search under."},
            },
            "required": ["pattern"],
        },
    },
}

_POLICY_TO_PERMISSION = {"always_allow": "allow", "always_ask": "ask"}
_MCP_DEFAULT_POLICY = "always_ask"
# What ``auto`` lets through without asking: toolset tools that cannot change anything.
AUTO_ALLOWED_TOOLS = frozenset({"read", "glob", "grep"})


def permission_of(policy: str, tool: str | None = None) -> str:
    """The ``evaluated_permission`` of a configured policy for toolset tool ``tool`` (``None``: a
    tool outside the toolset, e.g. an MCP tool). ``auto`` allows only :data:`AUTO_ALLOWED_TOOLS`;
    an unknown policy asks."""
    if policy == "auto":
        return "allow" if tool in AUTO_ALLOWED_TOOLS else "ask"
    return _POLICY_TO_PERMISSION.get(policy, "ask")


@dataclass(frozen=True, slots=True)
class Permission:
    """How a tool call of the model is handled.

    ``kind``: ``toolset`` (run through the gateway), ``custom`` (the client runs it) or ``unknown``
    (not enabled: refused). ``permission``: ``allow`` | ``ask`` | ``deny``; ``policy`` is the
    configured policy type (``always_allow`` | ``always_ask`` | ``auto``) or ``None``.
    """

    kind: str
    permission: str
    policy: str | None = None


@dataclass(frozen=True, slots=True)
class ToolsetTool:
    name: str
    policy: str  # always_allow | always_ask | auto


@dataclass(frozen=True, slots=True)
class CustomTool:
    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True, slots=True)
class McpToolSetting:
    """One entry of an ``mcp_toolset``'s ``configs``."""

    name: str
    enabled: bool
    policy: str


@dataclass(frozen=True, slots=True)
class McpServerSpec:
    """An MCP server of the agent and its toolset's switches."""

    name: str
    url: str
    default_enabled: bool = True
    default_policy: str = _MCP_DEFAULT_POLICY
    configs: tuple[McpToolSetting, ...] = ()

    def setting(self, tool: str) -> tuple[bool, str]:
        """``(enabled, policy)`` of the server's tool ``tool``."""
        for config in self.configs:
            if config.name == tool:
                return config.enabled, config.policy
        return self.default_enabled, self.default_policy


@dataclass(frozen=True, slots=True)
class AgentSpec:
    """What the harness needs from the session's resolved ``agent`` snapshot."""

    model: str
    system: str | None
    toolset: tuple[ToolsetTool, ...] = ()
    custom: tuple[CustomTool, ...] = ()
    mcp_servers: tuple[McpServerSpec, ...] = ()
    #: The system prompt's memory section (the session's mounted memory stores), after ``system``.
    memory: str | None = None
    skills: tuple[SkillOffer, ...] = ()  # offered in the system prompt (skills_prompt)
    #: A coordinator's ``call_agent_*`` tools (multiagent: control_plane/harness/thread_brains.py).
    delegates: tuple[CustomTool, ...] = ()
    #: The toolset's calls are run by an outside worker (a worker-run environment): they wait for
    #: the client's ``user.tool_result`` like custom tools; no sandbox is provisioned.
    worker_tools: bool = False

    @classmethod
    def from_json(
        cls, agent: Mapping[str, Any], *, memory: str | None = None, skill_offers: Any = None
    ) -> AgentSpec:
        """Parse the resolved snapshot the API stores (``model`` as ``{id, ...}`` or an id; tools
        resolved by ``control_plane.agents.configuration``) and the session's ``skill_offers``.
        Raises ``ValueError`` when there is no model id or the tools are not in the resolved form."""
        model = agent.get("model")
        model_id = model.get("id") if isinstance(model, Mapping) else model
        if not isinstance(model_id, str) or not model_id:
            raise ValueError("the session's agent has no model id")
        system = agent.get("system")
        raw_tools = [t for t in agent.get("tools") or () if isinstance(t, Mapping)]
        try:
            settings = agent_tool_settings(raw_tools)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"the session's agent tools are not resolved: {exc!r}") from None
        policies = {s.name: s.permission_policy for s in settings if s.kind == "agent_toolset" and s.enabled}
        custom = [
            CustomTool(
                name=str(t["name"]),
                description=str(t.get("description") or ""),
                input_schema=dict(t["input_schema"])
                if isinstance(t.get("input_schema"), Mapping)
                else {"type": "object"},
            )
            for t in raw_tools
            if t.get("type") == "custom" and isinstance(t.get("name"), str)
        ]
        return cls(
            model=model_id,
            system=system if isinstance(system, str) and system else None,
            toolset=tuple(ToolsetTool(name, policies[name]) for name in TOOLSET_ORDER if name in policies),
            custom=tuple(custom),
            mcp_servers=_mcp_servers(agent.get("mcp_servers"), raw_tools),
            memory=memory,
            skills=parse_skill_offers(skill_offers),
        )

    @property
    def uses_sandbox(self) -> bool:
        """Whether any tool runs in the sandbox (so provisioning one is worth it)."""
        return bool(self.toolset) and not self.worker_tools

    def permission(self, name: str) -> Permission:
        """How a call of tool ``name`` is handled."""
        for tool in self.toolset:
            if tool.name == name:
                return Permission("toolset", permission_of(tool.policy, tool.name), tool.policy)
        for custom in self.custom:
            if custom.name == name:
                return Permission("custom", "allow")
        if any(d.name == name for d in self.delegates):
            return Permission("delegate", "allow")  # run by the harness: a subagent thread
        return Permission("unknown", "deny")

    @property
    def reserved_tool_names(self) -> frozenset[str]:
        """The names of the toolset's and the custom tools (MCP tools must not take them)."""
        names = [t.name for t in self.toolset] + [c.name for c in (*self.custom, *self.delegates)]
        return frozenset(names)

    def tools_param(self, mcp_tools: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
        """The Messages API ``tools``, in a stable order (the toolset's, then ``mcp_tools`` as
        given, then the custom tools and a coordinator's ``call_agent_*`` tools), ``cache_control``
        on the last one."""
        tools: list[dict[str, Any]] = []
        for tool in self.toolset:
            definition = _TOOLSET_DEFINITIONS[tool.name]
            tools.append(
                {
                    "name": tool.name,
                    "description": definition["description"],
                    "input_schema": copy.deepcopy(definition["input_schema"]),
                }
            )
        tools.extend(copy.deepcopy(dict(t)) for t in mcp_tools)
        for custom in (*self.custom, *self.delegates):
            tools.append(
                {
                    "name": custom.name,
                    "description": custom.description,
                    "input_schema": copy.deepcopy(custom.input_schema),
                }
            )
        if tools:
            tools[-1]["cache_control"] = {"type": "ephemeral"}
        return tools

    def system_param(self) -> list[dict[str, Any]] | None:
        """The ``system`` blocks (the agent's prompt, the skills section, then the memory section:
        all fixed for the session's life; ``cache_control`` on the last), or ``None`` without any."""
        texts = [t for t in (self.system, skills_section(self.skills), self.memory) if t is not None]
        if not texts:
            return None
        blocks: list[dict[str, Any]] = [{"type": "text", "text": text} for text in texts]
        blocks[-1]["cache_control"] = {"type": "ephemeral"}
        return blocks


def _mcp_servers(servers: Any, tools: Sequence[Mapping[str, Any]]) -> tuple[McpServerSpec, ...]:
    """The servers of ``mcp_servers`` (in that order) that an ``mcp_toolset`` refers to."""
    toolsets = {t.get("mcp_server_name"): t for t in tools if t.get("type") == "mcp_toolset"}
    specs: list[McpServerSpec] = []
    for server in servers if isinstance(servers, list) else ():
        if not isinstance(server, Mapping):
            continue
        name, url = server.get("name"), server.get("url")
        toolset = toolsets.get(name)
        if not isinstance(name, str) or not isinstance(url, str) or toolset is None:
            continue
        default = toolset.get("default_config")
        default = default if isinstance(default, Mapping) else {}
        default_policy = _policy_type(default.get("permission_policy"), _MCP_DEFAULT_POLICY)
        default_enabled = default.get("enabled") is not False
        configs = tuple(
            McpToolSetting(
                name=str(c["name"]),
                enabled=default_enabled if c.get("enabled") is None else bool(c["enabled"]),
                policy=_policy_type(c.get("permission_policy"), default_policy),
            )
            for c in toolset.get("configs") or ()
            if isinstance(c, Mapping) and isinstance(c.get("name"), str)
        )
        specs.append(McpServerSpec(name, url, default_enabled, default_policy, configs))
    return tuple(specs)


def _policy_type(policy: Any, default: str) -> str:
    kind = policy.get("type") if isinstance(policy, Mapping) else None
    return kind if isinstance(kind, str) else default
