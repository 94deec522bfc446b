"""API-key authentication: ``Authorization: Bearer <key>`` (what the SDK sends) or ``x-api-key``.

Keys are stored as sha256 hashes only; the presented key is hashed and looked up, and the stored
hash is compared in constant time. A missing, unknown, revoked or expired key is a 401 in the SDK's
error shape. The store is read on every request (no cache), so a revocation holds at once on every
control-plane process sharing the store. A key's ``last_used_at`` is written at most once a minute
(:data:`TOUCH_INTERVAL`), and its id is bound to the log context (``api_key_id``) while the
request is served.

:class:`ApiKeyGate` checks the key from the headers alone, before anything reads the request's
body: a caller without a valid key cannot make the control plane buffer or parse a byte of it,
and a ``read_only`` key gets its 403 for a write the same way (see
:mod:`control_plane.api.caller` for what each scope may do).
:class:`ApiKeyAuth`, the routes' dependency, then finds the record the gate left in the request's
state (it checks by itself where no gate runs, e.g. a router mounted alone in a unit test).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import time
from collections.abc import Callable, Collection
from datetime import UTC, datetime, timedelta

from fastapi import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from control_plane.api.caller import READ_METHODS, STATE_KEY, KeyScope
from control_plane.api.errors import ApiError, error_body
from control_plane.errors import ControlPlaneError, NotFound
from control_plane.store.base import ApiKeyRecord, Store
from outpost_wire.logfmt import log_context
from outpost_wire.throttle import LogThrottle

__all__ = [
    "PUBLIC_PATHS",
    "TOUCH_INTERVAL",
    "ApiKeyAuth",
    "ApiKeyGate",
    "KeyRecheck",
    "check_key",
    "create_api_key",
    "hash_key",
    "new_api_key",
]

log = logging.getLogger(__name__)

#: How stale a key's recorded ``last_used_at`` may get before a request writes it again.
TOUCH_INTERVAL = timedelta(minutes=1)

KEY_PREFIX = "sk-outpost-"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_api_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


async def create_api_key(
    store: Store,
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


# Paths served without an API key: liveness and readiness, and enrollment (the enrollment token or
# the edge's proof of possession is the credential there). Everything else over HTTP needs a key.
PUBLIC_PATHS = frozenset(
    {"/healthz", "/readyz", "/v1/edges/enroll", "/v1/edges/enroll/ca", "/v1/edges/renew"}
)
_MISSING = "missing API key: send `Authorization: Bearer <key>` or `x-api-key`"
_INVALID = "invalid API key"


def _utcnow() -> datetime:
    return datetime.now(UTC)


async def check_key(store: Store, key: str, now: datetime) -> ApiKeyRecord | str:
    """The key's record if it may be used at ``now``, else why not (the 401's message)."""
    presented = hash_key(key)
    record = await store.find_api_key(presented)
    if record is None or not hmac.compare_digest(record.key_hash, presented):
        return _INVALID
    if record.revoked_at is not None:
        return f"API key {record.id} was revoked"
    if record.expires_at is not None and record.expires_at <= now:
        stamp = record.expires_at.astimezone(UTC).isoformat().replace("+00:00", "Z")
        return f"API key {record.id} expired at {stamp}; ask an admin for a new key"
    if record.last_used_at is None or now - record.last_used_at >= TOUCH_INTERVAL:
        try:
            await store.touch_api_key(record.id, now)
        except ControlPlaneError as exc:  # bookkeeping only: the request goes on
            log.warning("could not record the use of API key %s: %s", record.id, exc)
    return record


class KeyRecheck:
    """Whether a key checked when a long request began (an event stream) still holds: re-read
    from the store at most once per ``interval_s`` per key, shared by every stream of the process
    (a thousand streams of one key cost one read per interval, not a thousand)."""

    def __init__(
        self, store: Store, clock: Callable[[], datetime] = _utcnow, interval_s: float = 5.0
    ) -> None:
        self._store = store
        self._clock = clock
        self._interval_s = interval_s
        self._seen: dict[str, tuple[float, bool]] = {}  # key id -> (monotonic time read, usable)

    async def still_valid(self, key_id: str) -> bool:
        now = time.monotonic()
        seen = self._seen.get(key_id)
        if seen is not None and now - seen[0] < self._interval_s:
            return seen[1]
        try:
            record = await self._store.get_api_key(key_id)
        except NotFound:
            usable = False
        else:
            usable = record.revoked_at is None and (
                record.expires_at is None or record.expires_at > self._clock()
            )
        self._seen[key_id] = (now, usable)
        return usable


class ApiKeyAuth:
    """A FastAPI dependency; returns the caller's key record."""

    def __init__(self, store: Store, clock: Callable[[], datetime] = _utcnow) -> None:
        self._store = store
        self._clock = clock

    async def __call__(self, request: Request) -> ApiKeyRecord:
        checked = request.scope.get("state", {}).get(STATE_KEY)
        if isinstance(checked, ApiKeyRecord):
            return checked
        key = _presented_key(request.headers.get("authorization", ""), request.headers.get("x-api-key", ""))
        if not key:
            raise ApiError(401, _MISSING)
        record = await check_key(self._store, key, self._clock())
        if isinstance(record, str):
            raise ApiError(401, record)
        if record.scope == KeyScope.READ_ONLY and request.method not in READ_METHODS:
            raise ApiError(403, _READ_ONLY, "permission_error")
        request.scope.setdefault("state", {})[STATE_KEY] = record
        return record


class ApiKeyGate:
    """ASGI middleware: a 401 for an HTTP request without a valid key, answered from the headers
    before the body is read. ``public`` paths pass; WebSocket and lifespan scopes pass (the tunnel's
    WebSocket authenticates the edge by its own means)."""

    def __init__(
        self,
        app: ASGIApp,
        store: Store,
        public: Collection[str] = PUBLIC_PATHS,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self.app = app
        self._store = store
        self._public = frozenset(public)
        self._clock = clock
        self._refusals = LogThrottle(log)  # a read_only key's refused writes, a few a minute per key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self._public:
            await self.app(scope, receive, send)
            return
        headers = {k: v for k, v in scope.get("headers", ()) if k in (b"authorization", b"x-api-key")}
        key = _presented_key(
            headers.get(b"authorization", b"").decode("latin-1"),
            headers.get(b"x-api-key", b"").decode("latin-1"),
        )
        if not key:
            await _refuse(send, 401, "authentication_error", _MISSING)
            return
        record = await check_key(self._store, key, self._clock())
        if isinstance(record, str):
            await _refuse(send, 401, "authentication_error", record)
            return
        with log_context(api_key_id=record.id):
            if record.scope == KeyScope.READ_ONLY and scope.get("method", "GET") not in READ_METHODS:
                self._refusals.log(
                    logging.INFO,
                    record.id,
                    "refused %s %s: read_only API key",
                    scope.get("method"),
                    scope["path"],
                )
                await _refuse(send, 403, "permission_error", _READ_ONLY)
                return
            scope.setdefault("state", {})[STATE_KEY] = record
            await self.app(scope, receive, send)


_READ_ONLY = "this API key is read_only: it may only read (GET)"


async def _refuse(send: Send, status: int, error_type: str, message: str) -> None:
    body = json.dumps(error_body(error_type, message)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
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
