"""``CredentialBroker``: capabilities bound to a session's lease epoch, the upstream, and a
short lifetime; selection of the credential for an MCP server URL."""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import AsyncIterator
from typing import Any

import pytest

from control_plane.errors import NotFound
from control_plane.store import MemoryStore
from control_plane.vault import (
    CapabilityRejected,
    CapabilitySigner,
    CredentialBroker,
    CredentialRef,
    FileKek,
    Keyring,
    RejectReason,
    VaultService,
)
from control_plane.vault.params import CredentialUpdate, VaultCreate
from tests.support.vault import Clock, env_var, mcp_oauth, static_bearer

LEASE_TTL_S = 30
MCP_URL = "https://mcp.example.com/mcp"


@dataclasses.dataclass
class World:
    store: MemoryStore
    clock: Clock
    service: VaultService
    broker: CredentialBroker
    vault_id: str
    ref: CredentialRef

    async def session(self, vault_ids: list[str], session_id: str = "sesn_1", holder: str = "h1") -> int:
        await self.store.create_resource("session", session_id, {"vault_ids": vault_ids}, self.clock())
        lease = await self.store.acquire_lease(session_id, holder, LEASE_TTL_S, self.clock())
        assert lease is not None
        return lease.epoch


@pytest.fixture
async def world() -> AsyncIterator[World]:
    store = MemoryStore()
    clock = Clock()
    service = VaultService(store, Keyring(FileKek.generate()), clock)
    broker = CredentialBroker(store, service.cipher, CapabilitySigner.generate(), clock)
    vault_id = (await service.create_vault(VaultCreate(display_name="alice"))).id
    res = await service.create_credential(vault_id, static_bearer(MCP_URL, "sb-SECRET"))
    yield World(store, clock, service, broker, vault_id, CredentialRef(vault_id, res.id, "static_bearer"))
    await store.close()


async def rejected(world: World, token: Any, upstream: str = MCP_URL) -> RejectReason:
    with pytest.raises(CapabilityRejected) as caught:
        await world.broker.redeem(token, upstream=upstream)
    assert "sb-SECRET" not in str(caught.value)
    return caught.value.reason


async def test_issue_and_redeem(world: World) -> None:
    epoch = await world.session([world.vault_id])
    cap = await world.broker.issue("sesn_1", epoch, world.ref)
    assert cap.token not in repr(cap)
    material = await world.broker.redeem(cap, upstream="HTTPS://mcp.EXAMPLE.com:443/mcp")
    assert material.reveal() == "sb-SECRET"
    assert material.credential_id == world.ref.credential_id
    assert "sb-SECRET" not in repr(material)
    assert "sb-SECRET" not in str(material)
    assert "sb-SECRET" not in f"{material}"
    with pytest.raises(TypeError):
        pickle.dumps(material)
    assert (await world.broker.redeem(cap.token, upstream=MCP_URL)).reveal() == "sb-SECRET"


async def test_expired_capability(world: World) -> None:
    epoch = await world.session([world.vault_id])
    cap = await world.broker.issue("sesn_1", epoch, world.ref, ttl_s=10)
    world.clock.advance(9)
    await world.broker.redeem(cap, upstream=MCP_URL)
    world.clock.advance(1)
    assert await rejected(world, cap) is RejectReason.EXPIRED
    with pytest.raises(ValueError):
        await world.broker.issue("sesn_1", epoch, world.ref, ttl_s=3600)


async def test_bad_signature(world: World) -> None:
    epoch = await world.session([world.vault_id])
    cap = await world.broker.issue("sesn_1", epoch, world.ref)
    signed, _, mac = cap.token.rpartition(".")
    flipped = mac[:-2] + ("A" if mac[-2] != "A" else "B") + mac[-1]
    assert await rejected(world, f"{signed}.{flipped}") is RejectReason.SIGNATURE
    # A capability signed by another broker's key is worthless here.
    foreign = CredentialBroker(world.store, world.service.cipher, CapabilitySigner.generate(), world.clock)
    assert (
        await rejected(world, (await foreign.issue("sesn_1", epoch, world.ref)).token)
        is RejectReason.SIGNATURE
    )
    # Claims altered (a longer expiry, another credential) without re-signing.
    import base64
    import json

    prefix, payload, _ = cap.token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["exp"] += 3600
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    assert await rejected(world, f"{prefix}.{forged}.{mac}") is RejectReason.SIGNATURE
    for junk in ("", "ocap1.", "ocap1..", "nope", "ocap1.e30.!!!", "x" * 10_000, None, 12):
        assert await rejected(world, junk) in (RejectReason.MALFORMED, RejectReason.SIGNATURE)


async def test_epoch_mismatch_after_lease_takeover(world: World) -> None:
    epoch = await world.session([world.vault_id])
    cap = await world.broker.issue("sesn_1", epoch, world.ref, ttl_s=120)
    world.clock.advance(LEASE_TTL_S + 1)  # the harness stalls; its lease expires
    assert await rejected(world, cap) is RejectReason.FENCED  # expired, even before a takeover
    lease = await world.store.acquire_lease("sesn_1", "h2", LEASE_TTL_S, world.clock())
    assert lease is not None and lease.epoch == epoch + 1
    assert await rejected(world, cap) is RejectReason.FENCED  # the zombie's capability is useless
    with pytest.raises(CapabilityRejected) as caught:
        await world.broker.issue("sesn_1", epoch, world.ref)  # nor can it get a new one
    assert caught.value.reason is RejectReason.FENCED
    fresh = await world.broker.issue("sesn_1", lease.epoch, world.ref)
    assert (await world.broker.redeem(fresh, upstream=MCP_URL)).reveal() == "sb-SECRET"
    await world.store.release_lease("sesn_1", "h2", lease.epoch)
    assert await rejected(world, fresh) is RejectReason.FENCED


