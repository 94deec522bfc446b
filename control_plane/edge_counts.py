"""How many edges each environment has: enrolled, and connected to *any* control-plane process.

An edge counts as *enrolled* while it is not revoked, and as *connected* while its tunnel is up to
this process (``local``: the edge ids the caller's registry holds, fresher than the store) or to
any other process on the store (an unexpired presence record, ``Store.edge_holders``; see
:mod:`control_plane.tunnel.presence`). A process that died leaves records that expire within the
presence TTL, so a count may include its edges for that long.

The API shows these counts on the environment object (``edges: {enrolled, connected}``), ``exec``
names them in its error, and the harness reads them to tell a session its environment has no
connected edge (``session.error`` with ``edge_unavailable``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from control_plane.store.base import EdgeRecord

__all__ = ["EdgeCountStore", "EdgeCounts", "count_edges", "no_edge_here"]


@dataclass(frozen=True, slots=True)
class EdgeCounts:
    enrolled: int = 0  # enrolled into the environment and not revoked
    connected: int = 0  # of those, with a tunnel up to any control-plane process

    def to_json(self) -> dict[str, int]:
        return {"enrolled": self.enrolled, "connected": self.connected}


class EdgeCountStore(Protocol):
    """The part of the store counting reads (``control_plane.store.Store`` fits)."""

    async def list_edges(self, environment_id: str | None = None) -> list[EdgeRecord]: ...

    async def edge_holders(self, now: datetime) -> dict[str, str]: ...


async def count_edges(
    store: EdgeCountStore,
    now: datetime,
    *,
    local: Collection[str] = (),
    environment_id: str | None = None,
) -> dict[str, EdgeCounts]:
    """Counts by environment id: every environment with an enrolled edge, or just
    ``environment_id`` (always present in the result, zeros if it has no edge)."""
    edges = await store.list_edges(environment_id)
    live = [edge for edge in edges if edge.revoked_at is None]
    held = await store.edge_holders(now) if live else {}
    enrolled: dict[str, int] = {}
    connected: dict[str, int] = {}
    for edge in live:
        env = edge.environment_id
        enrolled[env] = enrolled.get(env, 0) + 1
        if edge.id in local or edge.id in held:
            connected[env] = connected.get(env, 0) + 1
    counts = {env: EdgeCounts(n, connected.get(env, 0)) for env, n in enrolled.items()}
    if environment_id is not None:
        counts.setdefault(environment_id, EdgeCounts())
    return counts


def no_edge_here(environment_id: str, counts: EdgeCounts) -> str:
    """Why a call in the environment finds no edge on this process, in one line, with what to do."""
    if counts.connected:
        return (
            f"no edge of environment {environment_id} is connected to this control-plane process "
            f"({counts.connected} of its {counts.enrolled} enrolled edge(s) connected to another "
            "process on the same store)"
        )
    if counts.enrolled:
        return (
            f"no edge of environment {environment_id} is connected ({counts.enrolled} enrolled, none "
            "with a tunnel up: see outpost-control edges list)"
        )
    return (
        f"no edge of environment {environment_id} is connected: none is enrolled (outpost-control "
        f"tokens create --environment {environment_id}, then outpost-edge register on the edge host)"
    )
