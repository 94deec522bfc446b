"""The rules of API keys: who may hold which scope, for which environments, until when; and that
the last active admin key is never revoked (it is rotated instead).

The HTTP layer checks that the caller holds an admin key before it calls any of these."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, Protocol

from control_plane.access_keys import KeyScope, create_api_key
from control_plane.environments.service import get_environment
from control_plane.errors import Conflict, InvalidRequest
from control_plane.store.base import ApiKeyRecord, Identity, Resources

__all__ = ["ApiKeyService", "CreateApiKey", "KeyStore", "key_status"]


class KeyStore(Identity, Resources, Protocol):
    """The store roles the key service uses (keys are identity records; environments resources)."""


def key_status(record: ApiKeyRecord, now: datetime) -> Literal["active", "expired", "revoked"]:
    if record.revoked_at is not None:
        return "revoked"
    if record.expires_at is not None and record.expires_at <= now:
        return "expired"
    return "active"


@dataclass(frozen=True, slots=True)
class CreateApiKey:
    """A new key: ``environment_ids`` ``None`` = every environment (the only choice for admin
    keys); ``ttl_s`` or ``expires_at`` (not both; neither: until revoked)."""

    name: str
    scope: KeyScope = KeyScope.READ_ONLY
    environment_ids: Sequence[str] | None = None
    ttl_s: int | None = None
    expires_at: datetime | None = None


class ApiKeyService:
    """``forget``: told the id of each revoked key (the process's key cache drops it at once)."""

    def __init__(
        self,
        store: KeyStore,
        clock: Callable[[], datetime],
        *,
        forget: Callable[[str], None] | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._forget = forget

    def now(self) -> datetime:
        return self._clock()

    async def create(self, command: CreateApiKey) -> tuple[str, ApiKeyRecord]:
        """The secret (shown once) and the stored record."""
        now = self._clock()
        if command.scope is KeyScope.ADMIN and command.environment_ids is not None:
            raise InvalidRequest(
                "environment_ids: admin keys see every environment; limit a read_write or read_only key",
                param="environment_ids",
            )
        if command.ttl_s is not None and command.expires_at is not None:
            raise InvalidRequest("give ttl_s or expires_at, not both", param="expires_at")
        expires_at = command.expires_at
        if command.ttl_s is not None:
            expires_at = now + timedelta(seconds=command.ttl_s)
        if expires_at is not None and expires_at <= now:
            raise InvalidRequest("expires_at: must be in the future", param="expires_at")
        environment_ids = None if command.environment_ids is None else list(command.environment_ids)
        for environment_id in environment_ids or ():
            await get_environment(self._store, environment_id)  # EnvironmentNotFound if unknown
        return await create_api_key(
            self._store,
            command.name,
            now,
            scope=command.scope,
            environment_ids=environment_ids,
            expires_at=expires_at,
        )

    async def list_keys(self) -> list[ApiKeyRecord]:
        """Every key, oldest first."""
        return await self._store.list_api_keys()

    async def get(self, key_id: str) -> ApiKeyRecord:
        return await self._store.get_api_key(key_id)

    async def revoke(self, key_id: str) -> ApiKeyRecord:
        """Refused (409) for the last active admin key: it is rotated instead."""
        now = self._clock()
        target = await self._store.get_api_key(key_id)
        if target.scope == KeyScope.ADMIN and key_status(target, now) == "active":
            others = [
                k
                for k in await self._store.list_api_keys()
                if k.id != key_id and k.scope == KeyScope.ADMIN and key_status(k, now) == "active"
            ]
            if not others:
                raise Conflict(
                    f"API key {key_id} is the last active admin key; rotate it instead "
                    "(outpost-control api-keys rotate-admin)"
                )
        revoked = await self._store.revoke_api_key(key_id, now)
        if self._forget is not None:
            self._forget(key_id)
        return revoked
