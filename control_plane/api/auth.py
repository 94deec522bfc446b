"""API-key authentication: ``Authorization: Bearer <key>`` (what the SDK sends) or ``x-api-key``.

Keys are stored as sha256 hashes only; the presented key is hashed and looked up, and the stored
hash is compared in constant time. A missing or unknown key is a 401 in the SDK's error shape.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime

from fastapi import Request

from control_plane.api.errors import ApiError
from control_plane.store.base import ApiKeyRecord, Store

__all__ = ["ApiKeyAuth", "hash_key", "new_api_key"]

KEY_PREFIX = "sk-outpost-"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_api_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


async def create_api_key(store: Store, name: str, now: datetime) -> tuple[str, ApiKeyRecord]:
    """Make a key; the plaintext is returned once and never stored."""
    key = new_api_key()
    record = ApiKeyRecord(
        id="apikey_" + secrets.token_hex(12), name=name, key_hash=hash_key(key), created_at=now
    )
    await store.create_api_key(record)
    return key, record


class ApiKeyAuth:
    """A FastAPI dependency; returns the caller's key record."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def __call__(self, request: Request) -> ApiKeyRecord:
        key = _presented_key(request)
        if not key:
            raise ApiError(401, "missing API key: send `Authorization: Bearer <key>` or `x-api-key`")
        presented = hash_key(key)
        record = await self._store.find_api_key(presented)
        if (
            record is None
            or not hmac.compare_digest(record.key_hash, presented)
            or record.revoked_at is not None
        ):
            raise ApiError(401, "invalid API key")
        return record


def _presented_key(request: Request) -> str:
    auth = request.headers.get("authorization", "")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.headers.get("x-api-key", "").strip()
