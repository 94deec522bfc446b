"""The retention pruner on a real SQLite store: what it deletes, in batches, and its background loop."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from control_plane.config import ControlPlaneConfig
from control_plane.errors import NotFound
from control_plane.retention import Pruner, PruneReport, RetentionConfig
from control_plane.sessions.repositories import RESOURCE_KIND
from control_plane.store import EnrollmentTokenRecord, NewEvent, SqliteStore
from tests.support import eventually

T0 = datetime(2026, 3, 1, tzinfo=UTC)
DAY = timedelta(days=1)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    opened = SqliteStore(tmp_path / "outpost.db")
    try:
        yield opened
    finally:
        await opened.close()


async def _session(store: SqliteStore, id: str, archived_at: datetime | None) -> None:
    await store.create_resource("session", id, {"status": "idle"}, T0)
    await store.append(id, [NewEvent(f"{id}-e{i}", "agent.message", {"i": i}) for i in range(5)], T0)
    await store.create_resource(RESOURCE_KIND, f"{id}-repo", {"session_id": id, "url": "https://x/y"}, T0)
    if archived_at is not None:
        await store.archive_resource("session", id, archived_at)


def test_retention_is_off_by_default_for_sessions() -> None:
    retention = ControlPlaneConfig().retention
    assert retention.archived_sessions_days is None
    assert retention.enrollment_tokens_days == 30.0


async def test_prunes_old_archived_sessions_with_their_repositories_in_batches(store: SqliteStore) -> None:
    for i in range(7):
        await _session(store, f"old{i}", archived_at=T0 + timedelta(hours=i))
    await _session(store, "recent", archived_at=T0 + 9 * DAY)
    await _session(store, "live", archived_at=None)
    config = RetentionConfig(archived_sessions_days=7, enrollment_tokens_days=None, batch_size=3)
    pruner = Pruner(store, config, clock=lambda: T0 + 10 * DAY)

    assert await pruner.run_once() == PruneReport(sessions=7, tokens=0)

    for i in range(7):
        with pytest.raises(NotFound):
            await store.get_resource("session", f"old{i}")
        with pytest.raises(NotFound):
            await store.get_resource(RESOURCE_KIND, f"old{i}-repo")
        assert await store.get_events(f"old{i}") == []
    for kept in ("recent", "live"):
        assert len(await store.get_events(kept)) == 5
        await store.get_resource(RESOURCE_KIND, f"{kept}-repo")
    assert await pruner.run_once() == PruneReport()


async def test_prunes_spent_enrollment_tokens(store: SqliteStore) -> None:
    for id in ("used", "fresh"):
        await store.create_enrollment_token(
            EnrollmentTokenRecord(
                id=id, environment_id="env", token_hash=f"h-{id}", created_at=T0, expires_at=T0 + 365 * DAY
            )
        )
    await store.consume_enrollment_token("h-used", "edge-1", T0 + DAY)
    config = RetentionConfig(enrollment_tokens_days=30)
    assert await Pruner(store, config, clock=lambda: T0 + 20 * DAY).run_once() == PruneReport()
    assert await Pruner(store, config, clock=lambda: T0 + 40 * DAY).run_once() == PruneReport(tokens=1)
    assert [t.id for t in await store.list_enrollment_tokens()] == ["fresh"]


async def test_background_loop_prunes_and_stops(store: SqliteStore) -> None:
    await _session(store, "old", archived_at=T0)
    # A short interval so that the loop runs within the test (the default is minutes).
    config = RetentionConfig(archived_sessions_days=1, interval_s=0.05)
    async with Pruner(store, config, clock=lambda: T0 + 2 * DAY):

        async def pruned() -> bool:
            try:
                await store.get_resource("session", "old")
            except NotFound:
                return True
            return False

        await eventually(pruned, 30, "the pruner to run", interval_s=0.05)


async def test_nothing_to_do_when_every_setting_is_off(store: SqliteStore) -> None:
    pruner = Pruner(store, RetentionConfig(enrollment_tokens_days=None))
    assert not pruner.enabled
    await pruner.start()
    await pruner.close()
    await pruner.close()  # idempotent
