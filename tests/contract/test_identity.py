"""Contract: enrollment tokens, edges and API keys (stored and looked up by hash only)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import datetime

import pytest

from control_plane.errors import Conflict, InvalidRequest, NotFound, TokenRejected
from control_plane.store import ApiKeyRecord, EdgeRecord, EnrollmentTokenRecord, Store
from tests.support.store_contract import at

TOKEN = EnrollmentTokenRecord(
    id="enr_1", environment_id="env_1", token_hash="a" * 64, created_at=at(0), expires_at=at(600)
)


def edge(id: str, environment_id: str = "env_1", created_at: datetime | None = None) -> EdgeRecord:
    return EdgeRecord(
        id=id,
        environment_id=environment_id,
        name=f"edge {id}",
        cert_serial="0a1b",
        cert_fingerprint="f" * 64,
        created_at=created_at or at(0),
        cert_not_after=at(86_400),
    )


async def test_consume_enrollment_token(store: Store) -> None:
    await store.create_enrollment_token(TOKEN)
    used = await store.consume_enrollment_token(TOKEN.token_hash, "edge_1", at(10))
    assert used == replace(TOKEN, used_at=at(10), used_by_edge_id="edge_1")


async def test_enrollment_token_is_single_use(store: Store) -> None:
    await store.create_enrollment_token(TOKEN)
    await store.consume_enrollment_token(TOKEN.token_hash, "edge_1", at(10))
    with pytest.raises(TokenRejected) as info:
        await store.consume_enrollment_token(TOKEN.token_hash, "edge_2", at(11))
    assert info.value.reason == "used"


async def test_unknown_and_expired_tokens(store: Store) -> None:
    await store.create_enrollment_token(TOKEN)
    with pytest.raises(TokenRejected) as info:
        await store.consume_enrollment_token("b" * 64, "edge_1", at(10))
    assert info.value.reason == "unknown"
    with pytest.raises(TokenRejected) as info:
        await store.consume_enrollment_token(TOKEN.token_hash, "edge_1", at(600))
    assert info.value.reason == "expired"
    # An expired attempt does not use the token up.
    with pytest.raises(TokenRejected) as info:
        await store.consume_enrollment_token(TOKEN.token_hash, "edge_1", at(700))
    assert info.value.reason == "expired"


async def test_concurrent_consumers_exactly_one_wins(store: Store) -> None:
    await store.create_enrollment_token(TOKEN)
    results = await asyncio.gather(
        *(store.consume_enrollment_token(TOKEN.token_hash, f"edge_{i}", at(10)) for i in range(25)),
        return_exceptions=True,
    )
    winners = [r for r in results if isinstance(r, EnrollmentTokenRecord)]
    assert len(winners) == 1
    losers = [r for r in results if not isinstance(r, EnrollmentTokenRecord)]
    assert all(isinstance(r, TokenRejected) and r.reason == "used" for r in losers)


async def test_duplicate_enrollment_token(store: Store) -> None:
    await store.create_enrollment_token(TOKEN)
    with pytest.raises(Conflict):
        await store.create_enrollment_token(replace(TOKEN, token_hash="c" * 64))
    with pytest.raises(Conflict):
        await store.create_enrollment_token(replace(TOKEN, id="enr_2"))


async def test_records_refuse_naive_datetimes(store: Store) -> None:
    with pytest.raises(InvalidRequest):
        await store.create_enrollment_token(replace(TOKEN, expires_at=datetime(2026, 1, 1)))
    with pytest.raises(InvalidRequest):
        await store.create_edge(replace(edge("e1"), created_at=datetime(2026, 1, 1)))


async def test_edges(store: Store) -> None:
    e1, e2, e3 = edge("e1", created_at=at(2)), edge("e2", "env_2", at(1)), edge("e3", created_at=at(3))
    for record in (e1, e2, e3):
        await store.create_edge(record)
    assert await store.get_edge("e1") == e1
    assert await store.list_edges() == [e2, e1, e3]
    assert await store.list_edges("env_1") == [e1, e3]
    assert await store.list_edges("env_9") == []
    with pytest.raises(Conflict):
        await store.create_edge(e1)
    with pytest.raises(NotFound):
        await store.get_edge("nope")
    assert await store.get_edges(["e3", "nope", "e2", "e3"]) == [e2, e3]
    assert await store.get_edges([]) == []


async def test_revoke_edge(store: Store) -> None:
    await store.create_edge(edge("e1"))
    revoked = await store.revoke_edge("e1", at(5))
    assert revoked == replace(edge("e1"), revoked_at=at(5))
    assert await store.revoke_edge("e1", at(9)) == revoked  # the first revocation stands
    assert await store.get_edge("e1") == revoked
    with pytest.raises(NotFound):
        await store.revoke_edge("nope", at(5))


async def test_api_keys(store: Store) -> None:
    key = ApiKeyRecord(id="key_1", name="ci", key_hash="d" * 64, created_at=at(0))
    await store.create_api_key(key)
    assert await store.find_api_key("d" * 64) == key
    assert await store.find_api_key("e" * 64) is None
    with pytest.raises(Conflict):
        await store.create_api_key(replace(key, key_hash="e" * 64))
    with pytest.raises(Conflict):
        await store.create_api_key(replace(key, id="key_2"))
    revoked = ApiKeyRecord(id="key_3", name="old", key_hash="9" * 64, created_at=at(0), revoked_at=at(1))
    await store.create_api_key(revoked)
    assert await store.find_api_key("9" * 64) == revoked


async def test_list_enrollment_tokens_oldest_first_and_by_environment(store: Store) -> None:
    t1 = replace(TOKEN, id="enr_b", created_at=at(2))
    t2 = replace(TOKEN, id="enr_a", token_hash="b" * 64, environment_id="env_2", created_at=at(1))
    t3 = replace(TOKEN, id="enr_c", token_hash="c" * 64, created_at=at(2))
    for record in (t1, t2, t3):
        await store.create_enrollment_token(record)
    assert await store.list_enrollment_tokens() == [t2, t1, t3]
    assert await store.list_enrollment_tokens("env_1") == [t1, t3]
    assert await store.list_enrollment_tokens("env_9") == []
    used = await store.consume_enrollment_token(t1.token_hash, "edge_1", at(3))
    assert (await store.list_enrollment_tokens("env_1"))[0] == used


async def test_a_revoked_token_enrolls_nothing(store: Store) -> None:
    await store.create_enrollment_token(TOKEN)
    revoked = await store.revoke_enrollment_token(TOKEN.id, at(5))
    assert revoked == replace(TOKEN, revoked_at=at(5))
    assert await store.revoke_enrollment_token(TOKEN.id, at(9)) == revoked  # the first revocation stands
    assert await store.list_enrollment_tokens() == [revoked]
    with pytest.raises(TokenRejected) as info:
        await store.consume_enrollment_token(TOKEN.token_hash, "edge_1", at(10))
    assert info.value.reason == "revoked"
    assert (await store.list_enrollment_tokens())[0].used_at is None  # the refusal used nothing


async def test_revoking_an_unknown_or_used_token_is_refused(store: Store) -> None:
    with pytest.raises(NotFound):
        await store.revoke_enrollment_token("enr_nope", at(1))
    await store.create_enrollment_token(TOKEN)
    await store.consume_enrollment_token(TOKEN.token_hash, "edge_1", at(2))
    with pytest.raises(Conflict, match="edge_1"):
        await store.revoke_enrollment_token(TOKEN.id, at(3))
    [listed] = await store.list_enrollment_tokens()
    assert listed.revoked_at is None and listed.used_by_edge_id == "edge_1"
