"""Cron schedules of deployments (control_plane/deployments/cron.py): parsing, upcoming fire times
and the due tick, with the clock passed in, across both daylight-saving changes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from control_plane.deployments.cron import CronSchedule, due_tick, parse_schedule, upcoming
from control_plane.errors import InvalidRequest

NY = "America/New_York"


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def test_parse_accepts_posix_cron_and_names() -> None:
    parsed = parse_schedule({"type": "cron", "expression": "0  9 * JAN-mar mon-FRI", "timezone": NY})
    assert parsed == CronSchedule("0 9 * JAN-mar mon-FRI", NY)
    assert (
        parse_schedule({"type": "cron", "expression": "0 0 * * 7", "timezone": "UTC"}).expression
        == "0 0 * * 7"
    )


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        ({"type": "cron", "expression": "* * * * * *", "timezone": "UTC"}, "schedule.expression"),
        ({"type": "cron", "expression": "0 0 LW * *", "timezone": "UTC"}, "schedule.expression"),
        ({"type": "cron", "expression": "0 0 ? * *", "timezone": "UTC"}, "schedule.expression"),
        ({"type": "cron", "expression": "0 0 * * fri", "timezone": "Nowhere/Land"}, "schedule.timezone"),
        ({"type": "interval", "expression": "* * * * *", "timezone": "UTC"}, "schedule.type"),
        ({"type": "cron", "expression": "* * * * *"}, "schedule.timezone"),
        ({"type": "cron", "expression": "* * * * *", "timezone": "UTC", "x": 1}, "schedule"),
    ],
)
def test_parse_refuses_naming_the_field(raw: dict[str, object], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_schedule(raw)
    assert caught.value.param == param


def test_due_tick_is_the_latest_after_the_floor_and_never_a_burst() -> None:
    every_minute = CronSchedule("* * * * *", "UTC")
    floor = utc(2026, 1, 1, 12, 0, 30)
    assert due_tick(every_minute, floor, utc(2026, 1, 1, 12, 0, 59)) is None
    assert due_tick(every_minute, floor, utc(2026, 1, 1, 12, 1)) == utc(2026, 1, 1, 12, 1)  # on the dot
    # three days down: only the latest missed tick fires
    assert due_tick(every_minute, floor, utc(2026, 1, 4, 9, 7, 13)) == utc(2026, 1, 4, 9, 7)
    assert due_tick(every_minute, utc(2026, 1, 1, 12, 1), utc(2026, 1, 1, 12, 1, 30)) is None


def test_spring_forward_runs_a_skipped_time_once_after_the_gap() -> None:
    # 2026-03-08 02:00 EST -> 03:00 EDT in New York: 02:30 does not exist that day.
    schedule = CronSchedule("30 2 * * *", NY)
    assert upcoming(schedule, utc(2026, 3, 7, 12), 3) == [
        utc(2026, 3, 8, 7, 0),  # 03:00 EDT, the first minute after the gap
        utc(2026, 3, 9, 6, 30),  # 02:30 EDT
        utc(2026, 3, 10, 6, 30),
    ]
    floor = utc(2026, 3, 7, 17)
    assert due_tick(schedule, floor, utc(2026, 3, 8, 6, 59)) is None
    assert due_tick(schedule, floor, utc(2026, 3, 8, 7, 0, 5)) == utc(2026, 3, 8, 7, 0)


def test_fall_back_runs_a_fixed_hour_once_and_a_wildcard_hour_in_both_offsets() -> None:
    # 2026-11-01 02:00 EDT -> 01:00 EST: 01:00-01:59 happens twice.
    daily = CronSchedule("30 1 * * *", NY)
    assert upcoming(daily, utc(2026, 10, 31, 12), 2) == [utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]
    assert due_tick(daily, utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 6, 45)) is None  # not at 01:30 EST
    half_hourly = CronSchedule("*/30 * * * *", NY)
    fires = upcoming(half_hourly, utc(2026, 11, 1, 4, 50), 5)
    assert fires == [utc(2026, 11, 1, 5, 0) + timedelta(minutes=30 * i) for i in range(5)]
    assert due_tick(half_hourly, utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 6, 10)) == utc(2026, 11, 1, 6, 0)
