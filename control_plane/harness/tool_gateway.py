"""The two small parts a session's driver is given: the hands as the harness sees them
(:class:`ToolGateway`, which ``control_plane.tunnel.EdgeGateway`` and its metered wrapper fit) and a
bounded memory of session ids (:class:`RecentSessions`) for hints that are cheap to learn again."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Protocol

from control_plane.harness.step import SandboxMove
from outpost_wire.results import ToolResult

__all__ = ["RecentSessions", "ToolGateway"]


class ToolGateway(Protocol):
    """The hands as the harness sees them (``control_plane.tunnel.EdgeGateway`` fits)."""

    async def provision(self, session_id: str, environment_id: str) -> object: ...

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

    def take_move(self, session_id: str) -> SandboxMove | None:
        """A move of the session's sandbox to another edge not yet reported (returned once)."""

    def forget_session(self, session_id: str) -> None:
        """Forget cached placement: the next call reads where the session's sandbox is."""

    def edges_connected(self, environment_id: str) -> int:
        """How many edges of the environment this process's calls can reach now."""

    @property
    def edge_wait_s(self) -> float:
        """How long a call waits for an edge of its environment when none is connected."""


class RecentSessions:
    """Session ids, remembering at most ``capacity``: past it the longest-remembered is forgotten
    (a hint such as "has a sandbox" that costs a round trip to learn again, never state)."""

    def __init__(self, capacity: int = 10_000) -> None:
        self._capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()

    def add(self, session_id: str) -> None:
        self._ids[session_id] = None
        self._ids.move_to_end(session_id)
        while len(self._ids) > self._capacity:
            self._ids.popitem(last=False)

    def discard(self, session_id: str) -> None:
        self._ids.pop(session_id, None)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)
