"""Bounded state in the harness: after sessions end, neither the process nor the store keeps
anything per session (no in-memory entry, no lease row)."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from control_plane.bus import EventBus
from control_plane.harness import AnthropicModelClient, Harness
from control_plane.store import SqliteStore
from scripted_model import LocalModelServer, Script
from tests.support import eventually
from tests.support.harness import (
    FAST,
    FakeGateway,
    create_session,
    idle_count,
    send_message,
    settle,
    utcnow,
    wait_for_events,
)

SESSIONS = 12


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Path]:
    yield tmp_path / "outpost.db"


def _per_session_state(harness: Harness) -> dict[str, int]:
    ctx = harness._ctx
    return {
        "slots": len(harness._slots),
        "environments": len(harness._environments),
        "misplaced_since": len(harness._misplaced_since),
        "retries": len(harness._retries),
        "provisioned": len(ctx.provisioned),
        "edge_outages": len(ctx.edge_outages),
    }


def _lease_rows(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        count: int = conn.execute("SELECT count(*) FROM leases").fetchone()[0]
    return count


async def _archive(store: SqliteStore, session_id: str) -> None:
    """What the API's archive does to the store (another process's API: no ``session_ended`` here)."""
    now = utcnow()
    await store.archive_resource("session", session_id, now)
    resource = await store.get_resource("session", session_id)
    await store.update_resource("session", session_id, {**resource.body, "status": "terminated"}, now)


async def test_ended_sessions_leave_no_state_behind(db: Path) -> None:
    gateway, bus = FakeGateway(), EventBus()
    store = SqliteStore(db)
    async with LocalModelServer(Script([f"Answer {i}." for i in range(SESSIONS)])) as server:
        model = AnthropicModelClient(base_url=server.base_url, api_key="test-key")
        harness = Harness(store, gateway, bus, model, FAST)
        await harness.start()
        try:
            sessions = [await create_session(store) for _ in range(SESSIONS)]
            for session_id in sessions:
                await send_message(store, session_id, "Hello.")
                await harness.wake(session_id)
            for session_id in sessions:
                await wait_for_events(store, session_id, lambda es: idle_count(es) == 1)
                await settle(harness, session_id)
            # Idle sessions keep their lease row (released: the epoch keeps counting) and the
            # hint that they have a sandbox; the per-run maps are empty already.
            state = _per_session_state(harness)
            assert state["slots"] == state["environments"] == state["misplaced_since"] == 0, state
            assert state["provisioned"] == SESSIONS
            assert _lease_rows(db) == SESSIONS

            # Half end through this process's API (``session_ended``), half elsewhere: this
            # process learns it when it is woken for them again.
            ended_here, ended_elsewhere = sessions[: SESSIONS // 2], sessions[SESSIONS // 2 :]
            for session_id in ended_here:
                await _archive(store, session_id)
                await harness.session_ended(session_id)
            for session_id in ended_elsewhere:
                await _archive(store, session_id)
                await harness.wake(session_id)

            async def nothing_left() -> bool:
                return not any(_per_session_state(harness).values()) and _lease_rows(db) == 0

            await eventually(nothing_left, what="every per-session entry and lease row to go")
            assert sorted(gateway.destroyed) == sorted(ended_here)
        finally:
            await harness.close()
            await model.close()
            await store.close()
