"""``client.beta.tunnels`` (+ ``.certificates``) end to end: all 10 methods through the official SDK
against the real API on SQLite with a vault, every reply parsed strictly into the SDK's models;
token reveal and rotation, archiving, certificate checks and limits, unknown ids, scoped keys, and
the 503 of a control plane without a vault."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic.types.beta import BetaTunnel, BetaTunnelToken
from anthropic.types.beta.tunnels import BetaTunnelCertificate
from cryptography.hazmat.primitives.serialization import Encoding

from control_plane.mcp_tunnels import DEFAULT_BASE_DOMAIN, TunnelService, token_hash
from control_plane.vault import FileKek, Keyring
from tests.support.api_app import Api, assert_complete, utcnow
from tests.support.api_server import serve_api
from tests.support.ca_certs import make_ca


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with serve_api(tmp_path, with_vault=True) as served:
        yield served


async def collect(pager: Any) -> list[Any]:
    return [item async for item in pager]


def service(api: Api, tmp_path: Path) -> TunnelService:
    """The service over the same store and key file, to read routes as the MCP router does."""
    keyring = Keyring(FileKek.load(tmp_path / "vault.kek"))
    return TunnelService(api.store, keyring, utcnow)


async def test_tunnel_lifecycle_and_token(api: Api, tmp_path: Path) -> None:
    tunnels = api.client.beta.tunnels
    first = await tunnels.create(display_name="office network")
    assert isinstance(first, BetaTunnel)
    assert_complete(first)
    assert first.id.startswith("tnl_") and first.archived_at is None
    assert first.display_name == "office network"
    assert first.domain.endswith("." + DEFAULT_BASE_DOMAIN)
    second = await tunnels.create()
    assert_complete(second)
    assert second.display_name is None and second.domain != first.domain

    assert await tunnels.retrieve(first.id) == first
    listed = await collect(tunnels.list(limit=1))
    assert [t.id for t in listed] == [second.id, first.id]  # newest first, a page at a time
    for item in listed:
        assert_complete(item)

    token = await tunnels.reveal_token(first.id)
    assert isinstance(token, BetaTunnelToken)
    assert_complete(token)
    assert token.tunnel_token.startswith("otun_") and len(token.tunnel_token) > 40
    assert await tunnels.reveal_token(first.id) == token  # the same value until rotated
    raw = await api.store.get_resource("tunnel", first.id)
    assert token.tunnel_token not in str(raw.body)  # sealed and hashed, never stored in clear

    rotated = await tunnels.rotate_token(first.id, reason="laptop lost")
    assert_complete(rotated)
    assert rotated.id != token.id and rotated.tunnel_token != token.tunnel_token
    assert await tunnels.reveal_token(first.id) == rotated
    bare = await tunnels.rotate_token(first.id)  # reason is optional
    assert bare.id != rotated.id

    route = await service(api, tmp_path).route_for_domain(first.domain)
    assert route is not None and not route.archived and route.active_certificates == 0
    assert route.grants[token_hash(bare.tunnel_token)] is None  # the current token
    assert route.grants[token_hash(token.tunnel_token)] is not None  # retired: old connections only

    archived = await tunnels.archive(first.id)
    assert_complete(archived)
    assert archived.archived_at is not None
    again = await tunnels.archive(first.id)  # idempotent
    assert again.archived_at == archived.archived_at
    assert [t.id for t in await collect(tunnels.list())] == [second.id]
    everything = await collect(tunnels.list(include_archived=True))
    assert {t.id for t in everything} == {first.id, second.id}
    for call in (lambda: tunnels.reveal_token(first.id), lambda: tunnels.rotate_token(first.id)):
        with pytest.raises(anthropic.BadRequestError, match="archived"):
            await call()
    route = await service(api, tmp_path).route_for_domain(first.domain)
    assert route is not None and route.archived
    assert all(retired is not None for retired in route.grants.values())  # no current token


async def test_certificates(api: Api) -> None:
    tunnel = await api.client.beta.tunnels.create(display_name="certs")
    certs = api.client.beta.tunnels.certificates
    pem, _, parsed = make_ca("First CA")
    added = await certs.create(tunnel.id, ca_certificate_pem=pem)
    assert isinstance(added, BetaTunnelCertificate)
    assert_complete(added)
    assert added.id.startswith("tcrt_") and added.tunnel_id == tunnel.id
    assert added.fingerprint == hashlib.sha256(parsed.public_bytes(Encoding.DER)).hexdigest()
    assert added.expires_at == parsed.not_valid_after_utc
    assert await certs.retrieve(added.id, tunnel_id=tunnel.id) == added
    second = await certs.create(tunnel.id, ca_certificate_pem="# comment\n" + make_ca("Second")[0])
    with pytest.raises(anthropic.BadRequestError, match="2 active certificates"):
        await certs.create(tunnel.id, ca_certificate_pem=make_ca("Third")[0])
    assert [c.id for c in await collect(certs.list(tunnel.id, limit=1))] == [second.id, added.id]

    gone = await certs.archive(added.id, tunnel_id=tunnel.id)
    assert_complete(gone)
    assert gone.archived_at is not None
    assert (await certs.archive(added.id, tunnel_id=tunnel.id)).archived_at == gone.archived_at
    third = await certs.create(tunnel.id, ca_certificate_pem=make_ca("Third")[0])  # room again
    assert {c.id for c in await collect(certs.list(tunnel.id))} == {second.id, third.id}
    listed = await collect(certs.list(tunnel.id, include_archived=True))
    assert {c.id for c in listed} == {added.id, second.id, third.id}

    other = await api.client.beta.tunnels.create()
    with pytest.raises(anthropic.NotFoundError):
        await certs.retrieve(second.id, tunnel_id=other.id)  # another tunnel's certificate
    with pytest.raises(anthropic.NotFoundError):
        await certs.archive(second.id, tunnel_id=other.id)

    await api.client.beta.tunnels.archive(tunnel.id)
    assert all(c.archived_at is not None for c in await collect(certs.list(tunnel.id, include_archived=True)))
    with pytest.raises(anthropic.BadRequestError, match="archived"):
        await certs.create(tunnel.id, ca_certificate_pem=pem)


async def test_hostile_certificates_are_refused(api: Api) -> None:
    tunnel = await api.client.beta.tunnels.create()
    certs = api.client.beta.tunnels.certificates
    pem, key_pem, _ = make_ca()
    rsa_header = "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n"
    broken = "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n"
    public_key = "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"
    bad = {
        "private key": (pem + key_pem, "private-key"),
        "a key alone": (key_pem, "private-key"),
        "an RSA key header": (pem + rsa_header, "private-key"),
        "two certificates": (pem + make_ca("Other")[0], "exactly one CERTIFICATE"),
        "too large": (pem + "#" * 8200, "at most 8192 bytes"),
        "garbage": ("hello, world", "not a PEM"),
        "a broken body": (broken, "valid X.509"),
        "empty": ("", "not a PEM"),
        "a public key": (public_key, "exactly one"),
    }
    for what, (text, message) in bad.items():
        with pytest.raises(anthropic.BadRequestError, match=message) as caught:
            await certs.create(tunnel.id, ca_certificate_pem=text)
        assert caught.value.status_code == 400, what
        assert key_pem not in str(caught.value.body)  # the key is never echoed
    assert await collect(certs.list(tunnel.id, include_archived=True)) == []
    response = await api.http.post(f"/v1/tunnels/{tunnel.id}/certificates", json={"pem": pem})
    assert response.status_code == 400  # unknown field, required one missing


async def test_racing_adds_never_make_a_third_active_certificate(api: Api) -> None:
    tunnel = await api.client.beta.tunnels.create()
    certs = api.client.beta.tunnels.certificates
    pems = [make_ca(f"CA {i}")[0] for i in range(6)]

    async def add(pem: str) -> bool:
        try:
            await certs.create(tunnel.id, ca_certificate_pem=pem)
        except anthropic.APIStatusError as exc:
            assert exc.status_code in (400, 409)
            return False
        return True

    outcomes = await asyncio.gather(*(add(p) for p in pems))
    assert sum(outcomes) == 2
    assert len(await collect(certs.list(tunnel.id, include_archived=True))) == 2


async def test_bad_input_and_unknown_ids(api: Api) -> None:
    tunnels = api.client.beta.tunnels
    for name in ("", "x" * 256, "bad\x00name"):
        with pytest.raises(anthropic.BadRequestError):
            await tunnels.create(display_name=name)
    tunnel = await tunnels.create()
    with pytest.raises(anthropic.BadRequestError):
        await tunnels.rotate_token(tunnel.id, reason="r" * 2000)
    with pytest.raises(anthropic.BadRequestError):
        await tunnels.list(limit=1001)
    calls: list[Callable[[], Awaitable[Any]]] = [
        lambda: tunnels.retrieve("tnl_nope"),
        lambda: tunnels.archive("tnl_nope"),
        lambda: tunnels.reveal_token("tnl_nope"),
        lambda: tunnels.rotate_token("tnl_nope"),
        lambda: tunnels.certificates.list("tnl_nope"),
        lambda: tunnels.certificates.create("tnl_nope", ca_certificate_pem=make_ca()[0]),
        lambda: tunnels.certificates.retrieve("tcrt_nope", tunnel_id=tunnel.id),
        lambda: tunnels.certificates.archive("tcrt_nope", tunnel_id=tunnel.id),
    ]
    for call in calls:
        with pytest.raises(anthropic.NotFoundError):
            await call()


async def test_scoped_and_read_only_keys(api: Api) -> None:
    tunnel = await api.client.beta.tunnels.create(display_name="shared")
    cert = await api.client.beta.tunnels.certificates.create(tunnel.id, ca_certificate_pem=make_ca()[0])
    env = await api.environment()
    for body in ({"scope": "read_write", "environment_ids": [env]}, {"scope": "read_only"}):
        response = await api.http.post("/v1/api_keys", json={"name": "limited", **body})
        assert response.status_code == 200, response.text
        key = response.json()["key"]
        async with anthropic.AsyncAnthropic(
            base_url=api.url, api_key=key, max_retries=0, timeout=20
        ) as client:
            assert (await client.beta.tunnels.retrieve(tunnel.id)).id == tunnel.id  # reads: any key
            assert len(await collect(client.beta.tunnels.certificates.list(tunnel.id))) == 1
            refused: list[Callable[[], Awaitable[Any]]] = [
                lambda: client.beta.tunnels.create(display_name="mine"),
                lambda: client.beta.tunnels.reveal_token(tunnel.id),
                lambda: client.beta.tunnels.rotate_token(tunnel.id),
                lambda: client.beta.tunnels.archive(tunnel.id),
                lambda: client.beta.tunnels.certificates.create(tunnel.id, ca_certificate_pem=make_ca()[0]),
                lambda: client.beta.tunnels.certificates.archive(cert.id, tunnel_id=tunnel.id),
            ]
            for call in refused:
                with pytest.raises(anthropic.PermissionDeniedError):
                    await call()
    async with anthropic.AsyncAnthropic(base_url=api.url, api_key="sk-wrong", max_retries=0) as stranger:
        with pytest.raises(anthropic.AuthenticationError):
            await stranger.beta.tunnels.reveal_token(tunnel.id)


async def test_without_a_vault_the_routes_answer_503(tmp_path: Path) -> None:
    async with serve_api(tmp_path) as plain:
        with pytest.raises(anthropic.APIStatusError) as caught:
            await plain.client.beta.tunnels.create()
        assert caught.value.status_code == 503
        assert "vault" in str(caught.value.message)
