"""Full-jitter exponential backoff (AWS architecture blog's "full jitter")."""

from __future__ import annotations

import random

__all__ = ["Backoff"]


class Backoff:
    """``delay(n) = uniform(0, min(cap, initial * 2**n))``; :meth:`reset` after a stable period."""

    def __init__(self, initial_s: float, cap_s: float, rng: random.Random | None = None) -> None:
        self._initial = initial_s
        self._cap = cap_s
        self._rng = rng or random.Random()
        self._attempt = 0

    @property
    def attempt(self) -> int:
        return self._attempt

    def next_delay(self) -> float:
        ceiling = min(self._cap, self._initial * (2 ** min(self._attempt, 32)))
        self._attempt += 1
        return self._rng.uniform(0, ceiling)

    def reset(self) -> None:
        self._attempt = 0
