"""Fixtures of the store contract suite: every test runs against every ``Store`` implementation.

A new backend joins the suite by adding one entry to ``BACKENDS``: a function that opens a store
on the test's scratch directory (opening again with the same directory must reopen the same data
for a durable backend). PostgreSQL tests each get a schema named after the scratch directory (so
reopening finds the same data), dropped after the test.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from control_plane.store import MemoryStore, SqliteStore, Store
from control_plane.store.postgres import PostgresStore
from tests.support.pg import drop_schema, pg_config


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
    "postgres": (True, lambda d: PostgresStore(pg_config(_schema_of(d)))),
}


def _schema_of(directory: Path) -> str:
    return "t_" + hashlib.sha256(str(directory).encode()).hexdigest()[:16]


async def _cleanup(name: str, directory: Path) -> None:
    if name == "postgres":
        await drop_schema(_schema_of(directory))


@pytest.fixture(params=sorted(BACKENDS))
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    durable, opener = BACKENDS[request.param]
    yield Backend(request.param, durable, opener, tmp_path)
    await _cleanup(request.param, tmp_path)


@pytest.fixture(params=sorted(name for name, (durable, _) in BACKENDS.items() if durable))
async def durable_backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """Only the backends that keep data across a close and reopen (not the in-memory one)."""
    durable, opener = BACKENDS[request.param]
    yield Backend(request.param, durable, opener, tmp_path)
    await _cleanup(request.param, tmp_path)


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[Store]:
    opened = backend.open()
    try:
        yield opened
    finally:
        await opened.close()
