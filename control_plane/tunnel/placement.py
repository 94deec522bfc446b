"""Where a session's new sandbox goes: the least-loaded edge of its environment, by live load.

Sans-I/O bookkeeping for :class:`~control_plane.tunnel.gateway.EdgeGateway`. An edge reports its
sandboxes in use in its hello and then in every heartbeat; a beat cannot show the sessions this
process placed there after the edge sent it, so the book adds them::

    reported   the edge's latest heartbeat (its hello before the first), minus the sandboxes this
               process destroyed there since that beat
    in flight  sessions this process placed there that the edge's reports cannot show yet:
                 placed, not answered yet, no beat since      not in the beat          counted
                 placed, not answered yet, a beat since       maybe in the beat        ranking only
                 answered, no beat since                      not in the beat          counted
                 answered, a beat since                       in the beat              forgotten

(Frames of one tunnel arrive in order, so a beat received after an answer was sent after the
sandbox was made.) A new connection of the edge counts as a beat: its hello is newer.

:meth:`PlacementBook.choose` takes the edge with the lowest upper load, as a share of its
capacity, among those with room; ties go to the edge this process placed fewest sessions on, then
at random (so that several control-plane processes do not all fill the same edge first). An edge
with room only if the sessions "maybe in the beat" are in it is taken last (the edge decides: it
refuses with ``capacity_exhausted`` when it is full, and the gateway tries the next edge). No edge
with room: ``None``, and the gateway raises the typed error.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

__all__ = ["EdgeLoad", "LoadedEdge", "PlacementBook"]


class LoadedEdge(Protocol):
    """What the book reads from an edge's connection (``EdgeConnection`` fits)."""

    @property
    def edge_id(self) -> str: ...

    @property
    def sandbox_capacity(self) -> int: ...

    @property
    def sandboxes_in_use(self) -> int: ...

    @property
    def heartbeat_seq(self) -> int: ...


_E = TypeVar("_E", bound=LoadedEdge)


@dataclass(frozen=True, slots=True)
class EdgeLoad:
    """An edge's sandboxes as this process counts them: ``certain`` surely in use or being made,
    ``upper`` that plus placements its latest beat may already show."""

    capacity: int
    certain: int
    upper: int

    @property
    def has_room(self) -> bool:
        return self.certain < self.capacity


@dataclass(slots=True)
class _Mark:
    conn: LoadedEdge  # the connection the edge was on then
    beat: int  # its heartbeat seq then
    answered: bool = False

    def beat_since(self, conn: LoadedEdge) -> bool:
        """Whether the edge reported its sandboxes (a beat, or a new connection's hello) since."""
        return conn is not self.conn or conn.heartbeat_seq > self.beat


class PlacementBook:
    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._in_flight: dict[str, dict[str, _Mark]] = {}  # edge id -> session id -> placement
        self._destroyed: dict[str, dict[str, _Mark]] = {}  # edge id -> session id -> destroy
        self.placed_total: dict[str, int] = {}  # edge id -> sessions this process placed there

    def load(self, conn: LoadedEdge) -> EdgeLoad:
        certain = maybe = 0
        flights = self._in_flight.get(conn.edge_id, {})
        for session_id, mark in list(flights.items()):
            if not mark.beat_since(conn):
                certain += 1
            elif mark.answered:
                del flights[session_id]  # the edge's report shows it now
            else:
                maybe += 1
        destroyed = self._destroyed.get(conn.edge_id, {})
        for session_id, mark in list(destroyed.items()):
            if mark.beat_since(conn):
                del destroyed[session_id]
        reported = max(0, conn.sandboxes_in_use - len(destroyed))
        return EdgeLoad(conn.sandbox_capacity, reported + certain, reported + certain + maybe)

    def choose(self, candidates: Iterable[_E]) -> _E | None:
        """The edge for a new sandbox (see the module docstring), or ``None`` when all are full."""
        loads = [(conn, self.load(conn)) for conn in candidates]
        roomy = [(c, load) for c, load in loads if load.upper < load.capacity]
        if not roomy:
            roomy = [(c, load) for c, load in loads if load.has_room]
        if not roomy:
            return None
        best = min(
            roomy,
            key=lambda item: (
                item[1].upper / item[1].capacity,
                item[1].upper,
                self.placed_total.get(item[0].edge_id, 0),
                self._rng.random(),
            ),
        )
        return best[0]

    def placed(self, session_id: str, conn: LoadedEdge) -> None:
        """The session's sandbox goes to ``conn``'s edge (no sandbox there yet)."""
        self._in_flight.setdefault(conn.edge_id, {})[session_id] = _Mark(conn, conn.heartbeat_seq)
        self.placed_total[conn.edge_id] = self.placed_total.get(conn.edge_id, 0) + 1

    def answered(self, session_id: str, conn: LoadedEdge) -> None:
        """The edge answered a call of the session (its sandbox exists now, or was refused): the
        next beat from it shows the truth."""
        mark = self._in_flight.get(conn.edge_id, {}).get(session_id)
        if mark is not None and not mark.answered:
            mark.conn, mark.beat, mark.answered = conn, conn.heartbeat_seq, True

    def unplace(self, session_id: str, edge_id: str) -> None:
        """The session is not on that edge after all (the edge refused it, or it moved)."""
        flights = self._in_flight.get(edge_id)
        if flights is not None:
            flights.pop(session_id, None)

    def destroyed(self, session_id: str, conn: LoadedEdge) -> None:
        """The session's sandbox on ``conn``'s edge is gone; until the edge's next beat, its last
        report still counts it. A session still in flight here is only forgotten: the report
        does not show it, or (placed, unanswered, a beat since) may not."""
        mark = self._in_flight.get(conn.edge_id, {}).pop(session_id, None)
        if mark is None or (mark.answered and mark.beat_since(conn)):
            self._destroyed.setdefault(conn.edge_id, {})[session_id] = _Mark(conn, conn.heartbeat_seq)

    def in_flight(self, edge_id: str) -> int:
        """Sessions placed on the edge not yet forgotten (for tests and diagnostics)."""
        return len(self._in_flight.get(edge_id, {}))
