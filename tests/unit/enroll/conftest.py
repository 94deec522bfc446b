"""Fixtures for the enrollment tests: a controllable clock, a CA in tmp_path, a MemoryStore with one
environment, and the service over them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from control_plane.enroll import CertificateAuthority, EnrollmentService
from control_plane.store.memory import MemoryStore

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
ENV_ID = "env_test"


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ca(tmp_path: Path, clock: FakeClock) -> CertificateAuthority:
    return CertificateAuthority.load_or_create(tmp_path / "ca", clock=clock)


@pytest.fixture
async def store(clock: FakeClock) -> AsyncIterator[MemoryStore]:
    async with MemoryStore() as s:
        await s.create_resource("environment", ENV_ID, {"name": "test"}, clock())
        yield s


@pytest.fixture
def service(store: MemoryStore, ca: CertificateAuthority, clock: FakeClock) -> EnrollmentService:
    return EnrollmentService(store, ca, clock=clock)
