"""The API-key service on the in-memory store, without HTTP: the refusals of a new key, expiry,
and the last active admin key that is never revoked. The API tests drive it through HTTP."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from control_plane.access_keys import KeyScope, hash_key
from control_plane.errors import Conflict, EnvironmentNotFound, InvalidRequest
from control_plane.keys import ApiKeyService, CreateApiKey, key_status
from control_plane.store import MemoryStore

T0 = datetime(2026, 5, 1, tzinfo=UTC)


def service(store: MemoryStore, forgotten: list[str] | None = None) -> ApiKeyService:
    return ApiKeyService(store, lambda: T0, forget=None if forgotten is None else forgotten.append)


async def test_create_refusals_before_anything_is_stored() -> None:
    store = MemoryStore()
    keys = service(store)
    refusals = [
        (CreateApiKey("a", KeyScope.ADMIN, environment_ids=["env_x"]), "environment_ids"),
        (CreateApiKey("b", ttl_s=60, expires_at=T0 + timedelta(days=1)), "expires_at"),
        (CreateApiKey("c", expires_at=T0), "expires_at"),
    ]
    for command, param in refusals:
        with pytest.raises(InvalidRequest) as refused:
            await keys.create(command)
        assert refused.value.param == param
    with pytest.raises(EnvironmentNotFound):
        await keys.create(CreateApiKey("d", KeyScope.READ_WRITE, environment_ids=["env_unknown"]))
    assert await keys.list_keys() == []


async def test_a_key_is_stored_hashed_and_expires() -> None:
    store = MemoryStore()
    keys = service(store)
    secret, record = await keys.create(CreateApiKey("ci", KeyScope.READ_ONLY, ttl_s=60))
    assert record.key_hash == hash_key(secret) and secret not in repr(record)
    assert record.expires_at == T0 + timedelta(seconds=60)
    assert key_status(record, T0) == "active"
    assert key_status(record, T0 + timedelta(seconds=60)) == "expired"
    assert [k.id for k in await keys.list_keys()] == [record.id]


async def test_the_last_active_admin_key_is_never_revoked() -> None:
    store = MemoryStore()
    forgotten: list[str] = []
    keys = service(store, forgotten)
    _, first = await keys.create(CreateApiKey("admin 1", KeyScope.ADMIN))
    _, second = await keys.create(CreateApiKey("admin 2", KeyScope.ADMIN))
    _, reader = await keys.create(CreateApiKey("reader"))
    assert (await keys.revoke(first.id)).revoked_at == T0
    with pytest.raises(Conflict, match="last active admin key"):
        await keys.revoke(second.id)
    await keys.revoke(reader.id)  # any other key, yes
    assert forgotten == [first.id, reader.id]  # the cache is told at once
    assert (await keys.get(second.id)).revoked_at is None
