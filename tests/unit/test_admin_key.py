"""``control_plane.admin_key``: the data directory's admin key is made once, never doubled beside
a usable one, and rotated with the old one revoked (store: the real in-memory backend)."""

from __future__ import annotations

import logging
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from control_plane.admin_key import ADMIN_KEY_FILE, ensure_admin_key, rotate_admin_key
from control_plane.api.auth import create_api_key, hash_key
from control_plane.api.caller import KeyScope
from control_plane.store import MemoryStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


async def test_first_start_makes_one_key(tmp_path: Path) -> None:
    async with MemoryStore() as store:
        made = await ensure_admin_key(store, tmp_path, T0)
        assert made is not None and made.scope == "admin" and made.environment_ids is None
        path = tmp_path / ADMIN_KEY_FILE
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert await store.find_api_key(hash_key(path.read_text().strip())) == made
        assert await ensure_admin_key(store, tmp_path, T0) is None  # the file is there: nothing more
        assert len(await store.list_api_keys()) == 1


async def test_missing_file_beside_a_usable_key_makes_none(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with MemoryStore() as store:
        await ensure_admin_key(store, tmp_path, T0)
        (tmp_path / ADMIN_KEY_FILE).unlink()
        with caplog.at_level(logging.WARNING):
            assert await ensure_admin_key(store, tmp_path, T0) is None
        assert not (tmp_path / ADMIN_KEY_FILE).exists()
        assert len(await store.list_api_keys()) == 1
        assert "rotate-admin" in caplog.text


async def test_missing_file_and_only_unusable_keys_makes_a_new_one(tmp_path: Path) -> None:
    async with MemoryStore() as store:
        _, old = await create_api_key(store, "admin", T0, scope=KeyScope.ADMIN)
        await store.revoke_api_key(old.id, T0)
        await create_api_key(store, "short", T0, scope=KeyScope.ADMIN, expires_at=T0 + timedelta(seconds=1))
        await create_api_key(store, "reader", T0, scope=KeyScope.READ_ONLY)
        assert await ensure_admin_key(store, tmp_path, T0 + timedelta(seconds=2)) is not None


async def test_a_revoked_key_in_the_file_is_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with MemoryStore() as store:
        made = await ensure_admin_key(store, tmp_path, T0)
        assert made is not None
        await store.revoke_api_key(made.id, T0)
        with caplog.at_level(logging.WARNING):
            await ensure_admin_key(store, tmp_path, T0)
        assert "not a usable admin key" in caplog.text


async def test_rotate_writes_new_then_revokes_the_old(tmp_path: Path) -> None:
    async with MemoryStore() as store:
        first = await ensure_admin_key(store, tmp_path, T0)
        assert first is not None
        _, other_admin = await create_api_key(store, "break-glass", T0, scope=KeyScope.ADMIN)
        old_text = (tmp_path / ADMIN_KEY_FILE).read_text()
        rotation = await rotate_admin_key(store, tmp_path, T0 + timedelta(seconds=5))
        new_text = (tmp_path / ADMIN_KEY_FILE).read_text()
        assert new_text != old_text
        assert stat.S_IMODE((tmp_path / ADMIN_KEY_FILE).stat().st_mode) == 0o600
        assert [k.id for k in rotation.revoked] == [first.id]
        assert (await store.get_api_key(first.id)).revoked_at == T0 + timedelta(seconds=5)
        assert (await store.get_api_key(other_admin.id)).revoked_at is None  # named keys stay
        assert await store.find_api_key(hash_key(new_text.strip())) == rotation.new
        assert sorted(p.name for p in tmp_path.iterdir()) == [ADMIN_KEY_FILE]  # no temp file left
