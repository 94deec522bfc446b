"""Fixtures of the store contract suite: every test runs against every ``Store`` implementation.

A new backend joins the suite by adding one entry to ``BACKENDS``: a function that opens a store
on the test's scratch directory (opening again with the same directory must reopen the same data
for a durable backend).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from control_plane.store import MemoryStore, SqliteStore, Store


@dataclass(frozen=True)
class Backend:
    name: str
    durable: bool  # reopening on the same directory finds the data again
    opener: Callable[[Path], Store]
    directory: Path

    def open(self) -> Store:
        return self.opener(self.directory)


BACKENDS: dict[str, tuple[bool, Callable[[Path], Store]]] = {
    "memory": (False, lambda _: MemoryStore()),
    "sqlite": (True, lambda d: SqliteStore(d / "outpost" / "store.db")),
}


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    durable, opener = BACKENDS[request.param]
    return Backend(request.param, durable, opener, tmp_path)


@pytest.fixture(params=sorted(name for name, (durable, _) in BACKENDS.items() if durable))
def durable_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """Only the backends that keep data across a close and reopen (not the in-memory one)."""
    durable, opener = BACKENDS[request.param]
    return Backend(request.param, durable, opener, tmp_path)


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[Store]:
    opened = backend.open()
    try:
        yield opened
    finally:
        await opened.close()
