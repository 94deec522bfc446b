"""Contract: API keys as a resource: scope, environments, expiry, listing, revocation, last use."""

from __future__ import annotations

from dataclasses import replace

import pytest

from control_plane.errors import NotFound
from control_plane.store import ApiKeyRecord, Store
from tests.support.store_contract import at

from .conftest import Backend

SCOPED = ApiKeyRecord(
    id="key_2",
    name="ci",
    key_hash="b" * 64,
    created_at=at(1),
    scope="read_write",
    environment_ids=("env_1", "env_2"),
    expires_at=at(3600),
)


async def test_fields_round_trip(store: Store) -> None:
    admin = ApiKeyRecord(id="key_1", name="admin", key_hash="a" * 64, created_at=at(0), scope="admin")
    await store.create_api_key(admin)
    await store.create_api_key(SCOPED)
    assert await store.find_api_key("b" * 64) == SCOPED
    assert await store.get_api_key("key_2") == SCOPED
    assert await store.get_api_key("key_1") == admin
    assert (await store.get_api_key("key_1")).environment_ids is None
    with pytest.raises(NotFound):
        await store.get_api_key("nope")


async def test_default_scope_is_the_least_power(store: Store) -> None:
    await store.create_api_key(ApiKeyRecord(id="k", name="n", key_hash="c" * 64, created_at=at(0)))
    assert (await store.get_api_key("k")).scope == "read_only"


async def test_an_empty_environment_list_stays_empty(store: Store) -> None:
    """``()`` (no environment at all) is not ``None`` (every environment)."""
    await store.create_api_key(replace(SCOPED, environment_ids=()))
    assert (await store.get_api_key("key_2")).environment_ids == ()


async def test_list_oldest_first_with_revoked_ones(store: Store) -> None:
    k3 = replace(SCOPED, id="key_3", key_hash="3" * 64, created_at=at(5))
    k1 = replace(SCOPED, id="key_1", key_hash="1" * 64, created_at=at(5))
    await store.create_api_key(k3)
    await store.create_api_key(SCOPED)
    await store.create_api_key(k1)
    await store.revoke_api_key("key_3", at(9))
    assert [k.id for k in await store.list_api_keys()] == ["key_2", "key_1", "key_3"]
    assert (await store.list_api_keys())[2].revoked_at == at(9)


async def test_revoke_first_revocation_stands(store: Store) -> None:
    await store.create_api_key(SCOPED)
    revoked = await store.revoke_api_key("key_2", at(10))
    assert revoked == replace(SCOPED, revoked_at=at(10))
    assert await store.revoke_api_key("key_2", at(20)) == revoked
    assert await store.find_api_key("b" * 64) == revoked
    with pytest.raises(NotFound):
        await store.revoke_api_key("nope", at(10))


async def test_touch_records_the_latest_use(store: Store) -> None:
    await store.create_api_key(SCOPED)
    await store.touch_api_key("key_2", at(100))
    assert (await store.get_api_key("key_2")).last_used_at == at(100)
    await store.touch_api_key("key_2", at(50))  # an older time never overwrites a newer one
    assert (await store.get_api_key("key_2")).last_used_at == at(100)
    await store.touch_api_key("key_2", at(160))
    assert (await store.get_api_key("key_2")).last_used_at == at(160)
    await store.touch_api_key("nope", at(160))  # ignored


async def test_survives_reopen(durable_backend: Backend) -> None:
    store = durable_backend.open()
    try:
        await store.create_api_key(SCOPED)
        await store.touch_api_key("key_2", at(7))
    finally:
        await store.close()
    store = durable_backend.open()
    try:
        assert await store.get_api_key("key_2") == replace(SCOPED, last_used_at=at(7))
    finally:
        await store.close()


async def test_list_resources_filter_any_of(store: Store) -> None:
    """What an environment-scoped key's session listing uses: a tuple of strings is "any of"."""
    for i, env in enumerate(["env_1", "env_2", "env_3", "env_1"]):
        await store.create_resource("session", f"s{i}", {"environment_id": env}, at(i))
    await store.create_resource("session", "s_num", {"environment_id": 7}, at(9))
    page = await store.list_resources("session", filters={"environment_id": ("env_1", "env_3")})
    assert sorted(r.id for r in page.items) == ["s0", "s2", "s3"]
    page = await store.list_resources("session", filters={"environment_id": ["env_2"]}, limit=1)
    assert [r.id for r in page.items] == ["s1"]
    assert (await store.list_resources("session", filters={"environment_id": ()})).items == []
