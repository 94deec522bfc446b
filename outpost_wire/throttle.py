"""Log lines that strangers can cause, at a bounded rate.

A failed enrollment guess, a refused tunnel connection or a bad proof of possession is worth a
WARNING, but not thousands a second: whoever can reach the port could flood the log (and the disk,
and the operator's pager). :class:`LogThrottle` lets ``burst`` lines per kind through in each
``interval_s`` window and then says how many of that kind it held back::

    refusals = LogThrottle(log)
    refusals.warning("token", "enrollment token rejected (%s)", reason)
    # ... later, once per window: "enrollment token rejected (used) (and 412 more like it in the last 60 s)"

Kinds are few and fixed by the caller (a reason, not a peer address), so the state stays small.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

__all__ = ["LogThrottle"]


class LogThrottle:
    def __init__(
        self,
        logger: logging.Logger,
        *,
        burst: int = 5,
        interval_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = logger
        self._burst = burst
        self._interval_s = interval_s
        self._clock = clock
        self._window_start = clock()
        self._sent: dict[str, int] = {}
        self._held: dict[str, int] = {}

    def warning(self, kind: str, msg: str, *args: object) -> None:
        self.log(logging.WARNING, kind, msg, *args)

    def log(self, level: int, kind: str, msg: str, *args: object) -> None:
        now = self._clock()
        if now - self._window_start >= self._interval_s:
            self._window_start = now
            held, self._held = self._held, {}
            self._sent = {}
        else:
            held = {}
        sent = self._sent.get(kind, 0)
        if sent >= self._burst:
            self._held[kind] = self._held.get(kind, 0) + 1
            return
        self._sent[kind] = sent + 1
        before = held.get(kind, 0)
        if before:
            msg += f" (and {before} more like it in the last {self._interval_s:g} s)"
        self._log.log(level, msg, *args)
