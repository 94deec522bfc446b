"""Environment keys: the standing credential of an environment's workers (the SDK's
``environment_key``), made, listed and revoked by the operator (an admin API key).

A key is ``oek-<24 hex>.<secret>``: the part before the dot names its record (``envkey_<24 hex>``,
kind ``environment_key``), so a presented key is checked with one read and a constant-time
comparison of sha256 hashes; only the hash is stored and the plaintext is returned once, when the
key is made. A revoked key is refused from the next request on, on every control-plane process (no
cache: the record is read per request). A key belongs to one environment and is worth nothing on
another; it never works as an API key (the API-key gate does not look it up)."""

from __future__ import annotations

import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from control_plane.access_keys import hash_key
from control_plane.environments.service import get_environment
from control_plane.errors import InvalidRequest, NotFound
from control_plane.store.base import Order, Resource, Resources
from control_plane.timestamps import timestamp

__all__ = [
    "ENVIRONMENT_KEY_KIND",
    "ENVIRONMENT_KEY_PREFIX",
    "EnvironmentKeys",
    "KeyHolder",
    "check_environment_key",
    "environment_key_json",
]

ENVIRONMENT_KEY_KIND = "environment_key"
ENVIRONMENT_KEY_PREFIX = "oek-"
_SHAPE = re.compile(r"^oek-([0-9a-f]{24})\.([A-Za-z0-9_-]{20,100})$")
MAX_KEYS_PER_ENVIRONMENT = 100


@dataclass(frozen=True, slots=True)
class KeyHolder:
    """Who presented a valid environment key."""

    key_id: str
    environment_id: str


def environment_key_json(res: Resource) -> dict[str, Any]:
    """A key as the API shows it: never the secret nor its hash."""
    body = res.body
    return {
        "type": "environment_key",
        "id": res.id,
        "environment_id": body["environment_id"],
        "name": body.get("name", ""),
        "status": "revoked" if body.get("revoked_at") else "active",
        "created_at": timestamp(res.created_at),
        "revoked_at": body.get("revoked_at"),
    }


async def check_environment_key(store: Resources, presented: str) -> KeyHolder | None:
    """The holder of ``presented`` if it is a live environment key, else ``None`` (unknown,
    malformed, revoked: one answer, so a caller learns nothing of which)."""
    match = _SHAPE.match(presented)
    if match is None:
        return None
    key_id = "envkey_" + match.group(1)
    try:
        res = await store.get_resource(ENVIRONMENT_KEY_KIND, key_id)
    except NotFound:
        return None
    if not hmac.compare_digest(str(res.body.get("key_hash", "")), hash_key(presented)):
        return None
    if res.body.get("revoked_at"):
        return None
    return KeyHolder(key_id, str(res.body["environment_id"]))


class EnvironmentKeys:
    """Making, listing and revoking an environment's keys (the caller checked for an admin key)."""

    def __init__(self, store: Resources, clock: Callable[[], datetime]) -> None:
        self._store = store
        self._clock = clock

    async def create(self, environment_id: str, name: str) -> tuple[str, Resource]:
        """The plaintext key (shown once) and its record."""
        await get_environment(self._store, environment_id, usable=True)
        live = await self.list_keys(environment_id)
        if sum(1 for k in live if not k.body.get("revoked_at")) >= MAX_KEYS_PER_ENVIRONMENT:
            raise InvalidRequest(
                f"environment {environment_id!r} has {MAX_KEYS_PER_ENVIRONMENT} active keys; revoke one first"
            )
        hex_id = secrets.token_hex(12)
        key = f"{ENVIRONMENT_KEY_PREFIX}{hex_id}.{secrets.token_urlsafe(32)}"
        body = {"environment_id": environment_id, "name": name, "key_hash": hash_key(key), "revoked_at": None}
        res = await self._store.create_resource(ENVIRONMENT_KEY_KIND, "envkey_" + hex_id, body, self._clock())
        return key, res

    async def list_keys(self, environment_id: str) -> list[Resource]:
        """Every key of the environment (revoked ones too), oldest first."""
        await get_environment(self._store, environment_id)
        found: list[Resource] = []
        cursor: str | None = None
        while True:
            page = await self._store.list_resources(
                ENVIRONMENT_KEY_KIND,
                filters={"environment_id": environment_id},
                limit=100,
                cursor=cursor,
                order=Order.ASC,
            )
            found.extend(page.items)
            cursor = page.next_cursor
            if cursor is None:
                return found

    async def revoke(self, environment_id: str, key_id: str) -> Resource:
        """Idempotent: revoking a revoked key answers it as it is."""
        try:
            res = await self._store.get_resource(ENVIRONMENT_KEY_KIND, key_id)
        except NotFound:
            raise NotFound("environment key", key_id) from None
        if res.body.get("environment_id") != environment_id:
            raise NotFound("environment key", key_id)
        if res.body.get("revoked_at"):
            return res
        body = {**res.body, "revoked_at": timestamp(self._clock())}
        return await self._store.update_resource(
            ENVIRONMENT_KEY_KIND, key_id, body, self._clock(), expected_version=res.version
        )
