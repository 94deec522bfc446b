"""PlacementBook: an edge's load is its latest report plus this process's placements the report
cannot show yet; the least-loaded edge with room wins. Plain objects stand in for connections."""

from __future__ import annotations

import random
from dataclasses import dataclass

from control_plane.tunnel.placement import EdgeLoad, PlacementBook


@dataclass
class Edge:
    edge_id: str
    sandbox_capacity: int = 2
    sandboxes_in_use: int = 0
    heartbeat_seq: int = 0

    def beat(self, in_use: int) -> None:
        self.heartbeat_seq += 1
        self.sandboxes_in_use = in_use


def test_a_placement_counts_until_a_beat_after_its_answer() -> None:
    book, edge = PlacementBook(), Edge("a")
    book.placed("s1", edge)
    assert book.load(edge) == EdgeLoad(capacity=2, certain=1, upper=1)
    book.answered("s1", edge)
    assert book.load(edge) == EdgeLoad(2, 1, 1)  # the edge has not reported it yet
    edge.beat(1)
    assert book.load(edge) == EdgeLoad(2, 1, 1)  # now the report shows it, once
    assert book.in_flight("a") == 0


def test_an_unanswered_placement_with_a_beat_since_counts_for_ranking_only() -> None:
    """Its first call may be running (the beat counts its sandbox) or not started (it does not):
    rank the edge as if it were not in the beat, but let the edge decide when it is the last
    one with room."""
    book, a, b = PlacementBook(random.Random(1)), Edge("a"), Edge("b")
    book.placed("s1", a)
    a.beat(1)
    assert book.load(a) == EdgeLoad(2, 1, 2)
    assert book.choose([a, b]) is b
    b.beat(2)
    assert book.choose([a, b]) is a  # full only if the beat missed s1: a decides
    a.beat(2)
    assert book.choose([a, b]) is None


def test_a_new_connection_counts_as_a_beat() -> None:
    book, edge = PlacementBook(), Edge("a")
    book.placed("s1", edge)
    book.answered("s1", edge)
    again = Edge("a", sandboxes_in_use=1)  # reconnected: its hello reports the sandbox
    assert book.load(again) == EdgeLoad(2, 1, 1)


def test_ties_go_to_the_edge_with_fewest_placements_then_spread() -> None:
    book = PlacementBook(random.Random(7))
    edges = [Edge(f"e{i}", sandbox_capacity=100) for i in range(4)]
    for i in range(40):
        chosen = book.choose(edges)
        assert chosen is not None
        book.placed(f"s{i}", chosen)
        book.answered(f"s{i}", chosen)
        for edge in edges:  # every edge reports promptly: only the tie-breaks spread them
            edge.beat(edge.sandboxes_in_use + (edge is chosen))
    assert [e.sandboxes_in_use for e in edges] == [10, 10, 10, 10]
    assert book.placed_total == {"e0": 10, "e1": 10, "e2": 10, "e3": 10}


def test_shares_of_capacity_rank_edges_of_different_sizes() -> None:
    book, small, big = PlacementBook(), Edge("small", 2, 1), Edge("big", 8, 3)
    assert book.choose([small, big]) is big  # 3/8 < 1/2


def test_a_destroy_frees_room_until_the_next_beat_shows_it() -> None:
    book, edge = PlacementBook(), Edge("a", sandboxes_in_use=2, heartbeat_seq=1)
    book.destroyed("s_old", edge)  # made before this process knew it
    assert book.load(edge) == EdgeLoad(2, 1, 1)
    edge.beat(1)
    assert book.load(edge) == EdgeLoad(2, 1, 1)
