"""``ApiKeyCache``: a key record is read from the store at most once per TTL; revocation through
the cache's own process (``forget``) holds at once; misses are not cached; ``last_used_at`` is not
written on every request."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
from fastapi import Depends, FastAPI

from control_plane.api.api_keys import api_keys_router
from control_plane.api.auth import ApiKeyAuth, ApiKeyCache, ApiKeyGate, check_key, create_api_key, hash_key
from control_plane.api.caller import KeyScope
from control_plane.api.errors import install_error_handlers
from control_plane.keys import ApiKeyService
from control_plane.store import ApiKeyRecord, MemoryStore

NOW = datetime(2026, 1, 1, tzinfo=UTC)


class CountingStore(MemoryStore):
    """The in-memory store, counting key lookups and touches."""

    def __init__(self) -> None:
        super().__init__()
        self.finds = 0
        self.touches = 0

    async def find_api_key(self, key_hash: str) -> ApiKeyRecord | None:
        self.finds += 1
        return await super().find_api_key(key_hash)

    async def touch_api_key(self, key_id: str, now: datetime) -> None:
        self.touches += 1
        await super().touch_api_key(key_id, now)


async def test_a_record_is_read_once_per_ttl_and_touched_once_a_minute() -> None:
    async with CountingStore() as store:
        key, record = await create_api_key(store, "ci", NOW)
        cache = ApiKeyCache(store, ttl_s=60)
        for second in range(30):
            checked = await check_key(store, key, NOW + timedelta(seconds=second), cache)
            assert isinstance(checked, ApiKeyRecord) and checked.id == record.id
        assert store.finds == 1
        assert store.touches == 1  # the cached copy carries the new last_used_at
        assert isinstance(await check_key(store, key, NOW + timedelta(seconds=61), cache), ApiKeyRecord)
        assert store.touches == 2


async def test_forget_makes_a_revocation_hold_at_once() -> None:
    async with CountingStore() as store:
        key, record = await create_api_key(store, "ci", NOW)
        cache = ApiKeyCache(store, ttl_s=60)
        assert isinstance(await check_key(store, key, NOW, cache), ApiKeyRecord)
        await store.revoke_api_key(record.id, NOW)
        assert isinstance(await check_key(store, key, NOW, cache), ApiKeyRecord)  # cached, within TTL
        cache.forget(record.id)
        assert await check_key(store, key, NOW, cache) == f"API key {record.id} was revoked"


async def test_ttl_zero_reads_every_time_and_misses_are_not_cached() -> None:
    async with CountingStore() as store:
        key, _ = await create_api_key(store, "ci", NOW)
        uncached = ApiKeyCache(store, ttl_s=0)
        for _ in range(3):
            await uncached.find(hash_key(key))
        assert store.finds == 3
        cache = ApiKeyCache(store, ttl_s=60)
        assert await cache.find(hash_key("sk-outpost-unknown")) is None
        assert await cache.find(hash_key("sk-outpost-unknown")) is None
        assert store.finds == 5


async def test_expiry_is_checked_against_the_cached_record() -> None:
    async with CountingStore() as store:
        key, _ = await create_api_key(store, "ci", NOW, expires_at=NOW + timedelta(seconds=10))
        cache = ApiKeyCache(store, ttl_s=60)
        assert isinstance(await check_key(store, key, NOW, cache), ApiKeyRecord)
        refused = await check_key(store, key, NOW + timedelta(seconds=10), cache)
        assert isinstance(refused, str) and "expired" in refused and store.finds == 1


async def test_the_cache_is_bounded() -> None:
    async with CountingStore() as store:
        keys = [(await create_api_key(store, f"k{i}", NOW))[0] for i in range(5)]
        cache = ApiKeyCache(store, ttl_s=60, max_entries=3)
        for key in keys:
            assert await cache.find(hash_key(key)) is not None
        assert len(cache._records) <= 3


async def test_a_key_revoked_through_the_api_is_refused_at_once() -> None:
    """The revoke route drops the record from the gate's cache (shared in ``create_app``)."""

    async with CountingStore() as store:
        admin, _ = await create_api_key(store, "admin", NOW)
        ci, ci_record = await create_api_key(store, "ci", NOW, scope=KeyScope.READ_WRITE)
        cache = ApiKeyCache(store, ttl_s=60)
        app = FastAPI()
        install_error_handlers(app)
        app.add_middleware(ApiKeyGate, store=store, cache=cache)
        app.include_router(
            api_keys_router(ApiKeyService(store, lambda: NOW, forget=cache.forget)),
            dependencies=[Depends(ApiKeyAuth(store, cache=cache))],
        )
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            ci_headers = {"authorization": f"Bearer {ci}"}
            assert (await http.get("/v1/api_keys", headers=ci_headers)).status_code == 403  # known, not admin
            revoked = await http.post(
                f"/v1/api_keys/{ci_record.id}/revoke", headers={"authorization": f"Bearer {admin}"}
            )
            assert revoked.status_code == 200, revoked.text
            assert (await http.get("/v1/api_keys", headers=ci_headers)).status_code == 401