async def test_wrong_upstream(world: World) -> None:
    epoch = await world.session([world.vault_id])
    cap = await world.broker.issue("sesn_1", epoch, world.ref)
    for upstream in (
        "https://evil.example/mcp",
        "https://mcp.example.com/mcp/",
        "http://mcp.example.com/mcp",
        "junk",
    ):
        assert await rejected(world, cap, upstream) is RejectReason.UPSTREAM


async def test_revocation_after_issue(world: World) -> None:
    epoch = await world.session([world.vault_id])
    cap = await world.broker.issue("sesn_1", epoch, world.ref)
    await world.service.archive_credential(world.vault_id, world.ref.credential_id)
    assert await rejected(world, cap) is RejectReason.REVOKED
    res = await world.service.create_credential(world.vault_id, static_bearer(MCP_URL, "sb-SECRET"))
    ref = CredentialRef(world.vault_id, res.id, "static_bearer")
    cap = await world.broker.issue("sesn_1", epoch, ref)
    await world.service.delete_credential(world.vault_id, res.id)
    assert await rejected(world, cap) is RejectReason.REVOKED
    res = await world.service.create_credential(world.vault_id, static_bearer(MCP_URL, "sb-SECRET"))
    cap = await world.broker.issue("sesn_1", epoch, CredentialRef(world.vault_id, res.id, "static_bearer"))
    await world.store.archive_resource("session", "sesn_1", world.clock())
    assert await rejected(world, cap) is RejectReason.REVOKED


async def test_only_the_sessions_vaults(world: World) -> None:
    other = (await world.service.create_vault(VaultCreate(display_name="bob"))).id
    epoch = await world.session([other])
    with pytest.raises(CapabilityRejected) as caught:
        await world.broker.issue("sesn_1", epoch, world.ref)
    assert caught.value.reason is RejectReason.NOT_ALLOWED
    with pytest.raises(CapabilityRejected) as caught:
        await world.broker.issue(
            "sesn_1", epoch, CredentialRef(other, world.ref.credential_id, "static_bearer")
        )
    assert caught.value.reason is RejectReason.REVOKED  # the credential is not in that vault


async def test_environment_variable_hosts(world: World) -> None:
    res = await world.service.create_credential(
        world.vault_id, env_var("ev-SECRET", hosts=["api.example.com", "*.corp.example"])
    )
    epoch = await world.session([world.vault_id])
    cap = await world.broker.issue(
        "sesn_1", epoch, CredentialRef(world.vault_id, res.id, "environment_variable")
    )
    for host in ("api.example.com", "https://api.example.com/v1", "x.corp.example", "a.b.corp.example"):
        material = await world.broker.redeem(cap, upstream=host)
        assert (material.reveal(), material.secret_name) == ("ev-SECRET", "API_KEY")
    for host in ("corp.example", "evil.example", "api.example.com.evil.example", "xapi.example.com"):
        with pytest.raises(CapabilityRejected) as caught:
            await world.broker.redeem(cap, upstream=host)
        assert caught.value.reason is RejectReason.UPSTREAM
    # Changing the allowed hosts re-binds the credential: capabilities issued before are void.
    update = CredentialUpdate.model_validate(
        {
            "auth": {
                "type": "environment_variable",
                "networking": {"type": "limited", "allowed_hosts": ["api.example.com"]},
            }
        }
    )
    await world.service.update_credential(world.vault_id, res.id, update)
    with pytest.raises(CapabilityRejected) as caught:
        await world.broker.redeem(cap, upstream="api.example.com")
    assert caught.value.reason is RejectReason.REVOKED


async def test_find_for_mcp(world: World) -> None:
    second = (await world.service.create_vault(VaultCreate(display_name="second"))).id
    theirs = await world.service.create_credential(second, static_bearer(MCP_URL, "other"))
    oauth = await world.service.create_credential(second, mcp_oauth(url="https://oauth.example/mcp"))
    await world.service.create_credential(second, env_var(hosts=["mcp.example.com"]))
    await world.session([second, world.vault_id], session_id="sesn_a")
    await world.session([world.vault_id, second], session_id="sesn_b")
    broker = world.broker
    assert await broker.find_for_mcp("sesn_a", "https://MCP.example.com/mcp") == CredentialRef(
        second, theirs.id, "static_bearer"
    )
    assert await broker.find_for_mcp("sesn_b", MCP_URL) == world.ref
    assert await broker.find_for_mcp("sesn_b", "https://oauth.example:443/mcp") == CredentialRef(
        second, oauth.id, "mcp_oauth"
    )
    assert await broker.find_for_mcp("sesn_b", "https://mcp.example.com/other") is None
    assert await broker.find_for_mcp("sesn_b", "not a url") is None
    await world.service.archive_vault(second)
    assert await broker.find_for_mcp("sesn_a", MCP_URL) == world.ref
    with pytest.raises(NotFound):
        await broker.find_for_mcp("sesn_nope", MCP_URL)


async def test_mcp_headers(world: World) -> None:
    epoch = await world.session([world.vault_id])
    assert await world.broker.mcp_headers("sesn_1", epoch, MCP_URL) == {"Authorization": "Bearer sb-SECRET"}
    assert await world.broker.mcp_headers("sesn_1", epoch, "https://unknown.example/") == {}
    with pytest.raises(CapabilityRejected):
        await world.broker.mcp_headers("sesn_1", epoch + 1, MCP_URL)
