"""The harness's I/O with MCP servers, through an :class:`McpBackend` (``control_plane.mcp.McpRouter``).

* :func:`list_servers` lists the tools of the agent's servers concurrently before a model call;
  a server that cannot be listed (or a backend that fails unexpectedly) yields a
  :class:`~control_plane.mcp.models.ServerTools` with ``error_type``, never an exception.
* :func:`call_tool` performs a :class:`~control_plane.harness.step.DispatchMcpTool` and returns
  the ``agent.mcp_tool_result`` to append (outcome and latency included). It too never raises for
  a failed call: once an ``agent.mcp_tool_use`` is dispatched, it gets a recorded result. The one
  exception is :class:`~control_plane.errors.GatewayDraining`: this process is shutting down, the
  call is left unanswered and the harness that takes the session next makes it (same key).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from control_plane.errors import GatewayDraining
from control_plane.harness import event_drafts as ev
from control_plane.harness.agent import AgentSpec, McpServerSpec
from control_plane.harness.step import DispatchMcpTool
from control_plane.mcp.errors import MCP_CONNECTION_FAILED
from control_plane.mcp.models import McpOutcome, McpServerRef, ServerTools

__all__ = ["McpBackend", "call_tool", "list_servers"]

log = logging.getLogger(__name__)

_NO_BACKEND = "this control plane has no MCP client configured"


class McpBackend(Protocol):
    """How the harness reaches MCP servers (``control_plane.mcp.McpRouter`` fits)."""

    async def list_tools(
        self, session_id: str, environment_id: str | None, server: McpServerRef
    ) -> ServerTools: ...

    async def call(
        self,
        session_id: str,
        environment_id: str | None,
        server: McpServerRef,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        idempotency_key: str,
        timeout_s: float | None = None,
    ) -> McpOutcome: ...


async def list_servers(
    backend: McpBackend | None,
    session_id: str,
    environment_id: str | None,
    servers: Sequence[McpServerSpec],
) -> list[ServerTools]:
    """The tool listing of each of ``servers``, in order."""
    if backend is None:
        return [ServerTools(s.name, error_type=MCP_CONNECTION_FAILED, message=_NO_BACKEND) for s in servers]
    return list(await asyncio.gather(*(_list_one(backend, session_id, environment_id, s) for s in servers)))


async def _list_one(
    backend: McpBackend, session_id: str, environment_id: str | None, server: McpServerSpec
) -> ServerTools:
    try:
        return await backend.list_tools(session_id, environment_id, McpServerRef(server.name, server.url))
    except Exception as exc:
        log.exception("session %s: listing the tools of MCP server %s failed", session_id, server.name)
        message = f"listing the tools failed ({type(exc).__name__})"
        return ServerTools(server.name, error_type=MCP_CONNECTION_FAILED, message=message)


async def call_tool(
    backend: McpBackend | None,
    agent: AgentSpec,
    session_id: str,
    environment_id: str | None,
    call: DispatchMcpTool,
    timeout_s: float | None,
) -> ev.Draft:
    """Call the tool; the ``agent.mcp_tool_result`` that records what became of it."""
    spec = next((s for s in agent.mcp_servers if s.name == call.server), None)
    if backend is None or spec is None:
        why = _NO_BACKEND if backend is None else f"MCP server {call.server!r} is not configured"
        outcome = McpOutcome(ev.text_content(why), True, 0.0, error_type=MCP_CONNECTION_FAILED)
    else:
        try:
            outcome = await backend.call(
                session_id,
                environment_id,
                McpServerRef(spec.name, spec.url),
                call.tool,
                call.input,
                idempotency_key=call.tool_use_id,
                timeout_s=timeout_s,
            )
        except GatewayDraining:
            raise  # not the call's failure: this process is shutting down (the caller stops)
        except Exception as exc:
            log.exception("session %s: MCP call %s/%s failed", session_id, call.server, call.tool)
            text = f"The MCP call failed ({type(exc).__name__})."
            outcome = McpOutcome(ev.text_content(text), True, 0.0, error_type=MCP_CONNECTION_FAILED)
    return ev.mcp_tool_result(
        call.tool_use_id,
        outcome.content,
        is_error=outcome.is_error,
        server=call.server,
        tool=call.tool,
        outcome=outcome.outcome,
        latency_ms=outcome.latency_ms,
    )
