"""API-key authentication: ``Authorization: Bearer <key>`` (what the SDK sends) or ``x-api-key``.

Keys are stored as sha256 hashes only; the presented key is hashed and looked up, and the stored
hash is compared in constant time. A missing, unknown, revoked or expired key is a 401 in the SDK's
error shape. A key's record is read from the store at most once per :data:`KEY_CACHE_TTL_S` per
process (:class:`ApiKeyCache`; unknown keys are not cached): a revocation through this process's API
holds at once, one made elsewhere (another replica, ``outpost-control api-keys rotate-admin``) within
that time. Revocation, expiry and scope are checked on every request against the cached record. A
key's ``last_used_at`` is written at most once a minute (:data:`TOUCH_INTERVAL`), and its id is
bound to the log context (``api_key_id``) while the request is served.

:class:`ApiKeyGate` checks the key from the headers alone, before anything reads the request's
body: a caller without a valid key cannot make the control plane buffer or parse a byte of it,
and a ``read_only`` key gets its 403 for a write the same way (see
:mod:`control_plane.api.caller` for what each scope may do).
:class:`ApiKeyAuth`, the routes' dependency, then finds the record the gate left in the request's
state (it checks by itself where no gate runs, e.g. a router mounted alone in a unit test).
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from collections.abc import Callable, Collection
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from fastapi import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from control_plane.access_keys import KeyScope, create_api_key, hash_key, new_api_key  # re-exported
from control_plane.api.body_limit import drain_some
from control_plane.api.caller import READ_METHODS, STATE_KEY
from control_plane.api.errors import ApiError, error_body
from control_plane.api.worker_credentials import (
    WORKER_STATE,
    Refusal,
    WorkerCredentials,
    is_worker_credential,
    is_worker_credential_id,
    worker_credential_live,
)
from control_plane.errors import ControlPlaneError, NotFound
from control_plane.store.base import ApiKeyRecord, Store
from outpost_wire.logfmt import log_context
from outpost_wire.throttle import LogThrottle

__all__ = [
    "KEY_CACHE_TTL_S",
    "PUBLIC_PATHS",
    "TOUCH_INTERVAL",
    "ApiKeyAuth",
    "ApiKeyCache",
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

#: How long a process trusts a key record it read (a revocation elsewhere holds within this).
KEY_CACHE_TTL_S = 5.0


# Paths served without an API key: liveness and readiness, and enrollment (the enrollment token or
# the edge's proof of possession is the credential there). Everything else over HTTP needs a key.
PUBLIC_PATHS = frozenset(
    {"/healthz", "/readyz", "/v1/edges/enroll", "/v1/edges/enroll/ca", "/v1/edges/renew"}
)
_MISSING = "missing API key: send `Authorization: Bearer <key>` or `x-api-key`"
_INVALID = "invalid API key"


def _utcnow() -> datetime:
    return datetime.now(UTC)


class ApiKeyCache:
    """Key records by hash, each trusted for ``ttl_s`` after it was read from the store (0: read
    every time). One per process, shared by the gate, the routes' dependency and the routes that
    revoke keys (:meth:`forget`). Misses are not cached (a key created anywhere works at once), and
    at most ``max_entries`` records are held."""

    def __init__(self, store: Store, ttl_s: float = KEY_CACHE_TTL_S, max_entries: int = 10_000) -> None:
        if ttl_s < 0:
            raise ValueError(f"ttl_s must not be negative, got {ttl_s!r}")
        self._store = store
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._records: dict[str, tuple[float, ApiKeyRecord]] = {}  # hash -> (monotonic expiry, record)

    async def find(self, key_hash: str) -> ApiKeyRecord | None:
        now = time.monotonic()
        cached = self._records.get(key_hash)
        if cached is not None and cached[0] > now:
            return cached[1]
        record = await self._store.find_api_key(key_hash)
        if record is None or self._ttl_s == 0:
            self._records.pop(key_hash, None)
            return record
        if len(self._records) >= self._max_entries:
            self._records = {h: e for h, e in self._records.items() if e[0] > now}
            if len(self._records) >= self._max_entries:
                self._records.clear()
        self._records[key_hash] = (now + self._ttl_s, record)
        return record

    def used(self, record: ApiKeyRecord, at: datetime) -> None:
        """``record``'s ``last_used_at`` was written: keep the cached copy in step (else every
        request until it expires would write it again)."""
        cached = self._records.get(record.key_hash)
        if cached is not None and cached[1].id == record.id:
            self._records[record.key_hash] = (cached[0], replace(cached[1], last_used_at=at))

    def forget(self, key_id: str) -> None:
        """Drop the record of key ``key_id`` (revoked or changed through this process)."""
        self._records = {h: e for h, e in self._records.items() if e[1].id != key_id}


async def check_key(
    store: Store, key: str, now: datetime, cache: ApiKeyCache | None = None
) -> ApiKeyRecord | str:
    """The key's record if it may be used at ``now``, else why not (the 401's message). With a
    ``cache``, the record may be up to its TTL old."""
    presented = hash_key(key)
    record = await (cache.find(presented) if cache is not None else store.find_api_key(presented))
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
        if cache is not None:
            cache.used(record, now)
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
            if is_worker_credential_id(key_id):  # a worker's stream: its credential still live
                usable = await worker_credential_live(self._store, key_id)
                self._seen[key_id] = (now, usable)
                return usable
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

    def __init__(
        self, store: Store, clock: Callable[[], datetime] = _utcnow, cache: ApiKeyCache | None = None
    ) -> None:
        self._store = store
        self._clock = clock
        self._cache = cache

    async def __call__(self, request: Request) -> ApiKeyRecord:
        checked = request.scope.get("state", {}).get(STATE_KEY)
        if isinstance(checked, ApiKeyRecord):
            return checked
        key = _presented_key(request.headers.get("authorization", ""), request.headers.get("x-api-key", ""))
        if not key:
            raise ApiError(401, _MISSING)
        record = await check_key(self._store, key, self._clock(), self._cache)
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
        cache: ApiKeyCache | None = None,
        workers: WorkerCredentials | None = None,
    ) -> None:
        self.app = app
        self._store = store
        self._public = frozenset(public)
        self._clock = clock
        self._cache = cache
        self._workers = workers  # environment keys and sessions tokens (None: refused as API keys)
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
        if self._workers is not None and is_worker_credential(key):
            await self._worker(scope, receive, send, key)
            return
        record = await check_key(self._store, key, self._clock(), self._cache)
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
                await drain_some(receive)  # so a client still sending its body reads the 403, not a reset
                await _refuse(send, 403, "permission_error", _READ_ONLY)
                return
            scope.setdefault("state", {})[STATE_KEY] = record
            await self.app(scope, receive, send)

    async def _worker(self, scope: Scope, receive: Receive, send: Send, key: str) -> None:
        """A worker's credential (:mod:`control_plane.api.worker_credentials`): admitted only
        where the SDK's worker sends it."""
        assert self._workers is not None
        admitted = await self._workers.admit(key, scope.get("method", "GET"), scope["path"])
        if isinstance(admitted, Refusal):
            await drain_some(receive)
            await _refuse(send, admitted.status, admitted.error_type, admitted.message)
            return
        caller, record = admitted
        state = scope.setdefault("state", {})
        state[STATE_KEY], state[WORKER_STATE] = record, caller
        with log_context(api_key_id=caller.id):
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
