"""``RecentSessions``: the harness's capped per-session hints forget the oldest past the cap."""

from __future__ import annotations

from control_plane.harness.driver import RecentSessions


def test_forgets_the_longest_remembered_past_the_cap() -> None:
    recent = RecentSessions(capacity=3)
    for session_id in ("a", "b", "c"):
        recent.add(session_id)
    recent.add("a")  # remembered again: now the most recent
    recent.add("d")
    assert len(recent) == 3
    assert "b" not in recent
    assert all(s in recent for s in ("a", "c", "d"))
    recent.discard("c")
    recent.discard("never")
    assert len(recent) == 2 and "c" not in recent
