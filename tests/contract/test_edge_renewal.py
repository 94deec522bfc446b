"""Contract: renewing an edge's certificate, and the previous certificate that stays accepted
until the edge has used the new one (or it expires)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from control_plane.errors import Conflict, NotFound
from control_plane.store import EdgeRecord, Store
from tests.support.store_contract import at

from .conftest import Backend

OLD, NEW, NEWER = "a" * 64, "b" * 64, "c" * 64

EDGE = EdgeRecord(
    id="e1",
    environment_id="env_1",
    name="edge e1",
    cert_serial="01",
    cert_fingerprint=OLD,
    created_at=at(0),
    cert_not_after=at(1_000),
)


async def test_a_new_edge_has_no_previous_certificate(store: Store) -> None:
    await store.create_edge(EDGE)
    got = await store.get_edge("e1")
    assert got.previous_cert_fingerprint is None and got.previous_cert_not_after is None


async def test_renewal_makes_the_new_certificate_current_and_keeps_the_old_one_as_previous(
    store: Store,
) -> None:
    await store.create_edge(EDGE)
    renewed = await store.renew_edge_certificate("e1", "02", NEW, at(5_000), at(10), renewed_from=OLD)
    assert renewed == replace(
        EDGE,
        cert_serial="02",
        cert_fingerprint=NEW,
        cert_not_after=at(5_000),
        previous_cert_fingerprint=OLD,
        previous_cert_not_after=at(1_000),
    )
    assert await store.get_edge("e1") == renewed
    assert await store.list_edges() == [renewed]


async def test_renewing_again_from_the_previous_certificate_keeps_it_and_drops_the_lost_one(
    store: Store,
) -> None:
    """The edge crashed before saving NEW: it renews again with OLD. OLD stays the previous one
    (it is what the edge holds); NEW, which nobody holds, is gone."""
    await store.create_edge(EDGE)
    await store.renew_edge_certificate("e1", "02", NEW, at(5_000), at(10), renewed_from=OLD)
    again = await store.renew_edge_certificate("e1", "03", NEWER, at(6_000), at(20), renewed_from=OLD)
    assert (again.cert_serial, again.cert_fingerprint, again.cert_not_after) == ("03", NEWER, at(6_000))
    assert (again.previous_cert_fingerprint, again.previous_cert_not_after) == (OLD, at(1_000))


async def test_renewing_from_the_current_certificate_replaces_the_previous_one(store: Store) -> None:
    await store.create_edge(EDGE)
    await store.renew_edge_certificate("e1", "02", NEW, at(5_000), at(10), renewed_from=OLD)
    again = await store.renew_edge_certificate("e1", "03", NEWER, at(6_000), at(20), renewed_from=NEW)
    assert (again.previous_cert_fingerprint, again.previous_cert_not_after) == (NEW, at(5_000))


async def test_renewal_from_a_certificate_no_longer_accepted_conflicts_and_writes_nothing(
    store: Store,
) -> None:
    await store.create_edge(EDGE)
    with pytest.raises(Conflict):
        await store.renew_edge_certificate("e1", "02", NEW, at(5_000), at(10), renewed_from="d" * 64)
    assert await store.get_edge("e1") == EDGE
    renewed = await store.renew_edge_certificate("e1", "02", NEW, at(5_000), at(10), renewed_from=OLD)
    # The previous certificate has expired at 1000: it no longer renews.
    with pytest.raises(Conflict):
        await store.renew_edge_certificate("e1", "03", NEWER, at(6_000), at(1_000), renewed_from=OLD)
    assert await store.get_edge("e1") == renewed


async def test_a_revoked_edge_is_not_renewed_and_revocation_forgets_the_previous_certificate(
    store: Store,
) -> None:
    await store.create_edge(EDGE)
    await store.renew_edge_certificate("e1", "02", NEW, at(5_000), at(10), renewed_from=OLD)
    revoked = await store.revoke_edge("e1", at(20))
    assert revoked.revoked_at == at(20)
    assert revoked.previous_cert_fingerprint is None and revoked.previous_cert_not_after is None
    assert revoked.cert_fingerprint == NEW
    for renewed_from in (NEW, OLD):
        with pytest.raises(Conflict):
            await store.renew_edge_certificate(
                "e1", "03", NEWER, at(6_000), at(30), renewed_from=renewed_from
            )
    assert await store.get_edge("e1") == revoked


async def test_forget_previous_certificate(store: Store) -> None:
    await store.create_edge(EDGE)
    renewed = await store.renew_edge_certificate("e1", "02", NEW, at(5_000), at(10), renewed_from=OLD)
    # Guarded by the current certificate: a stale caller does not undo a newer renewal's state.
    assert await store.forget_previous_edge_certificate("e1", OLD) == renewed
    forgotten = await store.forget_previous_edge_certificate("e1", NEW)
    assert forgotten == replace(renewed, previous_cert_fingerprint=None, previous_cert_not_after=None)
    assert await store.get_edge("e1") == forgotten
    assert await store.forget_previous_edge_certificate("e1", NEW) == forgotten  # idempotent
    with pytest.raises(Conflict):  # OLD is no longer accepted for a renewal either
        await store.renew_edge_certificate("e1", "03", NEWER, at(6_000), at(20), renewed_from=OLD)


async def test_unknown_edge(store: Store) -> None:
    with pytest.raises(NotFound):
        await store.renew_edge_certificate("nope", "02", NEW, at(5_000), at(10), renewed_from=OLD)
    with pytest.raises(NotFound):
        await store.forget_previous_edge_certificate("nope", NEW)


async def test_a_created_edge_keeps_the_previous_certificate_it_was_given(store: Store) -> None:
    record = replace(EDGE, previous_cert_fingerprint=NEW, previous_cert_not_after=at(500))
    await store.create_edge(record)
    assert await store.get_edge("e1") == record


async def test_renewal_is_durable(durable_backend: Backend) -> None:
    store = durable_backend.open()
    try:
        await store.create_edge(EDGE)
        renewed = await store.renew_edge_certificate("e1", "02", NEW, at(5_000), at(10), renewed_from=OLD)
    finally:
        await store.close()
    reopened = durable_backend.open()
    try:
        assert await reopened.get_edge("e1") == renewed
    finally:
        await reopened.close()
