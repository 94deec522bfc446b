"""Helpers shared by the contract tests: the test clock and small builders."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from control_plane.store import NewEvent

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    """A point on the test clock, ``seconds`` after ``T0``."""
    return T0 + timedelta(seconds=seconds)


def new_events(prefix: str, count: int, type: str = "agent.message") -> list[NewEvent]:
    return [NewEvent(f"{prefix}-{i}", type, {"n": i}) for i in range(count)]
