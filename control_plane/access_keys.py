"""API keys as the domain knows them: their scopes, how a key is hashed, made and judged usable.

Below the HTTP layer: ``control_plane.api.auth`` (the gate and the routes' dependency),
``control_plane.api.caller`` (what each scope may do) and ``control_plane.admin_key`` (the data
directory's admin key) all build on it. Keys are stored as sha256 hashes only; the plaintext is
returned once, when the key is made."""

from __future__ import annotations

import enum
import hashlib
import secrets
from collections.abc import Collection
from datetime import datetime

from control_plane.store.base import ApiKeyRecord, Identity

__all__ = ["KEY_PREFIX", "KeyScope", "create_api_key", "hash_key", "new_api_key", "usable"]

KEY_PREFIX = "sk-outpost-"


class KeyScope(enum.StrEnum):
    ADMIN = "admin"
    READ_WRITE = "read_write"
    READ_ONLY = "read_only"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_api_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def usable(record: ApiKeyRecord, now: datetime) -> bool:
    """Neither revoked nor expired at ``now``."""
    return record.revoked_at is None and (record.expires_at is None or record.expires_at > now)


async def create_api_key(
    store: Identity,
    name: str,
    now: datetime,
    *,
    scope: KeyScope = KeyScope.ADMIN,
    environment_ids: Collection[str] | None = None,
    expires_at: datetime | None = None,
) -> tuple[str, ApiKeyRecord]:
    """Make a key; the plaintext is returned once and never stored."""
    key = new_api_key()
    record = ApiKeyRecord(
        id="apikey_" + secrets.token_hex(12),
        name=name,
        key_hash=hash_key(key),
        created_at=now,
        scope=scope.value,
        environment_ids=None if environment_ids is None else tuple(dict.fromkeys(environment_ids)),
        expires_at=expires_at,
    )
    await store.create_api_key(record)
    return key, record
