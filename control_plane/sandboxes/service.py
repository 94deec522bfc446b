"""Operator calls on the hands: run one tool call by hand (``outpost-control exec``), destroy a
sandbox, list the edges whose tunnels this process holds.

A call does not wait for an edge: with none of the environment's edges connected to this process
it fails at once with :class:`~control_plane.errors.EdgeUnavailable`, naming the environment and
its edge counts (an operator at a terminal should not wait ``edge_wait_s``). A key limited to
some environments drives only their sandboxes: another environment, or a session of one, is
"not found".
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from control_plane.edge_counts import count_edges, no_edge_here
from control_plane.environments.commands import Viewer
from control_plane.errors import EdgeUnavailable, NotFound
from control_plane.store.base import Store
from control_plane.tunnel import EdgeRegistry, EdgeStatus
from outpost_wire.results import ToolResult

__all__ = ["ExecCall", "SandboxGateway", "SandboxService"]


class SandboxGateway(Protocol):
    """What the sandbox calls need of the hands (``control_plane.tunnel.EdgeGateway`` and the
    metered one of ``control_plane.metering`` fit)."""

    async def execute(
        self,
        session_id: str,
        environment_id: str,
        tool: str,
        tool_input: Mapping[str, Any],
        *,
        idempotency_key: str,
        timeout_s: float | None = None,
    ) -> ToolResult: ...

    async def destroy(self, session_id: str, environment_id: str) -> bool: ...

    def edge_for_session(self, session_id: str) -> str | None: ...


@dataclass(frozen=True, slots=True)
class ExecCall:
    """One tool call by hand; ``session_id`` may be a session's id or a sandbox name of the
    operator's own; no ``idempotency_key``: a new one."""

    environment_id: str
    session_id: str
    tool: str
    input: Mapping[str, Any]
    idempotency_key: str | None = None
    timeout_s: float | None = None


class SandboxService:
    def __init__(
        self,
        store: Store,
        registry: EdgeRegistry,
        gateway: SandboxGateway,
        clock: Callable[[], datetime],
    ) -> None:
        self._store = store
        self._registry = registry
        self._gateway = gateway
        self._clock = clock

    def connected_edges(self, viewer: Viewer, environment_id: str | None = None) -> list[EdgeStatus]:
        """The edges whose tunnels this process holds (of one environment, if given)."""
        return [
            s
            for s in self._registry.statuses()
            if viewer.sees(s.environment_id) and (not environment_id or s.environment_id == environment_id)
        ]

    async def execute(self, call: ExecCall, viewer: Viewer) -> tuple[ToolResult, str | None]:
        """The call's result and the edge that ran it."""
        await self._check_target(viewer, call.environment_id, call.session_id)
        await self._store.get_resource("environment", call.environment_id)  # 404 if unknown
        if not self._registry.for_environment(call.environment_id):
            env = call.environment_id
            counts = await count_edges(self._store, self._clock(), environment_id=env)
            raise EdgeUnavailable(no_edge_here(env, counts[env]), env)
        result = await self._gateway.execute(
            call.session_id,
            call.environment_id,
            call.tool,
            call.input,
            idempotency_key=call.idempotency_key or "opx_" + secrets.token_hex(12),
            timeout_s=call.timeout_s,
        )
        return result, self._gateway.edge_for_session(call.session_id)

    async def destroy(self, environment_id: str, session_id: str, viewer: Viewer) -> bool:
        """Whether a sandbox or workspace existed."""
        await self._check_target(viewer, environment_id, session_id)
        return await self._gateway.destroy(session_id, environment_id)

    async def _check_target(self, viewer: Viewer, environment_id: str, session_id: str) -> None:
        """Not found unless the viewer sees the environment; for a key limited to environments,
        the id of a session in another environment is not found either."""
        if not viewer.sees(environment_id):
            raise NotFound("environment", environment_id)
        if viewer.sees_all:
            return
        try:
            session = await self._store.get_resource("session", session_id)
        except NotFound:
            return  # a sandbox by a name of the operator's own (``exec --session s1``)
        if session.body.get("environment_id") != environment_id:
            raise NotFound("session", session_id)
