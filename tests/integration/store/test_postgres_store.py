"""What only the PostgreSQL store has: migrations under an advisory lock, the refusal of a newer
schema, connection errors (with the password masked), ``open_store`` URLs and options, the feed's
reconnect after its connection is cut, and appends from two processes racing on one session."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path

import asyncpg
import pytest

from control_plane.errors import ControlPlaneError, Fenced
from control_plane.store import NewEvent, StoreOptions, mask_url, open_store
from control_plane.store.postgres import SCHEMA_VERSION, PostgresConfig, PostgresStore, migrate
from tests.support.pg import drop_schema, new_schema, pg_config
from tests.support.store_contract import at, new_events

_WAIT_S = 20.0  # generous: the machine is small and other tests run beside this one


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    name = new_schema()
    yield name
    await drop_schema(name)


async def _admin(schema: str) -> asyncpg.Connection:
    return await asyncpg.connect(**pg_config(schema).connect_kwargs())


async def test_replicas_starting_together_migrate_once(schema: str) -> None:
    config = pg_config(schema)
    started_at = await asyncio.gather(*(migrate(config) for _ in range(5)))
    assert sorted(started_at) == [0, *[SCHEMA_VERSION] * 4]  # one did the work, the others found it done
    conn = await _admin(schema)
    try:
        versions = await conn.fetch(f'SELECT version FROM "{schema}".schema_version ORDER BY version')
        assert [r[0] for r in versions] == list(range(1, SCHEMA_VERSION + 1))
    finally:
        await conn.close()
    stores = [PostgresStore(config) for _ in range(3)]
    try:
        await asyncio.gather(*(s.ping() for s in stores))
        assert await migrate(config) == SCHEMA_VERSION
    finally:
        for store in stores:
            await store.close()


async def test_a_database_newer_than_the_build_is_refused(schema: str) -> None:
    await migrate(pg_config(schema))
    conn = await _admin(schema)
    try:
        await conn.execute(f'INSERT INTO "{schema}".schema_version (version) VALUES (999)')
    finally:
        await conn.close()
    store = PostgresStore(pg_config(schema))
    try:
        with pytest.raises(ControlPlaneError, match="newer than this build"):
            await store.get_events("s1")
    finally:
        await store.close()


async def test_unreachable_and_refused_connections_are_control_plane_errors_without_the_password(
    tmp_path: Path,
) -> None:
    closed_port = PostgresStore(
        PostgresConfig("postgresql://outpost:s3cr3t-pw@127.0.0.1:1/x", connect_timeout_s=5)
    )
    try:
        with pytest.raises(ControlPlaneError) as unreachable:
            await closed_port.ping()
        assert "s3cr3t-pw" not in str(unreachable.value)
        assert "postgresql://outpost:***@127.0.0.1:1/x" in str(unreachable.value)
    finally:
        await closed_port.close()

    wrong = tmp_path / "wrong-password"
    wrong.write_text("not-the-password\n")
    refused = PostgresStore(replace(pg_config(new_schema()), password_file=wrong))
    try:
        with pytest.raises(ControlPlaneError, match="password authentication failed") as failed:
            await refused.ping()
        assert "not-the-password" not in str(failed.value)
    finally:
        await refused.close()

    missing = PostgresStore(replace(pg_config(new_schema()), password_file=tmp_path / "missing"))
    try:
        with pytest.raises(ControlPlaneError, match="password file"):
            await missing.ping()
    finally:
        await missing.close()


def test_urls_are_masked_and_open_store_takes_the_options(tmp_path: Path) -> None:
    assert (
        mask_url("postgresql://u:p%40ss@db:5432/x?sslmode=require")
        == "postgresql://u:***@db:5432/x?sslmode=require"
    )
    assert mask_url("postgresql://u@db/x") == "postgresql://u@db/x"
    options = StoreOptions(pool_min=3, pool_max=7, password_file=tmp_path / "pw", schema="tenant_a")
    store = open_store("postgresql://u@db/x", options=options)
    assert isinstance(store, PostgresStore)
    assert (store.config.pool_min, store.config.pool_max, store.config.schema) == (3, 7, "tenant_a")
    assert store.config.password_file == tmp_path / "pw"
    assert store.config.channel == "outpost_log_tenant_a"
    assert isinstance(open_store("postgres://u@db/x"), PostgresStore)


async def test_the_feed_reconnects_after_its_connection_is_cut_and_says_to_reread(schema: str) -> None:
    store = PostgresStore(pg_config(schema))
    heard: list[tuple[str | None, int]] = []
    changed = asyncio.Event()

    def listener(session_id: str | None, last_seq: int) -> None:
        heard.append((session_id, last_seq))
        changed.set()

    async def until(check: Callable[[], bool]) -> None:
        deadline = time.monotonic() + _WAIT_S
        while not check():
            assert time.monotonic() < deadline, f"not heard: {heard}"
            changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), 0.5)

    try:
        feed = await store.follow_appends(listener)
        await store.append("s1", new_events("a", 2), at(1))
        await until(lambda: ("s1", 2) in heard)
        conn = await _admin(schema)
        try:  # cut every LISTEN connection of this schema's channel (as a restart or a proxy would)
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE query LIKE 'LISTEN%' AND query LIKE $1",
                f"%{store.config.channel}%",
            )
        finally:
            await conn.close()
        await until(lambda: (None, 0) in heard)
        await store.append("s1", new_events("b", 1), at(2))
        await until(lambda: ("s1", 3) in heard)
        await feed.close()
    finally:
        await store.close()


async def test_two_processes_appending_to_one_session_get_one_gapless_log(schema: str) -> None:
    a, b = PostgresStore(pg_config(schema)), PostgresStore(pg_config(schema))
    try:
        writes = [
            store.append("s1", [NewEvent(f"{name}-{i}", "user.message", {"i": i})], at(1))
            for i in range(25)
            for name, store in (("a", a), ("b", b))
        ]
        await asyncio.gather(*writes)
        events = await b.get_events("s1")
        assert [e.seq for e in events] == list(range(1, 51))
        assert len({e.id for e in events}) == 50
        assert await a.last_seqs(["s1"]) == {"s1": 50}
    finally:
        await a.close()
        await b.close()


async def test_a_takeover_fences_the_old_holder_across_processes(schema: str) -> None:
    a, b = PostgresStore(pg_config(schema)), PostgresStore(pg_config(schema))
    try:
        old = await a.acquire_lease("s1", "h1", 10, at(0))
        assert old is not None
        await a.append("s1", new_events("a", 1), at(1), epoch=old.epoch)
        new = await b.acquire_lease("s1", "h2", 10, at(20))  # h1's lease expired
        assert new is not None and new.epoch == old.epoch + 1
        with pytest.raises(Fenced):
            await a.append("s1", new_events("late", 1), at(21), epoch=old.epoch)
        assert await a.renew_lease("s1", "h1", old.epoch, 10, at(21)) is None
        await b.append("s1", new_events("b", 1), at(21), epoch=new.epoch)
        assert [e.id for e in await a.get_events("s1")] == ["a-0", "b-0"]
    finally:
        await a.close()
        await b.close()
