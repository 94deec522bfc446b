"""``VaultService``: secrets sealed at rest and bound to their row, update rules, archive purges,
and key rotation (re-wrap only, resumable)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from control_plane.errors import Conflict, InvalidRequest, NotFound
from control_plane.outbound import OutboundGuard
from control_plane.store import MemoryStore
from control_plane.vault import DecryptionFailed, FileKek, Keyring, VaultService
from control_plane.vault.params import CredentialUpdate, VaultCreate, VaultUpdate
from control_plane.vault.service import CREDENTIAL_KIND, MAX_CREDENTIALS_PER_VAULT, ROTATION_KIND
from tests.support.vault import Clock, env_var, mcp_oauth, static_bearer


@pytest.fixture
async def store() -> AsyncIterator[MemoryStore]:
    s = MemoryStore()
    yield s
    await s.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def service(store: MemoryStore, clock: Clock) -> VaultService:
    return VaultService(store, Keyring(FileKek.generate()), clock)


async def _vault(service: VaultService) -> str:
    return (await service.create_vault(VaultCreate(display_name="alice"))).id


def _update(auth: dict[str, object] | None = None, **fields: object) -> CredentialUpdate:
    body = dict(fields)
    if auth is not None:
        body["auth"] = auth
    return CredentialUpdate.model_validate(body)


async def test_secrets_are_sealed_at_rest(service: VaultService) -> None:
    vault_id = await _vault(service)
    created = [
        await service.create_credential(vault_id, static_bearer(token="sb-PLAINTEXT")),
        await service.create_credential(
            vault_id, mcp_oauth(access_token="at-PLAINTEXT", refresh_token="rt-PLAINTEXT")
        ),
        await service.create_credential(vault_id, env_var("ev-PLAINTEXT", hosts=["api.example.com"])),
    ]
    for res in created:
        stored = json.dumps(res.body)
        assert "PLAINTEXT" not in stored
        assert set(res.body["sealed"]) == {"key_id", "wrapped_dek", "nonce", "ciphertext"}
    assert await service.cipher.open(created[0]) == {"token": "sb-PLAINTEXT"}
    assert await service.cipher.open(created[1]) == {
        "access_token": "at-PLAINTEXT",
        "refresh_token": "rt-PLAINTEXT",
        "client_secret": "cs-secret",
    }
    assert await service.cipher.open(created[2]) == {"secret_value": "ev-PLAINTEXT"}
    assert created[1].body["has_refresh_token"] is True
    assert created[2].body["upstream"] == "hosts:api.example.com"


async def test_a_ciphertext_moved_to_another_row_fails(
    service: VaultService, store: MemoryStore, clock: Clock
) -> None:
    vault_id = await _vault(service)
    other_vault = await _vault(service)
    a = await service.create_credential(vault_id, static_bearer("https://a.example/mcp", "token-a"))
    b = await service.create_credential(vault_id, static_bearer("https://b.example/mcp", "token-b"))
    c = await service.create_credential(other_vault, static_bearer("https://a.example/mcp", "token-c"))
    for victim in (b, c):
        moved = await store.update_resource(
            CREDENTIAL_KIND, victim.id, {**victim.body, "sealed": a.body["sealed"]}, clock()
        )
        with pytest.raises(DecryptionFailed):
            await service.cipher.open(moved)
    # Re-pointing a row at another server in the database breaks it too.
    a = await store.get_resource(CREDENTIAL_KIND, a.id)
    edited = {**a.body, "auth": {**a.body["auth"], "mcp_server_url": "https://evil.example/mcp"}}
    with pytest.raises(DecryptionFailed):
        await service.cipher.open(await store.update_resource(CREDENTIAL_KIND, a.id, edited, clock()))
    # ... and so does re-pointing the token endpoint of an OAuth credential.
    o = await service.create_credential(vault_id, mcp_oauth())
    refresh = {**o.body["auth"]["refresh"], "token_endpoint": "https://evil.example/token"}
    edited = {**o.body, "auth": {**o.body["auth"], "refresh": refresh}}
    with pytest.raises(DecryptionFailed):
        await service.cipher.open(await store.update_resource(CREDENTIAL_KIND, o.id, edited, clock()))


async def test_vault_update_and_archive(service: VaultService) -> None:
    vault = await service.create_vault(VaultCreate(display_name="alice", metadata={"a": "1", "b": "2"}))
    updated = await service.update_vault(
        vault.id, VaultUpdate.model_validate({"display_name": "bob", "metadata": {"a": None, "c": "3"}})
    )
    assert updated.body == {"display_name": "bob", "metadata": {"b": "2", "c": "3"}}
    assert await service.update_vault(vault.id, VaultUpdate()) == updated  # no change, no new version
    with pytest.raises(InvalidRequest):
        await service.update_vault(vault.id, VaultUpdate.model_validate({"display_name": None}))
    await service.archive_vault(vault.id)
    with pytest.raises(InvalidRequest, match="archived"):
        await service.update_vault(vault.id, VaultUpdate(display_name="x"))


async def test_one_active_credential_per_server_url(service: VaultService) -> None:
    vault_id = await _vault(service)
    first = await service.create_credential(vault_id, static_bearer("https://mcp.example.com/mcp"))
    for duplicate in (
        static_bearer("HTTPS://MCP.example.com:443/mcp"),
        mcp_oauth(url="https://mcp.example.com/mcp"),
    ):
        with pytest.raises(Conflict):
            await service.create_credential(vault_id, duplicate)
    await service.create_credential(vault_id, static_bearer("https://mcp.example.com/mcp/"))  # another path
    await service.create_credential(await _vault(service), static_bearer("https://mcp.example.com/mcp"))
    await service.archive_credential(vault_id, first.id)
    await service.create_credential(vault_id, static_bearer("https://mcp.example.com/mcp"))


async def test_at_most_20_active_credentials(service: VaultService) -> None:
    vault_id = await _vault(service)
    for i in range(MAX_CREDENTIALS_PER_VAULT):
        await service.create_credential(vault_id, static_bearer(f"https://mcp.example.com/{i}"))
    with pytest.raises(InvalidRequest, match="20"):
        await service.create_credential(vault_id, env_var())


async def test_bad_create_requests(service: VaultService, clock: Clock) -> None:
    vault_id = await _vault(service)
    for url in ("ftp://x.example/", "https://user:pw@x.example/", "https:///nohost", "not a url"):
        with pytest.raises(InvalidRequest):
            await service.create_credential(vault_id, static_bearer(url))
    with pytest.raises(InvalidRequest, match="future"):
        await service.create_credential(vault_id, mcp_oauth(expires_at=clock.now - timedelta(seconds=1)))
    with pytest.raises(InvalidRequest, match="https"):
        await service.create_credential(vault_id, mcp_oauth(token_endpoint="http://auth.example.com/token"))
    # Loopback is refused by the outbound rules unless the operator allows it; then plain http is
    # accepted there (and only there).
    with pytest.raises(InvalidRequest, match=r"rule: outbound\.loopback"):
        await service.create_credential(vault_id, mcp_oauth(token_endpoint="http://127.0.0.1:9/token"))
    allowing = VaultService(service.store, service.keyring, clock, outbound=OutboundGuard(["127.0.0.0/8"]))
    await allowing.create_credential(vault_id, mcp_oauth(token_endpoint="http://127.0.0.1:9/token"))
    for hosts in (
        ["https://api.example.com"],
        ["api.example.com:443"],
        ["::1"],
        ["*.1.2.3.4"],
        ["300.1.1.1"],
    ):
        with pytest.raises(InvalidRequest):
            await service.create_credential(vault_id, env_var(hosts=hosts))
    with pytest.raises(NotFound):
        await service.create_credential("vlt_nope", static_bearer())


async def test_static_bearer_update(service: VaultService) -> None:
    vault_id = await _vault(service)
    res = await service.create_credential(vault_id, static_bearer(token="one"))
    new = await service.update_credential(
        vault_id, res.id, _update({"type": "static_bearer", "token": "two"})
    )
    assert await service.cipher.open(new) == {"token": "two"}
    assert new.body["sealed"]["wrapped_dek"] != res.body["sealed"]["wrapped_dek"]  # a fresh data key
    with pytest.raises(InvalidRequest, match=r"auth\.type"):
        await service.update_credential(vault_id, res.id, _update({"type": "mcp_oauth"}))
    with pytest.raises(InvalidRequest, match="mcp_server_url"):
        await service.update_credential(
            vault_id, res.id, _update({"type": "static_bearer", "mcp_server_url": "https://other.example/"})
        )
    same = await service.update_credential(
        vault_id,
        res.id,
        _update({"type": "static_bearer", "mcp_server_url": res.body["auth"]["mcp_server_url"]}),
    )
    assert same.version == new.version  # nothing changed
    named = await service.update_credential(vault_id, res.id, _update(display_name="n", metadata={"k": "v"}))
    assert (named.body["display_name"], named.body["metadata"]) == ("n", {"k": "v"})
    with pytest.raises(NotFound):
        await service.update_credential(await _vault(service), res.id, _update(display_name="x"))


async def test_mcp_oauth_update_rules(service: VaultService, clock: Clock) -> None:
    vault_id = await _vault(service)
    expiry = clock.now + timedelta(hours=1)
    res = await service.create_credential(vault_id, mcp_oauth(expires_at=expiry))
    kept = await service.update_credential(
        vault_id, res.id, _update({"type": "mcp_oauth", "access_token": "at-2"})
    )
    assert kept.body["auth"]["expires_at"] == res.body["auth"]["expires_at"]
    assert (await service.cipher.open(kept))["access_token"] == "at-2"
    changed = await service.update_credential(
        vault_id,
        res.id,
        _update(
            {
                "type": "mcp_oauth",
                "refresh": {
                    "scope": "",
                    "refresh_token": "rt-2",
                    "token_endpoint_auth": {"type": "client_secret_post", "client_secret": "cs-2"},
                },
            }
        ),
    )
    refresh = changed.body["auth"]["refresh"]
    assert refresh["scope"] is None
    assert refresh["token_endpoint_auth"] == {"type": "client_secret_basic"}  # the stored type is kept
    assert await service.cipher.open(changed) == {
        "access_token": "at-2",
        "refresh_token": "rt-2",
        "client_secret": "cs-2",
    }
    with pytest.raises(InvalidRequest, match="client_id"):
        await service.update_credential(
            vault_id, res.id, _update({"type": "mcp_oauth", "refresh": {"client_id": "other"}})
        )
    removed = await service.update_credential(
        vault_id, res.id, _update({"type": "mcp_oauth", "refresh": None})
    )
    assert removed.body["auth"]["refresh"] is None
    assert removed.body["has_refresh_token"] is False
    assert await service.cipher.open(removed) == {"access_token": "at-2"}
    with pytest.raises(InvalidRequest, match="no refresh configuration"):
        await service.update_credential(
            vault_id, res.id, _update({"type": "mcp_oauth", "refresh": {"scope": "x"}})
        )
    cleared = await service.update_credential(
        vault_id, res.id, _update({"type": "mcp_oauth", "expires_at": None})
    )
    assert cleared.body["auth"]["expires_at"] is None
    none_auth = await service.create_credential(vault_id, mcp_oauth(url="https://n.example/", method="none"))
    with pytest.raises(InvalidRequest, match="client secret"):
        await service.update_credential(
            vault_id,
            none_auth.id,
            _update(
                {
                    "type": "mcp_oauth",
                    "refresh": {"token_endpoint_auth": {"type": "client_secret_basic", "client_secret": "x"}},
                }
            ),
        )


async def test_environment_variable_update_rebinds(service: VaultService) -> None:
    vault_id = await _vault(service)
    res = await service.create_credential(vault_id, env_var("v1", hosts=["api.example.com"]))
    assert res.body["auth"]["injection_location"] == {"header": True, "body": False}
    moved = await service.update_credential(
        vault_id,
        res.id,
        _update(
            {
                "type": "environment_variable",
                "networking": {"type": "limited", "allowed_hosts": ["*.Example.com", "10.0.0.1"]},
            }
        ),
    )
    assert moved.body["upstream"] == "hosts:*.example.com,10.0.0.1"
    assert await service.cipher.open(moved) == {"secret_value": "v1"}  # re-sealed for the new binding
    with pytest.raises(InvalidRequest, match="secret_name"):
        await service.update_credential(
            vault_id, res.id, _update({"type": "environment_variable", "secret_name": "OTHER"})
        )
    with pytest.raises(InvalidRequest, match="at least one"):
        await service.update_credential(
            vault_id,
            res.id,
            _update({"type": "environment_variable", "injection_location": {"header": False}}),
        )
    both = await service.update_credential(
        vault_id, res.id, _update({"type": "environment_variable", "injection_location": {"body": True}})
    )
    assert both.body["auth"]["injection_location"] == {"header": True, "body": True}


async def test_archive_purges_and_freezes(service: VaultService, store: MemoryStore) -> None:
    vault_id = await _vault(service)
    res = await service.create_credential(vault_id, static_bearer())
    archived = await service.archive_credential(vault_id, res.id)
    assert archived.archived_at is not None
    assert archived.body["sealed"] is None
    with pytest.raises(DecryptionFailed):
        await service.cipher.open(archived)
    with pytest.raises(InvalidRequest, match="archived"):
        await service.update_credential(vault_id, res.id, _update(display_name="x"))


async def test_archive_and_delete_vault_cascade(service: VaultService, store: MemoryStore) -> None:
    vault_id = await _vault(service)
    ids = [
        (await service.create_credential(vault_id, static_bearer(f"https://m.example/{i}"))).id
        for i in range(3)
    ]
    keep = await _vault(service)
    other = await service.create_credential(keep, static_bearer())
    await service.archive_vault(vault_id)
    for cid in ids:
        res = await store.get_resource(CREDENTIAL_KIND, cid)
        assert res.archived_at is not None
        assert res.body["sealed"] is None
    with pytest.raises(InvalidRequest):
        await service.create_credential(vault_id, env_var())
    await service.delete_vault(vault_id)
    for cid in ids:
        with pytest.raises(NotFound):
            await store.get_resource(CREDENTIAL_KIND, cid)
    assert (await store.get_resource(CREDENTIAL_KIND, other.id)).archived_at is None


# -- rotation -------------------------------------------------------------------------------------


class CountingKek:
    """Wraps a FileKek; counts successful wraps; can fail after ``fail_after`` of them (a crash)."""

    def __init__(self, inner: FileKek, fail_after: int | None = None) -> None:
        self.inner = inner
        self.fail_after = fail_after
        self.wraps = 0

    @property
    def key_id(self) -> str:
        return self.inner.key_id

    async def wrap(self, data_key: bytes, aad: bytes) -> bytes:
        if self.fail_after is not None and self.wraps >= self.fail_after:
            raise RuntimeError("simulated crash during rotation")
        self.wraps += 1
        return await self.inner.wrap(data_key, aad)

    async def unwrap(self, wrapped: bytes, aad: bytes) -> bytes:
        return await self.inner.unwrap(wrapped, aad)


async def _populate(service: VaultService, count: int) -> tuple[str, list[str]]:
    vault_id = await _vault(service)
    ids = [
        (await service.create_credential(vault_id, static_bearer(f"https://m.example/{i}", f"tok-{i}"))).id
        for i in range(count)
    ]
    return vault_id, ids


async def test_rotation_rewraps_and_the_old_key_can_go(
    service: VaultService, store: MemoryStore, clock: Clock
) -> None:
    old = service.keyring.current
    vault_id, ids = await _populate(service, 7)
    await service.archive_credential(vault_id, ids.pop())  # nothing to re-wrap in an archived one
    before = {cid: await store.get_resource(CREDENTIAL_KIND, cid) for cid in ids}
    clock.advance(60)
    new = FileKek.generate()
    report = await service.rotate(new, batch_size=4)
    assert (report.key_id, report.rewrapped, report.already_current, report.without_secret) == (
        new.key_id,
        6,
        0,
        1,
    )
    assert await service.key_usage() == {new.key_id: 6}
    service.keyring.retire(old.key_id)
    for cid, res in before.items():
        after = await store.get_resource(CREDENTIAL_KIND, cid)
        assert after.body["sealed"]["ciphertext"] == res.body["sealed"]["ciphertext"]  # not re-encrypted
        assert after.body["sealed"]["wrapped_dek"] != res.body["sealed"]["wrapped_dek"]
        assert after.updated_at == res.updated_at  # a re-wrap is not a visible change
        assert (await service.cipher.open(after))["token"].startswith("tok-")
    # A keyring without the old key decrypts everything (a fresh process after rotation).
    fresh = VaultService(store, Keyring(new), clock)
    for cid in ids:
        await fresh.cipher.open(await store.get_resource(CREDENTIAL_KIND, cid))
    progress = await store.get_resource(ROTATION_KIND, new.key_id)
    assert progress.body["run"] == {"rewrapped": 6, "current": 0, "none": 1, "failed": 0}
    assert progress.body["completed_at"] is not None
    # New credentials are sealed with the new key.
    created = await service.create_credential(vault_id, static_bearer("https://new.example/"))
    assert created.body["sealed"]["key_id"] == new.key_id


async def test_rotation_is_resumable(service: VaultService, store: MemoryStore, clock: Clock) -> None:
    old = service.keyring.current
    _, ids = await _populate(service, 9)
    target = FileKek.generate()
    crashing = CountingKek(target, fail_after=4)
    with pytest.raises(RuntimeError, match="simulated crash"):
        await service.rotate(crashing, batch_size=3)
    assert await service.key_usage() == {target.key_id: 4, old.key_id: 5}
    progress = await store.get_resource(ROTATION_KIND, target.key_id)
    assert progress.body["completed_at"] is None
    assert progress.body["run"] == {"rewrapped": 3, "current": 0, "none": 0, "failed": 0}  # first batch
    # A restarted process (both keys configured) runs it again: only the rest is re-wrapped.
    resumed = VaultService(store, Keyring(old), clock)
    counting = CountingKek(target)
    report = await resumed.rotate(counting, batch_size=3)
    assert (report.rewrapped, report.already_current) == (5, 4)
    assert counting.wraps == 5  # each data key re-wrapped exactly once over both runs
    assert await resumed.key_usage() == {target.key_id: 9}
    again = await resumed.rotate(counting, batch_size=3)  # idempotent
    assert (again.rewrapped, again.already_current) == (0, 9)
    done = VaultService(store, Keyring(target), clock)
    for cid in ids:
        await done.cipher.open(await store.get_resource(CREDENTIAL_KIND, cid))
    progress = await store.get_resource(ROTATION_KIND, target.key_id)
    assert progress.body["runs"] == 3
    assert progress.body["run"] == {"rewrapped": 0, "current": 9, "none": 0, "failed": 0}
    assert progress.body["completed_at"] is not None


async def test_rotation_reports_a_tampered_row_and_goes_on(
    service: VaultService, store: MemoryStore, clock: Clock
) -> None:
    _, ids = await _populate(service, 3)
    res = await store.get_resource(CREDENTIAL_KIND, ids[1])
    moved = {**res.body, "auth": {**res.body["auth"], "mcp_server_url": "https://evil.example/"}}
    await store.update_resource(CREDENTIAL_KIND, ids[1], moved, clock())
    new = FileKek.generate()
    report = await service.rotate(new)
    assert (report.rewrapped, report.failed, report.complete) == (2, (ids[1],), False)
    progress = await store.get_resource(ROTATION_KIND, new.key_id)
    assert progress.body["completed_at"] is None
