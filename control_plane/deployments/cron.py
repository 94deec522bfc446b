"""Cron schedules of deployments: parsing, upcoming fire times and the tick that is due — pure
functions of their arguments (no clock read here: ``now`` is passed in).

A schedule is ``{"type": "cron", "expression": <5 fields>, "timezone": <IANA name>}``. The
expression is POSIX cron as the SDK documents it: minute, hour, day of month, month, day of week
(0-7, 0 and 7 Sunday; month and day names allowed); no seconds or year field, no ``L``, ``W``,
``#`` or ``?``, no ``@daily`` shortcuts. Fields are evaluated by `cronsim
<https://pypi.org/project/cronsim/>`_ in the schedule's time zone (``zoneinfo``; the ``tzdata``
package supplies the zones where the system has none).

Daylight saving time is handled as cronsim does (the behaviour of Debian's cron): a wall-clock time
skipped when the clocks go forward fires once at the first valid minute after the gap (``30 2 * * *``
fires at 03:00 on that day); a time that happens twice when the clocks go back fires once, at its
first occurrence, for an expression with a fixed hour (``30 1 * * *``), and at both for a wildcard
hour (``*/30 * * * *`` fires at 01:00 and 01:30 of each offset).

:func:`due_tick` is the scheduler's rule: the LATEST occurrence after ``floor`` and at or before
``now``. Ticks missed while no control plane ran collapse into that one: after downtime a schedule
fires at most once, never a burst.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from control_plane.errors import InvalidRequest

__all__ = ["MAX_UPCOMING", "CronSchedule", "due_tick", "parse_schedule", "upcoming"]

MAX_UPCOMING = 5
_MAX_EXPRESSION_CHARS = 200
_FIELD = re.compile(r"^[0-9A-Za-z*,/-]+$")
_NAMES: tuple[frozenset[str], ...] = (
    frozenset(),
    frozenset(),
    frozenset(),
    frozenset(["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]),
    frozenset(["sun", "mon", "tue", "wed", "thu", "fri", "sat"]),
)
_FIELD_NAMES = ("minute", "hour", "day of month", "month", "day of week")
_SCAN_LIMIT = 1000  # occurrences walked past at most while looking for one (DST folds)


@dataclass(frozen=True, slots=True)
class CronSchedule:
    expression: str
    timezone: str

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def to_json(self) -> dict[str, Any]:
        return {"type": "cron", "expression": self.expression, "timezone": self.timezone}


def _check_expression(expression: object, param: str) -> str:
    if not isinstance(expression, str) or not expression.strip():
        raise InvalidRequest(f"{param} must be a non-empty string", param=param)
    if len(expression) > _MAX_EXPRESSION_CHARS:
        raise InvalidRequest(f"{param} must be at most {_MAX_EXPRESSION_CHARS} characters", param=param)
    fields = expression.split()
    if len(fields) != len(_FIELD_NAMES):
        raise InvalidRequest(
            f"{param}: a cron expression has exactly 5 fields (minute hour day-of-month month "
            f"day-of-week), got {len(fields)}; seconds, years and @shortcuts are not supported",
            param=param,
        )
    for field, name, names in zip(fields, _FIELD_NAMES, _NAMES, strict=True):
        words = {w.lower() for w in re.findall(r"[A-Za-z]+", field)}
        if not _FIELD.match(field) or not words <= names:
            raise InvalidRequest(
                f"{param}: invalid {name} field {field!r} (L, W, # and ? are not supported)", param=param
            )
    try:
        CronSim(" ".join(fields), datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        raise InvalidRequest(f"{param}: {exc}", param=param) from None
    return " ".join(fields)


def _check_timezone(timezone: object, param: str) -> str:
    if not isinstance(timezone, str) or not timezone:
        raise InvalidRequest(f"{param} must be an IANA time zone name", param=param)
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidRequest(f"{param}: {timezone!r} is not an IANA time zone", param=param) from None
    return timezone


def parse_schedule(raw: object, param: str = "schedule") -> CronSchedule:
    """A schedule param, checked; ``InvalidRequest`` naming the bad field."""
    if not isinstance(raw, Mapping):
        raise InvalidRequest(f"{param} must be an object", param=param)
    unknown = sorted(set(raw) - {"type", "expression", "timezone"})
    if unknown:
        raise InvalidRequest(f"{param}: unknown field(s) {', '.join(unknown)}", param=param)
    if raw.get("type") != "cron":
        raise InvalidRequest(f"{param}.type must be 'cron'", param=f"{param}.type")
    expression = _check_expression(raw.get("expression"), f"{param}.expression")
    return CronSchedule(expression, _check_timezone(raw.get("timezone"), f"{param}.timezone"))


def upcoming(schedule: CronSchedule, after: datetime, count: int = MAX_UPCOMING) -> list[datetime]:
    """The next ``count`` fire times strictly after ``after``, in UTC."""
    fires = CronSim(schedule.expression, after.astimezone(schedule.zone))
    return [next(fires).astimezone(UTC) for _ in range(count)]


def due_tick(schedule: CronSchedule, floor: datetime, now: datetime) -> datetime | None:
    """The latest fire time ``t`` with ``floor < t <= now`` (UTC), or ``None``."""
    if now <= floor:
        return None
    start = (now + timedelta(microseconds=1)).astimezone(schedule.zone)
    fires = CronSim(schedule.expression, start, reverse=True)
    for _ in range(_SCAN_LIMIT):
        tick = next(fires, None)
        if tick is None:
            return None
        at = tick.astimezone(UTC)
        if at <= floor:
            return None
        if at <= now:
            return at
    return None
