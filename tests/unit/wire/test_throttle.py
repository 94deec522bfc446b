from __future__ import annotations

import logging

import pytest

from outpost_wire.throttle import LogThrottle


def test_a_burst_per_kind_then_a_count_of_what_was_held(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    throttle = LogThrottle(logging.getLogger("t"), burst=2, interval_s=60, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="t"):
        for i in range(1000):
            throttle.warning("token", "rejected %d", i)
        throttle.warning("other", "refused")  # another kind has its own budget
        now[0] = 61
        throttle.warning("token", "rejected %s", "late")
    assert [r.getMessage() for r in caplog.records] == [
        "rejected 0",
        "rejected 1",
        "refused",
        "rejected late (and 998 more like it in the last 60 s)",
    ]
    assert all(r.levelno == logging.WARNING for r in caplog.records)
