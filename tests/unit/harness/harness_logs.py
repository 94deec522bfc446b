"""Builders for session logs the step function reads (shared by the harness unit tests)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import TypeAdapter

from control_plane.agents.configuration import (
    McpServerParams,
    ToolParams,
    resolve_mcp_servers,
    resolve_model,
    resolve_tools,
)
from control_plane.harness import event_drafts as ev
from control_plane.harness.agent import AgentSpec
from control_plane.harness.mcp_offer import McpOffer
from control_plane.harness.step import model_output_events
from control_plane.mcp.models import McpToolInfo, ServerTools
from control_plane.store.base import Event

T0 = datetime(2026, 4, 1, 12, 0, 0, tzinfo=UTC)
SESSION = "sesn_test"


def resolved_agent(model: str, tools: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    """An agent snapshot resolved the way the API stores it (``control_plane.sessions``)."""
    params = TypeAdapter(list[ToolParams]).validate_python(tools)
    return {"model": resolve_model(model), "tools": resolve_tools(params, []), **fields}


AGENT_JSON: dict[str, Any] = resolved_agent(
    "claude-test",
    [
        {
            "type": "agent_toolset_20260401",
            "default_config": {"enabled": True, "permission_policy": {"type": "always_allow"}},
            "configs": [
                {"name": "bash", "enabled": True, "permission_policy": {"type": "always_allow"}},
                {"name": "write", "enabled": True, "permission_policy": {"type": "always_ask"}},
                {"name": "glob", "enabled": False, "permission_policy": {"type": "always_allow"}},
            ],
        },
        {
            "type": "custom",
            "name": "lookup_ticket",
            "description": "Look a ticket up in the tracker.",
            "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}},
        },
    ],
    type="agent",
    id="agent_1",
    version=1,
    name="coder",
    system="You are a careful engineer.",
    mcp_servers=[],
    skills=[],
)
AGENT = AgentSpec.from_json(AGENT_JSON)


def resolved_mcp_agent(
    tools: list[dict[str, Any]], servers: list[dict[str, Any]], **fields: Any
) -> dict[str, Any]:
    """Like :func:`resolved_agent`, with ``mcp_servers``; an ``edge://`` URL (which the API's
    validation does not take yet) is put in after resolution."""
    given = [
        {**s, "url": "https://placeholder.test/mcp"} if s["url"].startswith("edge://") else s for s in servers
    ]
    resolved = resolve_mcp_servers(TypeAdapter(list[McpServerParams]).validate_python(given))
    for entry, server in zip(resolved, servers, strict=True):
        entry["url"] = server["url"]
    params = TypeAdapter(list[ToolParams]).validate_python(tools)
    return {
        "model": resolve_model("claude-test"),
        "tools": resolve_tools(params, resolved),
        "mcp_servers": resolved,
        **fields,
    }


MCP_AGENT_JSON: dict[str, Any] = resolved_mcp_agent(
    [
        {
            "type": "agent_toolset_20260401",
            "default_config": {"enabled": False},
            "configs": [{"name": "bash", "enabled": True}],
        },
        {
            "type": "mcp_toolset",
            "mcp_server_name": "tickets",
            "default_config": {"permission_policy": {"type": "always_allow"}},
            "configs": [
                {"name": "delete_ticket", "enabled": False},
                {"name": "close_ticket", "permission_policy": {"type": "always_ask"}},
            ],
        },
        {
            "type": "mcp_toolset",
            "mcp_server_name": "docs",
            "configs": [{"name": "search", "permission_policy": {"type": "auto"}}],
        },
        {
            "type": "custom",
            "name": "lookup_ticket",
            "description": "Look a ticket up in the tracker.",
            "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}},
        },
    ],
    [
        {"type": "url", "name": "tickets", "url": "edge://tickets"},
        {"type": "url", "name": "docs", "url": "https://docs.example.test/mcp"},
    ],
    type="agent",
    id="agent_mcp",
    version=1,
    name="support",
    system="You help with tickets.",
    skills=[],
)
MCP_AGENT = AgentSpec.from_json(MCP_AGENT_JSON)


def _schema(*props: str) -> dict[str, Any]:
    return {"type": "object", "properties": {p: {"type": "string"} for p in props}, "required": list(props)}


#: What the servers of ``MCP_AGENT`` list (deliberately not in name order).
TICKETS_TOOLS = ServerTools(
    "tickets",
    (
        McpToolInfo("lookup_ticket", "Look a ticket up.", _schema("id")),
        McpToolInfo("close_ticket", "Close a ticket.", _schema("id")),
        McpToolInfo("delete_ticket", "Delete a ticket.", _schema("id")),
    ),
)
DOCS_TOOLS = ServerTools(
    "docs",
    (
        McpToolInfo("search", "Search the docs.", _schema("query")),
        McpToolInfo("fetch_page", "", _schema("url")),
    ),
)
DOCS_DOWN = ServerTools(
    "docs",
    error_type="mcp_connection_failed_error",
    message="cannot connect to https://docs.example.test/mcp",
)


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def tool_use(block_id: str, name: str, tool_input: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": block_id, "name": name, "input": dict(tool_input)}


def message(
    content: Sequence[Mapping[str, Any]], stop_reason: str, *, output_tokens: int = 7
) -> dict[str, Any]:
    return {
        "id": f"msg_{stop_reason}_{len(content)}",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [dict(b) for b in content],
        "stop_reason": stop_reason,
        "usage": {
            "input_tokens": 100,
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


@dataclass
class Log:
    """A session log under construction; ids are deterministic (``sevt_<n>``)."""

    agent: AgentSpec = AGENT
    events: list[Event] = field(default_factory=list)
    now: datetime = T0
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def new_id(self) -> str:
        return f"sevt_{next(self._ids):03d}"

    def add(self, type: str, payload: Mapping[str, Any] | None = None, id: str | None = None) -> str:
        event_id = id or self.new_id()
        self.now += timedelta(milliseconds=10)
        self.events.append(
            Event(
                id=event_id,
                session_id=SESSION,
                seq=len(self.events) + 1,
                type=type,
                payload=dict(payload or {}),
                processed_at=self.now,
            )
        )
        return event_id

    def draft(self, draft: ev.Draft) -> str:
        return self.add(draft.type, draft.payload, draft.id)

    # -- inputs ---------------------------------------------------------------------------------
    def user(self, t: str) -> str:
        return self.add(ev.USER_MESSAGE, {"content": [text(t)]})

    def interrupt(self) -> str:
        return self.add(ev.USER_INTERRUPT)

    def confirm(self, tool_use_id: str, result: str, deny_message: str | None = None) -> str:
        payload: dict[str, Any] = {"tool_use_id": tool_use_id, "result": result}
        if deny_message is not None:
            payload["deny_message"] = deny_message
        return self.add(ev.USER_TOOL_CONFIRMATION, payload)

    def custom_result(self, custom_tool_use_id: str, t: str, *, is_error: bool = False) -> str:
        return self.add(
            ev.USER_CUSTOM_TOOL_RESULT,
            {"custom_tool_use_id": custom_tool_use_id, "content": [text(t)], "is_error": is_error},
        )

    # -- what the harness appends -----------------------------------------------------------------
    def running(self) -> str:
        return self.add(ev.SESSION_STATUS_RUNNING)

    def idle(self, stop: str = "end_turn", event_ids: Sequence[str] | None = None) -> str:
        return self.draft(ev.status_idle(stop, event_ids))

    def model(
        self, content: Sequence[Mapping[str, Any]], stop_reason: str, mcp: McpOffer | None = None
    ) -> list[str]:
        """A finished model request: span start, outputs, span end, usage. Returns the block ids
        (``mcp``: the MCP tools the request offered)."""
        start = self.add(ev.SPAN_MODEL_REQUEST_START)
        msg = message(content, stop_reason)
        ids: list[str] = []
        for index, block in enumerate(msg["content"]):
            if block["type"] == "text" and index > 0 and msg["content"][index - 1]["type"] == "text":
                ids.append(ids[-1])
            else:
                ids.append(self.new_id())
        usage = _usage_so_far(self.events)
        for draft in model_output_events(self.agent, msg, ids, start, usage, mcp):
            self.draft(draft)
        return ids

    def failed_model(self, retry_status: str = "retrying", error_type: str = "model_overloaded_error") -> str:
        start = self.add(ev.SPAN_MODEL_REQUEST_START)
        self.draft(ev.span_end_failed(start))
        self.draft(ev.session_error(error_type, "overloaded", retry_status))
        if retry_status == "retrying":
            self.add(ev.SESSION_STATUS_RESCHEDULED)
        elif retry_status == "exhausted":
            self.idle("retries_exhausted")
        else:
            self.add(ev.SESSION_STATUS_TERMINATED)
        return start

    def result(self, tool_use_id: str, t: str, *, is_error: bool = False) -> str:
        return self.draft(ev.tool_result(tool_use_id, [text(t)], is_error=is_error))


def _usage_so_far(events: Sequence[Event]) -> dict[str, int]:
    keys = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    total = dict.fromkeys(keys, 0)
    for event in events:
        if event.type == ev.SPAN_MODEL_REQUEST_END:
            for key in keys:
                total[key] += int(event.payload.get("model_usage", {}).get(key, 0))
    return total
