"""OAuth refresh of ``mcp_oauth`` credentials against a real local token endpoint: single-flight
in one process and across two, the three client authentication methods, failure handling."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta

import httpx
import pytest

from control_plane.errors import InvalidRequest
from control_plane.outbound import OutboundGuard, OutboundRefused
from control_plane.store import MemoryStore
from control_plane.vault import FileKek, Keyring, OAuthRefresher, RefreshFailed, VaultService
from control_plane.vault.oauth import scrub
from control_plane.vault.params import VaultCreate
from control_plane.vault.service import CREDENTIAL_KIND
from tests.support import eventually
from tests.support.vault import (
    Clock,
    TokenEndpoint,
    mcp_oauth,
    static_bearer,
    token_endpoint,
)

SECRETS = ("at-old", "rt-old", "cs-secret")
# The token endpoint of these tests listens on loopback, which the outbound rules refuse by
# default: the operator's allow-list lets it through (as outbound_allow_networks would).
LOOPBACK_ALLOWED = OutboundGuard(["127.0.0.0/8"])


@dataclass
class Setup:
    store: MemoryStore
    clock: Clock
    service: VaultService
    http: httpx.AsyncClient
    endpoint: TokenEndpoint
    vault_id: str

    def refresher(self, holder: str = "p1") -> OAuthRefresher:
        return OAuthRefresher(
            self.store, self.service.cipher, self.http, self.clock, holder=holder, outbound=LOOPBACK_ALLOWED
        )

    async def credential(self, *, expires_in_s: float = 30, **kwargs: object) -> str:
        params = mcp_oauth(
            token_endpoint=self.endpoint.url,
            expires_at=self.clock.now + timedelta(seconds=expires_in_s),
            **kwargs,
        )
        return (await self.service.create_credential(self.vault_id, params)).id


@pytest.fixture
async def setup() -> AsyncIterator[Setup]:
    store = MemoryStore()
    clock = Clock()
    service = VaultService(store, Keyring(FileKek.generate()), clock, outbound=LOOPBACK_ALLOWED)
    vault_id = (await service.create_vault(VaultCreate(display_name="v"))).id
    async with token_endpoint() as endpoint, LOOPBACK_ALLOWED.http_client(timeout_s=15) as http:
        yield Setup(store, clock, service, http, endpoint, vault_id)
    await store.close()


async def test_a_fresh_token_is_not_refreshed(setup: Setup) -> None:
    cid = await setup.credential(expires_in_s=3600)
    assert (await setup.refresher().get_token(cid)).reveal() == "at-old"
    assert setup.endpoint.requests == []


async def test_single_flight_in_one_process(setup: Setup, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    cid = await setup.credential(expires_in_s=30)  # within the 60 s margin: due
    refresher = setup.refresher()
    setup.endpoint.gate.clear()  # hold the token request until every caller is waiting
    tasks = [asyncio.create_task(refresher.get_token(cid)) for _ in range(20)]
    await eventually(lambda: len(setup.endpoint.requests) == 1)
    for _ in range(10):
        await asyncio.sleep(0)
    setup.endpoint.gate.set()
    tokens = {m.reveal() for m in await asyncio.gather(*tasks)}
    assert tokens == {"at-new-1"}
    assert len(setup.endpoint.requests) == 1
    request = setup.endpoint.requests[0]
    assert request.basic == ("client-1", "cs-secret")
    assert request.form == {
        "grant_type": "refresh_token",
        "refresh_token": "rt-old",
        "scope": "read write",
        "resource": "https://oauth-mcp.example.com/",
    }
    res = await setup.store.get_resource(CREDENTIAL_KIND, cid)
    assert "refresh_claim" not in res.body
    assert res.body["auth"]["expires_at"] == "2026-03-01T13:00:00Z"
    assert await setup.service.cipher.open(res) == {
        "access_token": "at-new-1",
        "refresh_token": "rt-new-1",  # rotated
        "client_secret": "cs-secret",
    }
    for secret in (*SECRETS, "at-new-1", "rt-new-1"):
        assert secret not in caplog.text
    # Fresh now: no more requests.
    assert (await refresher.get_token(cid)).reveal() == "at-new-1"
    assert len(setup.endpoint.requests) == 1


async def test_single_flight_across_processes(setup: Setup) -> None:
    """Two refreshers (two processes: separate locks) over one store: the claim written with a
    version check lets only one of them call the token endpoint."""
    cid = await setup.credential(expires_in_s=0.5)
    one, two = setup.refresher("p1"), setup.refresher("p2")
    one.claim_poll_s = two.claim_poll_s = 0.005
    setup.endpoint.gate.clear()
    tasks = [asyncio.create_task(r.get_token(cid)) for r in (one, two) for _ in range(5)]
    await eventually(lambda: len(setup.endpoint.requests) == 1)
    res = await setup.store.get_resource(CREDENTIAL_KIND, cid)
    assert res.body["refresh_claim"]["holder"] in ("p1", "p2")
    setup.endpoint.gate.set()
    assert {m.reveal() for m in await asyncio.gather(*tasks)} == {"at-new-1"}
    assert len(setup.endpoint.requests) == 1


async def test_a_stale_claim_of_a_dead_process_is_taken_over(setup: Setup) -> None:
    cid = await setup.credential(expires_in_s=10)
    res = await setup.store.get_resource(CREDENTIAL_KIND, cid)
    until = (setup.clock.now - timedelta(seconds=1)).isoformat()
    await setup.store.update_resource(
        CREDENTIAL_KIND, cid, {**res.body, "refresh_claim": {"holder": "dead", "until": until}}, setup.clock()
    )
    assert (await setup.refresher().get_token(cid)).reveal() == "at-new-1"


@pytest.mark.parametrize("method", ["client_secret_post", "none"])
async def test_client_authentication_methods(setup: Setup, method: str) -> None:
    cid = await setup.credential(method=method)
    await setup.refresher().get_token(cid)
    request = setup.endpoint.requests[0]
    assert request.basic is None
    assert request.form["client_id"] == "client-1"
    if method == "client_secret_post":
        assert request.form["client_secret"] == "cs-secret"
    else:
        assert "client_secret" not in request.form


async def test_refused_refresh(setup: Setup, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    setup.endpoint.fail = True
    cid = await setup.credential(expires_in_s=30)
    refresher = setup.refresher()
    # Still valid for 30 s: the stored token is used while the refresh keeps failing.
    assert (await refresher.get_token(cid)).reveal() == "at-old"
    setup.clock.advance(31)
    with pytest.raises(RefreshFailed) as caught:
        await refresher.get_token(cid)
    assert caught.value.outcome == "failed"
    assert caught.value.status_code == 400
    response = caught.value.http_response
    assert response is not None
    # A summary only: the body of an endpoint a caller named is never handed back.
    assert response["body"] == "" and response["body_truncated"] is True
    assert response["status_code"] == 400
    result = await refresher.refresh(cid)
    assert result.status == "failed"
    assert result.http_response is not None and result.http_response["body"] == ""
    res = await setup.store.get_resource(CREDENTIAL_KIND, cid)
    assert "refresh_claim" not in res.body  # released after the failure
    for secret in SECRETS:
        assert secret not in caplog.text


async def test_unreachable_endpoint(setup: Setup) -> None:
    params = mcp_oauth(
        token_endpoint="http://127.0.0.1:9/token", expires_at=setup.clock.now + timedelta(seconds=5)
    )
    cid = (await setup.service.create_credential(setup.vault_id, params)).id
    result = await setup.refresher().refresh(cid)
    assert result.status == "connect_error"
    assert result.http_response is None


async def test_no_refresh_configuration(setup: Setup) -> None:
    params = mcp_oauth(refresh=False, expires_at=setup.clock.now + timedelta(seconds=5))
    cid = (await setup.service.create_credential(setup.vault_id, params)).id
    refresher = setup.refresher()
    assert (await refresher.get_token(cid)).reveal() == "at-old"  # nothing to refresh with
    assert (await refresher.refresh(cid)).status == "no_refresh_token"


async def test_forced_refresh(setup: Setup) -> None:
    cid = await setup.credential(expires_in_s=3600)
    setup.endpoint.rotate = False
    assert (await setup.refresher().refresh(cid)).status == "succeeded"
    res = await setup.store.get_resource(CREDENTIAL_KIND, cid)
    assert await setup.service.cipher.open(res) == {
        "access_token": "at-new-1",
        "refresh_token": "rt-old",  # not rotated: kept
        "client_secret": "cs-secret",
    }


def test_scrub() -> None:
    text = '{"access_token": "abc", "error": "x", "refresh_token":"def", "note": "secret-1 leaked"}'
    scrubbed = scrub(text, ["secret-1", ""])
    assert "abc" not in scrubbed and "def" not in scrubbed and "secret-1" not in scrubbed
    assert '"error": "x"' in scrubbed


async def test_token_endpoint_on_a_private_address_is_not_dialled(setup: Setup) -> None:
    """A name that resolves to a refused address (DNS changed after the credential was stored):
    the refresh is a ``connect_error`` naming the rule, and the endpoint sees no request."""
    port = int(setup.endpoint.url.rsplit(":", 1)[1].split("/")[0])
    cid = await setup.credential(expires_in_s=5)
    res = await setup.store.get_resource(CREDENTIAL_KIND, cid)
    assert res.body["auth"]["refresh"]["token_endpoint"].startswith("http://127.0.0.1:")

    async def rebinding(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    strict = OutboundGuard(resolver=rebinding)  # no allow-list
    async with strict.http_client(timeout_s=5) as http:
        refresher = OAuthRefresher(setup.store, setup.service.cipher, http, setup.clock, outbound=strict)
        result = await refresher.refresh(cid)
        assert result.status == "connect_error"
        assert result.http_response is None
        # Straight through the pinned client too (no pre-flight): refused before any connect.
        with pytest.raises(OutboundRefused) as caught:
            await http.post(f"http://token.test:{port}/token")
        assert caught.value.rule == "outbound.loopback"
    assert setup.endpoint.requests == []


async def test_stored_urls_are_checked(setup: Setup) -> None:
    strict = VaultService(setup.store, Keyring(FileKek.generate()), setup.clock)
    vault_id = (await strict.create_vault(VaultCreate(display_name="v"))).id
    for url in ("https://169.254.169.254/token", "https://[::ffff:127.0.0.1]/t", "https://2130706433/t"):
        with pytest.raises(InvalidRequest, match="outbound_allow_networks") as caught:
            await strict.create_credential(vault_id, mcp_oauth(token_endpoint=url))
        assert caught.value.param == "auth.refresh.token_endpoint"
    with pytest.raises(InvalidRequest, match=r"rule: outbound\.private"):
        await strict.create_credential(vault_id, static_bearer("https://10.1.2.3/mcp"))


async def test_a_failed_refresh_of_a_due_token_is_reported_once_per_token(setup: Setup) -> None:
    """``on_refresh_failed`` hears of every failed refresh of a due token (not of a forced one,
    not of a credential without a refresh token); the webhook adapter makes it one
    ``vault_credential.refresh_failed`` per access token, however often the refresh fails."""
    from control_plane.webhooks import RefreshFailedWebhooks, WebhookConfig, WebhookOutbox
    from control_plane.webhooks.envelope import event_id

    told: list[tuple[str, str]] = []
    outbox = WebhookOutbox(setup.store, setup.clock, WebhookConfig())
    emitted: list[str] = []
    adapter = RefreshFailedWebhooks(setup.store, outbox)

    async def tell(vault_id: str, credential_id: str) -> None:
        told.append((vault_id, credential_id))
        await adapter(vault_id, credential_id)

    async def record(event_type: str, subject_id: str, **kw: object) -> str:
        emitted.append(f"{event_type} {subject_id} {kw['cause']}")
        return event_id(str(kw["cause"]), event_type)

    outbox.emit = record  # type: ignore[method-assign]
    setup.endpoint.fail = True
    cid = await setup.credential(expires_in_s=30)
    refresher = setup.refresher()
    refresher.on_refresh_failed = tell
    setup.clock.advance(1)  # due (within the refresh margin), still valid
    for _ in range(3):
        assert (await refresher.get_token(cid)).reveal() == "at-old"
    assert (await refresher.refresh(cid)).status == "failed"  # a forced refresh answers for itself
    assert told == [(setup.vault_id, cid)] * 3
    assert len(set(emitted)) == 1 and emitted[0].startswith(f"vault_credential.refresh_failed {cid} ")
    params = mcp_oauth(
        refresh=False,
        expires_at=setup.clock.now + timedelta(seconds=5),
        url="https://other.example.com/mcp",
    )
    plain = (await setup.service.create_credential(setup.vault_id, params)).id
    await refresher.get_token(plain)
    assert len(told) == 3  # nothing to refresh with is not a failed refresh
