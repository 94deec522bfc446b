"""Waiting on a condition with a deadline: the one poll-until helper of the tests.

Tests never sleep a fixed time for something to happen; they wait until it has, and fail with a message
saying what they waited for when it does not happen in time::

    await eventually(lambda: manager.pooled() == 1, what="the pool to fill")
    await eventually(edge_is_connected, timeout_s=60, what="the edge to reconnect")  # an async predicate
    eventually_sync(lambda: not pid_alive(pid), what="the shell to exit")  # outside an event loop
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable

__all__ = ["DEFAULT_TIMEOUT_S", "eventually", "eventually_sync"]

# Generous: the machine running the suite may be small and busy; a condition that holds returns at once.
DEFAULT_TIMEOUT_S = 20.0

Condition = Callable[[], bool] | Callable[[], Awaitable[bool]]
# What was awaited, for the failure message: a phrase, or a function called at the deadline (to show the
# state then, e.g. what was heard so far).
What = str | Callable[[], object]


def _timed_out(timeout_s: float, what: What) -> AssertionError:
    described = what() if callable(what) else what
    return AssertionError(f"timed out after {timeout_s:g} s waiting for {described}")


async def eventually(
    condition: Condition,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    what: What = "the condition",
    *,
    interval_s: float = 0.02,
) -> None:
    """Return as soon as ``condition()`` (a function, or an async function) is true; raise
    ``AssertionError`` naming ``what`` once ``timeout_s`` has passed without it."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if time.monotonic() >= deadline:
            raise _timed_out(timeout_s, what)
        await asyncio.sleep(interval_s)


def eventually_sync(
    condition: Callable[[], bool],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    what: What = "the condition",
    *,
    interval_s: float = 0.02,
) -> None:
    """``eventually`` for synchronous code (module-scoped fixtures, threads): blocks between polls."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            raise _timed_out(timeout_s, what)
        time.sleep(interval_s)
