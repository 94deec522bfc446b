"""API-key authentication: ``Authorization: Bearer <key>`` (what the SDK sends) or ``x-api-key``.

Keys are stored as sha256 hashes only; the presented key is hashed and looked up, and the stored
hash is compared in constant time. A missing or unknown key is a 401 in the SDK's error shape.

:class:`ApiKeyGate` checks the key from the headers alone, before anything reads the request's
body: a caller without a valid key cannot make the control plane buffer or parse a byte of it.
:class:`ApiKeyAuth`, the routes' dependency, then finds the record the gate left in the request's
state (it checks by itself where no gate runs, e.g. a router mounted alone in a unit test).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Collection
from datetime import datetime

from fastapi import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from control_plane.api.errors import ApiError, error_body
from control_plane.store.base import ApiKeyRecord, Store

__all__ = ["PUBLIC_PATHS", "ApiKeyAuth", "ApiKeyGate", "hash_key", "new_api_key"]

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


# Paths served without an API key: liveness and readiness, and enrollment (the enrollment token or
# the edge's proof of possession is the credential there). Everything else over HTTP needs a key.
PUBLIC_PATHS = frozenset(
    {"/healthz", "/readyz", "/v1/edges/enroll", "/v1/edges/enroll/ca", "/v1/edges/renew"}
)
_MISSING = "missing API key: send `Authorization: Bearer <key>` or `x-api-key`"
_INVALID = "invalid API key"
_STATE_KEY = "api_key"


async def _check(store: Store, key: str) -> ApiKeyRecord | None:
    presented = hash_key(key)
    record = await store.find_api_key(presented)
    if record is None or not hmac.compare_digest(record.key_hash, presented) or record.revoked_at is not None:
        return None
    return record


class ApiKeyAuth:
    """A FastAPI dependency; returns the caller's key record."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def __call__(self, request: Request) -> ApiKeyRecord:
        checked = request.scope.get("state", {}).get(_STATE_KEY)
        if isinstance(checked, ApiKeyRecord):
            return checked
        key = _presented_key(request.headers.get("authorization", ""), request.headers.get("x-api-key", ""))
        if not key:
            raise ApiError(401, _MISSING)
        record = await _check(self._store, key)
        if record is None:
            raise ApiError(401, _INVALID)
        return record


class ApiKeyGate:
    """ASGI middleware: a 401 for an HTTP request without a valid key, answered from the headers
    before the body is read. ``public`` paths pass; WebSocket and lifespan scopes pass (the tunnel's
    WebSocket authenticates the edge by its own means)."""

    def __init__(self, app: ASGIApp, store: Store, public: Collection[str] = PUBLIC_PATHS) -> None:
        self.app = app
        self._store = store
        self._public = frozenset(public)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self._public:
            await self.app(scope, receive, send)
            return
        headers = {k: v for k, v in scope.get("headers", ()) if k in (b"authorization", b"x-api-key")}
        key = _presented_key(
            headers.get(b"authorization", b"").decode("latin-1"),
            headers.get(b"x-api-key", b"").decode("latin-1"),
        )
        record = await _check(self._store, key) if key else None
        if record is None:
            await _unauthorized(send, _INVALID if key else _MISSING)
            return
        scope.setdefault("state", {})[_STATE_KEY] = record
        await self.app(scope, receive, send)


async def _unauthorized(send: Send, message: str) -> None:
    body = json.dumps(error_body("authentication_error", message)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                # The unread body is not drained: the server closes the connection after the reply.
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _presented_key(authorization: str, x_api_key: str) -> str:
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return x_api_key.strip()
