"""``VaultService``: vaults and their credentials in the store, secrets sealed at rest.

Stored bodies (the store's ``Resource.body``):

* kind ``vault``: ``{"display_name", "metadata"}``
* kind ``vault_credential``::

    {"vault_id", "display_name", "metadata",
     "auth":     <public fields only: what the API returns>,
     "upstream": <normalized MCP server URL, or "hosts:" + canonical hosts>,   (for lookups)
     "has_refresh_token": bool,
     "sealed":   {"key_id", "wrapped_dek", "nonce", "ciphertext"} | null,     (null once archived)
     "refresh_claim": {"holder", "until"} | absent}                          (see ``oauth``)

* kind ``vault_key_rotation`` (id = the new key's ``key_id``): progress of :meth:`rotate`.

Rules: one active ``static_bearer``/``mcp_oauth`` credential per MCP server URL per vault (a second
one is a 409); at most 20 active credentials per vault; an archived vault or credential cannot be
changed. Archiving a credential *purges* its sealed secret (crypto-shredding: nothing is left to
decrypt); archiving a vault archives its credentials; deleting a vault deletes them. Only an active
``mcp_oauth`` credential can be validated (:meth:`VaultService.validate_credential`): with a
refresh configuration and a refresh token it is refreshed (``valid`` when that succeeds,
``invalid`` when the token endpoint refuses, ``unknown`` when it cannot be reached); without one
the status is ``unknown``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from control_plane.errors import Conflict, InvalidRequest, NotFound, VersionConflict
from control_plane.metadata import apply_metadata_patch, check_metadata
from control_plane.outbound import OutboundGuard
from control_plane.store.base import Order, Page, Resource, Resources
from control_plane.vault.auth_rules import AuthChange, apply_auth_update, new_auth
from control_plane.vault.binding import credential_aad, upstream_of
from control_plane.vault.cipher import CredentialCipher
from control_plane.vault.errors import DecryptionFailed
from control_plane.vault.keys import KeyEncryptionKey, Keyring
from control_plane.vault.oauth import OAuthRefresher
from control_plane.vault.params import CredentialCreate, CredentialUpdate, VaultCreate, VaultUpdate

__all__ = [
    "CREDENTIAL_KIND",
    "MAX_CREDENTIALS_PER_VAULT",
    "ROTATION_KIND",
    "VAULT_KIND",
    "CredentialValidation",
    "RotationReport",
    "VaultService",
    "new_credential_id",
    "new_vault_id",
]

log = logging.getLogger(__name__)

VAULT_KIND = "vault"
CREDENTIAL_KIND = "vault_credential"
ROTATION_KIND = "vault_key_rotation"
MAX_CREDENTIALS_PER_VAULT = 20
_UPDATE_ATTEMPTS = 5
_MCP_TYPES = frozenset({"static_bearer", "mcp_oauth"})
_VALIDATION_STATUS = {
    "succeeded": "valid",
    "failed": "invalid",
    "no_refresh_token": "invalid",
    "connect_error": "unknown",
}


def new_vault_id() -> str:
    return "vlt_" + secrets.token_hex(12)


def new_credential_id() -> str:
    return "vcrd_" + secrets.token_hex(12)


@dataclass(frozen=True, slots=True)
class RotationReport:
    key_id: str  # the key every data key is now wrapped with
    rewrapped: int  # data keys re-wrapped by this run
    already_current: int  # credentials found wrapped with ``key_id`` already (an earlier run)
    without_secret: int  # archived credentials: nothing to re-wrap
    failed: tuple[str, ...] = ()  # credentials whose data key did not authenticate (left as they are)

    @property
    def complete(self) -> bool:
        return not self.failed


@dataclass(frozen=True, slots=True)
class CredentialValidation:
    """Outcome of :meth:`VaultService.validate_credential`."""

    status: str  # valid | invalid | unknown
    refresh: dict[str, Any]  # {"status": <RefreshResult.status>, "http_response": summary | None}
    has_refresh_token: bool  # after the refresh
    validated_at: datetime


class VaultService:
    def __init__(
        self,
        store: Resources,
        keyring: Keyring,
        clock: Callable[[], datetime],
        *,
        outbound: OutboundGuard | None = None,
    ) -> None:
        """``outbound``: the check of the URLs a credential names (default: no private networks)."""
        self.store = store
        self.outbound = outbound or OutboundGuard()
        self.cipher = CredentialCipher(keyring)
        self.clock = clock
        self._vault_locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    @property
    def keyring(self) -> Keyring:
        return self.cipher.keyring

    # -- vaults -----------------------------------------------------------------------------------

    async def create_vault(self, params: VaultCreate) -> Resource:
        body = {"display_name": params.display_name, "metadata": check_metadata(params.metadata)}
        return await self.store.create_resource(VAULT_KIND, new_vault_id(), body, self.clock())

    async def get_vault(self, vault_id: str) -> Resource:
        return await self.store.get_resource(VAULT_KIND, vault_id)

    async def update_vault(self, vault_id: str, params: VaultUpdate) -> Resource:
        sent = params.model_fields_set
        for _ in range(_UPDATE_ATTEMPTS):
            current = await self._usable_vault(vault_id)
            new = dict(current.body)
            if "display_name" in sent:
                if params.display_name is None:
                    raise InvalidRequest("display_name cannot be cleared", param="display_name")
                new["display_name"] = params.display_name
            if "metadata" in sent:
                new["metadata"] = apply_metadata_patch(current.body.get("metadata", {}), params.metadata)
            if new == current.body:
                return current
            try:
                return await self.store.update_resource(
                    VAULT_KIND, vault_id, new, self.clock(), expected_version=current.version
                )
            except VersionConflict:
                continue
        raise Conflict(f"vault {vault_id!r} kept changing during the update; retry")

    async def list_vaults(self, *, include_archived: bool, limit: int, cursor: str | None) -> Page:
        return await self.store.list_resources(
            VAULT_KIND, include_archived=include_archived, limit=limit, cursor=cursor
        )

    async def archive_vault(self, vault_id: str) -> Resource:
        """Archive the vault and every credential in it (their secrets are purged)."""
        await self.get_vault(vault_id)
        while True:
            page = await self.store.list_resources(CREDENTIAL_KIND, filters={"vault_id": vault_id}, limit=100)
            for res in page.items:
                await self._archive_credential(res)
            if not page.items:
                break
        return await self.store.archive_resource(VAULT_KIND, vault_id, self.clock())

    async def delete_vault(self, vault_id: str) -> None:
        """Delete the vault and every credential in it."""
        await self.get_vault(vault_id)
        while True:
            page = await self.store.list_resources(
                CREDENTIAL_KIND, filters={"vault_id": vault_id}, include_archived=True, limit=100
            )
            for res in page.items:
                await self._delete_quietly(CREDENTIAL_KIND, res.id)
            if not page.items:
                break
        await self.store.delete_resource(VAULT_KIND, vault_id)
        log.info("vault %s deleted", vault_id)

    async def _usable_vault(self, vault_id: str) -> Resource:
        res = await self.get_vault(vault_id)
        if res.archived_at is not None:
            raise InvalidRequest(f"vault {vault_id!r} is archived and cannot be changed", param="vault_id")
        return res

    # -- credentials ------------------------------------------------------------------------------

    async def create_credential(self, vault_id: str, params: CredentialCreate) -> Resource:
        now = self.clock()
        change = new_auth(params.auth, now)
        self._check_outbound(change.auth)
        credential_id = new_credential_id()
        lock = self._vault_locks.setdefault(vault_id, asyncio.Lock())
        async with lock:  # one process: the uniqueness and count checks see each other's writes
            await self._usable_vault(vault_id)
            await self._check_room(vault_id, change.auth)
            body: dict[str, Any] = {
                "vault_id": vault_id,
                "display_name": params.display_name or None,
                "metadata": check_metadata(params.metadata),
                **self._public(change.auth, change.set_secrets),
                "sealed": await self.cipher.seal(vault_id, credential_id, change.auth, change.set_secrets),
            }
            res = await self.store.create_resource(CREDENTIAL_KIND, credential_id, body, now)
        log.info("vault %s: credential %s (%s) created", vault_id, credential_id, change.auth["type"])
        return res

    def _check_outbound(self, auth: dict[str, Any]) -> None:
        """The MCP server URL and the token endpoint the control plane would dial: 400 naming
        the outbound rule when they are loopback, private, metadata ... (these never change)."""
        if "mcp_server_url" in auth:
            self.outbound.check_url(auth["mcp_server_url"], param="auth.mcp_server_url")
        refresh = auth.get("refresh")
        if refresh:
            self.outbound.check_url(refresh["token_endpoint"], param="auth.refresh.token_endpoint")

    async def get_credential(self, vault_id: str, credential_id: str) -> Resource:
        res = await self.store.get_resource(CREDENTIAL_KIND, credential_id)
        if res.body.get("vault_id") != vault_id:
            raise NotFound(CREDENTIAL_KIND, credential_id)
        return res

    async def update_credential(
        self, vault_id: str, credential_id: str, params: CredentialUpdate
    ) -> Resource:
        sent = params.model_fields_set
        for _ in range(_UPDATE_ATTEMPTS):
            now = self.clock()
            current = await self.get_credential(vault_id, credential_id)
            if current.archived_at is not None:
                raise InvalidRequest(
                    f"credential {credential_id!r} is archived and cannot be changed", param="credential_id"
                )
            await self._usable_vault(vault_id)
            new = dict(current.body)
            if "display_name" in sent:
                new["display_name"] = params.display_name or None
            if "metadata" in sent:
                new["metadata"] = apply_metadata_patch(current.body.get("metadata", {}), params.metadata)
            if params.auth is not None:
                change = apply_auth_update(current.body["auth"], params.auth, now)
                new.update(await self._resealed(current, change))
            if new == current.body:
                return current
            try:
                res = await self.store.update_resource(
                    CREDENTIAL_KIND, credential_id, new, now, expected_version=current.version
                )
            except VersionConflict:
                continue  # e.g. an OAuth refresh landed meanwhile: apply ours on top of it
            log.info("vault %s: credential %s updated", vault_id, credential_id)
            return res
        raise Conflict(f"credential {credential_id!r} kept changing during the update; retry")

    async def list_credentials(
        self, vault_id: str, *, include_archived: bool, limit: int, cursor: str | None
    ) -> Page:
        await self.get_vault(vault_id)
        return await self.store.list_resources(
            CREDENTIAL_KIND,
            filters={"vault_id": vault_id},
            include_archived=include_archived,
            limit=limit,
            cursor=cursor,
        )

    async def archive_credential(self, vault_id: str, credential_id: str) -> Resource:
        return await self._archive_credential(await self.get_credential(vault_id, credential_id))

    async def delete_credential(self, vault_id: str, credential_id: str) -> None:
        await self.get_credential(vault_id, credential_id)
        await self.store.delete_resource(CREDENTIAL_KIND, credential_id)
        log.info("vault %s: credential %s deleted", vault_id, credential_id)

    async def validate_credential(
        self, vault_id: str, credential_id: str, refresher: OAuthRefresher
    ) -> CredentialValidation:
        """Validate an active ``mcp_oauth`` credential by refreshing it (when it can refresh)."""
        res = await self.get_credential(vault_id, credential_id)
        kind = res.body["auth"]["type"]
        if kind != "mcp_oauth":
            raise InvalidRequest(
                f"credential {credential_id!r} is {kind!r}; only mcp_oauth credentials can be validated",
                param="credential_id",
            )
        if res.archived_at is not None:
            raise InvalidRequest(f"credential {credential_id!r} is archived", param="credential_id")
        refresh: dict[str, Any]
        if res.body["auth"].get("refresh") is None or not res.body.get("has_refresh_token"):
            status, refresh = "unknown", {"status": "no_refresh_token", "http_response": None}
        else:
            result = await refresher.refresh(credential_id)
            status = _VALIDATION_STATUS[result.status]
            refresh = {"status": result.status, "http_response": result.http_response}
        current = await self.get_credential(vault_id, credential_id)
        return CredentialValidation(
            status, refresh, bool(current.body.get("has_refresh_token")), self.clock()
        )

    async def _check_room(self, vault_id: str, auth: dict[str, Any]) -> None:
        active = await self.store.list_resources(
            CREDENTIAL_KIND, filters={"vault_id": vault_id}, limit=MAX_CREDENTIALS_PER_VAULT
        )
        if len(active.items) >= MAX_CREDENTIALS_PER_VAULT:
            raise InvalidRequest(
                f"vault {vault_id!r} holds {MAX_CREDENTIALS_PER_VAULT} active credentials already "
                "(archive or delete one first)",
                param="vault_id",
            )
        if auth["type"] in _MCP_TYPES:
            upstream = upstream_of(auth)
            taken = {r.body.get("upstream") for r in active.items if r.body["auth"]["type"] in _MCP_TYPES}
            if upstream in taken:
                raise Conflict(
                    f"vault {vault_id!r} already has an active credential for {auth['mcp_server_url']!r}; "
                    "archive it or update its token"
                )

    @staticmethod
    def _public(auth: dict[str, Any], payload: dict[str, str]) -> dict[str, Any]:
        """The body fields derived from ``auth`` and the payload's shape (never its values)."""
        return {"auth": auth, "upstream": upstream_of(auth), "has_refresh_token": "refresh_token" in payload}

    async def _resealed(self, current: Resource, change: AuthChange) -> dict[str, Any]:
        """Body fields after an auth change. The payload is opened only when a secret changes or
        the binding (hence the associated data) does; it is then sealed again with a fresh key."""
        vault_id = current.body["vault_id"]
        old_aad = credential_aad(vault_id, current.id, current.body["auth"])
        new_aad = credential_aad(vault_id, current.id, change.auth)
        if not change.set_secrets and not change.drop_secrets and old_aad == new_aad:
            return {"auth": change.auth}
        payload = await self.cipher.open(current)
        payload.update(change.set_secrets)
        for name in change.drop_secrets:
            payload.pop(name, None)
        sealed = await self.cipher.seal(vault_id, current.id, change.auth, payload)
        return {**self._public(change.auth, payload), "sealed": sealed}

    async def _archive_credential(self, res: Resource) -> Resource:
        if res.body.get("sealed") is not None:  # purge first: an archived credential holds no secret
            purged = {k: v for k, v in res.body.items() if k != "refresh_claim"}
            purged["sealed"] = None
            await self.store.update_resource(CREDENTIAL_KIND, res.id, purged, self.clock())
        archived = await self.store.archive_resource(CREDENTIAL_KIND, res.id, self.clock())
        log.info("vault %s: credential %s archived, secret purged", res.body["vault_id"], res.id)
        return archived

    async def _delete_quietly(self, kind: str, id: str) -> None:
        with contextlib.suppress(NotFound):
            await self.store.delete_resource(kind, id)

    # -- key rotation -----------------------------------------------------------------------------

    async def rotate(self, new_kek: KeyEncryptionKey, *, batch_size: int = 100) -> RotationReport:
        """Make ``new_kek`` current and re-wrap every credential's data key with it.

        Only the wrapped data keys change; payload ciphertexts are not re-encrypted and no
        plaintext is produced. Idempotent per credential (one already wrapped with ``new_kek`` is
        skipped), so an interrupted run is resumed by running it again. Progress is recorded after
        every batch in a ``vault_key_rotation`` resource named by the key id. A credential whose
        data key does not authenticate (tampered, corrupt) is reported in ``failed`` and left as
        it is. When a run returns ``complete``, no credential is wrapped with another key any more
        (check with :meth:`key_usage` before retiring a key if other processes may still write
        with an old one)."""
        self.keyring.promote(new_kek)
        progress = await self._rotation_progress(new_kek.key_id)
        counts = {"rewrapped": 0, "current": 0, "none": 0, "failed": 0}
        failed: list[str] = []
        async for page in self._credential_pages(batch_size):
            for res in page:
                try:
                    counts[await self._rewrap_one(res, new_kek)] += 1
                except DecryptionFailed:  # tampered or corrupt: report it, do not block the rest
                    log.error("vault key rotation: credential %s does not authenticate; left as is", res.id)
                    counts["failed"] += 1
                    failed.append(res.id)
            progress = await self._record_rotation(progress, counts)
        await self._record_rotation(progress, counts, completed=not failed)
        log.info("vault key rotation to %s: %d data keys re-wrapped", new_kek.key_id, counts["rewrapped"])
        return RotationReport(
            new_kek.key_id, counts["rewrapped"], counts["current"], counts["none"], tuple(failed)
        )

    async def key_usage(self) -> dict[str, int]:
        """How many credentials each key-encryption key wraps (archived credentials wrap none)."""
        usage: dict[str, int] = {}
        async for page in self._credential_pages(100):
            for res in page:
                sealed = res.body.get("sealed")
                if sealed:
                    usage[sealed["key_id"]] = usage.get(sealed["key_id"], 0) + 1
        return usage

    async def _credential_pages(self, batch_size: int) -> AsyncIterator[list[Resource]]:
        cursor: str | None = None
        while True:
            page = await self.store.list_resources(
                CREDENTIAL_KIND, include_archived=True, limit=batch_size, cursor=cursor, order=Order.ASC
            )
            yield page.items
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def _rewrap_one(self, res: Resource, new_kek: KeyEncryptionKey) -> str:
        for _ in range(_UPDATE_ATTEMPTS):
            sealed = await self.cipher.rewrap(res, new_kek)
            if sealed is None:
                return "none" if not res.body.get("sealed") else "current"
            try:
                # ``now`` = the old ``updated_at``: re-wrapping is not a change anyone made.
                await self.store.update_resource(
                    CREDENTIAL_KIND,
                    res.id,
                    {**res.body, "sealed": sealed},
                    res.updated_at,
                    expected_version=res.version,
                )
                return "rewrapped"
            except VersionConflict:
                try:
                    res = await self.store.get_resource(CREDENTIAL_KIND, res.id)
                except NotFound:
                    return "none"
        raise Conflict(f"credential {res.id!r} kept changing during key rotation; run it again")

    async def _rotation_progress(self, key_id: str) -> Resource:
        body = {"key_id": key_id, "runs": 0, "completed_at": None}
        try:
            res = await self.store.create_resource(ROTATION_KIND, key_id, body, self.clock())
        except Conflict:
            res = await self.store.get_resource(ROTATION_KIND, key_id)
        new = {**res.body, "runs": res.body.get("runs", 0) + 1, "completed_at": None, "run": {}}
        return await self.store.update_resource(ROTATION_KIND, key_id, new, self.clock())

    async def _record_rotation(
        self, progress: Resource, counts: dict[str, int], *, completed: bool = False
    ) -> Resource:
        """``run``: this run's counts so far (``rewrapped``; ``current``: already wrapped with the
        key; ``none``: no secret; ``failed``: did not authenticate); ``completed_at`` once a run
        re-wrapped every credential."""
        now = self.clock()
        body = {**progress.body, "run": dict(counts)}
        if completed:
            body["completed_at"] = now.isoformat()
        return await self.store.update_resource(ROTATION_KIND, progress.id, body, now)
