"""The tests' toolkit, importable by every test (``from tests.support import eventually``).

- ``waiting``: ``eventually`` / ``eventually_sync``, the poll-until helper (wait on conditions, never on
  fixed sleeps).
- ``e2e``: the end-to-end tests' plain helpers (their API client, constants); the fixtures stay in
  ``tests/e2e/conftest.py``.
- ``fake_runtime``: an in-memory ``ContainerRuntime`` for the sandbox manager's unit tests;
  ``sandbox_calls``: tool calls straight to a manager, checked at the same door as the dispatcher's.
- ``docker_engine``: the Docker engine for tests (image check, leftovers sweep, one edge's teardown, a
  condition that a call has started in a session's sandbox); ``pg``: the PostgreSQL test cluster.

Fixtures live in conftest files; helpers and constants that more than one test directory needs live here,
so that no test imports another test module or another directory's conftest.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.waiting import DEFAULT_TIMEOUT_S, eventually, eventually_sync

__all__ = ["DEFAULT_TIMEOUT_S", "REPO", "eventually", "eventually_sync"]

REPO = Path(__file__).resolve().parents[2]
"""The checkout's root."""
