"""The two credentials of a self-hosted worker, checked by the API-key gate from the headers alone
(before any body is read), and exactly where the SDK's worker sends each:

==========================  ======================================================================
credential                  accepted on
==========================  ======================================================================
environment key (``oek-``)  its environment's ``work/poll``, ``work`` (list), ``work/{id}/ack``,
                            ``work/{id}/heartbeat`` and ``work/{id}/stop``; and, as the per-item
                            fallback, ``GET /v1/sessions/{id}`` and the events list, send and
                            stream of its environment's sessions (another environment's: 404)
sessions token (``ost-``)   its own item's ``heartbeat`` and ``stop``; its session's ``GET``,
                            events list, send and stream; ``GET`` of the versions and content of
                            the skills its agent uses; the memory stores the session mounts
                            (``GET`` the store, its memories — read and write unless mounted
                            ``read_only`` — and ``GET`` its memory versions)
==========================  ======================================================================

Anything else with either is a 403 ``permission_error`` that names no resource; an unknown,
malformed, revoked or dead credential a 401. A request let through carries the
:class:`WorkerCaller` in its state (:data:`WORKER_STATE`) and a stand-in key record (the routes'
:class:`~control_plane.api.caller.Caller`): a ``read_write`` key limited to the credential's
environment, or — on the memory-store and skill paths already checked here — not limited (those
belong to no environment), so the existing routes serve it unchanged. The API's routes for API
keys never see these credentials as keys of their own: the API-key lookup is not made for them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from control_plane.access_keys import hash_key
from control_plane.errors import NotFound
from control_plane.store.base import ApiKeyRecord, Resources
from control_plane.work.environment_keys import (
    ENVIRONMENT_KEY_KIND,
    ENVIRONMENT_KEY_PREFIX,
    check_environment_key,
)
from control_plane.work.sessions_tokens import SESSIONS_TOKEN_PREFIX, WORK_KIND, check_sessions_token

__all__ = [
    "WORKER_STATE",
    "Refusal",
    "WorkerCaller",
    "WorkerCredentials",
    "is_worker_credential",
    "is_worker_credential_id",
    "worker_credential_live",
]

WORKER_STATE = "worker_credential"

_WORK = re.compile(r"^/v1/environments/([^/]+)/work(?:/([^/]+)(?:/(ack|heartbeat|stop))?)?$")
_SESSION = re.compile(r"^/v1/sessions/([^/]+)(/events(?:/stream)?)?$")
_SKILL = re.compile(r"^/v1/skills/([^/]+)/versions/([^/]+)(?:/content)?$")
_MEMORY = re.compile(r"^/v1/memory_stores/([^/]+)(/memories(?:/[^/]+)?|/memory_versions(?:/[^/]+)?)?$")

_DEAD = "invalid or expired worker credential"
_NOT_HERE = "this worker credential is not accepted for this request"


def is_worker_credential(key: str) -> bool:
    return key.startswith((ENVIRONMENT_KEY_PREFIX, SESSIONS_TOKEN_PREFIX))


def is_worker_credential_id(credential_id: str) -> bool:
    """Whether a stand-in key record's id names a worker's credential (for re-checks)."""
    return credential_id.startswith(("envkey_", "work_"))


async def worker_credential_live(store: Resources, credential_id: str) -> bool:
    """Whether the credential a stand-in record names still holds: the environment key not
    revoked, the work item not stopped (its event streams end otherwise)."""
    kind = ENVIRONMENT_KEY_KIND if credential_id.startswith("envkey_") else WORK_KIND
    try:
        body = (await store.get_resource(kind, credential_id)).body
    except NotFound:
        return False
    if kind == ENVIRONMENT_KEY_KIND:
        return not body.get("revoked_at")
    return body.get("state") != "stopped" and bool(body.get("token_hash"))


@dataclass(frozen=True, slots=True)
class WorkerCaller:
    kind: Literal["environment_key", "sessions_token"]
    id: str  # the environment key's id or the work item's
    environment_id: str
    session_id: str | None = None  # sessions tokens only

    @property
    def work_id(self) -> str | None:
        return self.id if self.kind == "sessions_token" else None


@dataclass(frozen=True, slots=True)
class Refusal:
    status: int
    error_type: str
    message: str


_UNAUTHENTICATED = Refusal(401, "authentication_error", _DEAD)
_FORBIDDEN = Refusal(403, "permission_error", _NOT_HERE)


class WorkerCredentials:
    def __init__(self, store: Resources, clock: Callable[[], datetime]) -> None:
        self._store = store
        self._clock = clock

    async def admit(self, key: str, method: str, path: str) -> tuple[WorkerCaller, ApiKeyRecord] | Refusal:
        """The caller and its stand-in key record if ``key`` may make this request."""
        caller = await self._holder(key)
        if caller is None:
            return _UNAUTHENTICATED
        scoped = await self._scoped(caller, method, path)
        if scoped is None:
            return _FORBIDDEN
        record = ApiKeyRecord(
            id=caller.id,
            name=caller.kind,
            key_hash=hash_key(key),
            created_at=self._clock(),
            scope="read_write",
            environment_ids=(caller.environment_id,) if scoped else None,
        )
        return caller, record

    async def _holder(self, key: str) -> WorkerCaller | None:
        if key.startswith(ENVIRONMENT_KEY_PREFIX):
            holder = await check_environment_key(self._store, key)
            return (
                None
                if holder is None
                else WorkerCaller("environment_key", holder.key_id, holder.environment_id)
            )
        token = await check_sessions_token(self._store, key)
        if token is None:
            return None
        return WorkerCaller("sessions_token", token.work_id, token.environment_id, token.session_id)

    async def _scoped(self, caller: WorkerCaller, method: str, path: str) -> bool | None:
        """``True``: allowed, limited to the caller's environment; ``False``: allowed, on a
        resource of no environment checked here; ``None``: refused."""
        if (work := _WORK.match(path)) is not None:
            return True if _work_allowed(caller, method, work.groups()) else None
        if (session := _SESSION.match(path)) is not None:
            methods = ("GET", "POST") if session.group(2) == "/events" else ("GET",)
            if method not in methods:
                return None
            if caller.kind == "sessions_token" and session.group(1) != caller.session_id:
                return None
            return True
        if caller.kind != "sessions_token" or caller.session_id is None:
            return None  # skills and memory: the sessions token only
        if (skill := _SKILL.match(path)) is not None:
            if method != "GET":
                return None
            agent = (await self._session(caller.session_id)).get("agent") or {}
            used = {s.get("skill_id") for s in agent.get("skills") or () if isinstance(s, Mapping)}
            return False if skill.group(1) in used else None
        if (memory := _MEMORY.match(path)) is not None:
            return False if await self._memory_allowed(caller.session_id, method, memory.groups()) else None
        return None

    async def _memory_allowed(self, session_id: str, method: str, groups: tuple[str | Any, ...]) -> bool:
        store_id, rest = groups
        mounts = (await self._session(session_id)).get("memory_stores") or []
        mount = next(
            (m for m in mounts if isinstance(m, Mapping) and m.get("memory_store_id") == store_id), None
        )
        if mount is None:
            return False
        if method == "GET":
            return True
        writable = (
            isinstance(rest, str) and rest.startswith("/memories") and mount.get("access") != "read_only"
        )
        return writable and method in ("POST", "DELETE")

    async def _session(self, session_id: str) -> Mapping[str, Any]:
        try:
            return (await self._store.get_resource("session", session_id)).body
        except NotFound:
            return {}


def _work_allowed(caller: WorkerCaller, method: str, groups: tuple[str | Any, ...]) -> bool:
    environment_id, work_id, action = groups
    if environment_id != caller.environment_id:
        return False
    if caller.kind == "environment_key":
        if action is None:  # GET work (list) or GET work/poll; not retrieve/update/stats
            return method == "GET" and work_id in (None, "poll")
        return method == "POST"
    return method == "POST" and action in ("heartbeat", "stop") and work_id == caller.work_id
