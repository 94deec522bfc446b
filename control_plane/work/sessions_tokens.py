"""Sessions tokens: the per-work-item credential a worker gets in ``work.secret``.

A token is ``ost-<24 hex>.<secret>`` where ``work_<24 hex>`` is its work item; the item stores its
sha256 only (``token_hash``). Each poll that hands the item out mints a new one (the previous
holder's dies), and a token dies when its item stops or its lease expires and it is queued again.
What a token may do is decided by :mod:`control_plane.api.worker_credentials`: its item's heartbeat
and stop, its session's read, events and stream, the skills its agent uses, the memory stores the
session mounts. ``secret`` is URL-safe base64 (no padding) of ``{"sessions_token": ...}``, as the
SDK's worker reads it."""

from __future__ import annotations

import base64
import hmac
import json
import re
import secrets
from dataclasses import dataclass

from control_plane.access_keys import hash_key
from control_plane.errors import NotFound
from control_plane.store.base import Resources

__all__ = [
    "SESSIONS_TOKEN_PREFIX",
    "WORK_KIND",
    "TokenHolder",
    "check_sessions_token",
    "mint_sessions_token",
    "work_secret",
]

WORK_KIND = "work"
SESSIONS_TOKEN_PREFIX = "ost-"  # noqa: S105 (a prefix, not a secret)
_SHAPE = re.compile(r"^ost-([0-9a-f]{24})\.([A-Za-z0-9_-]{20,100})$")


@dataclass(frozen=True, slots=True)
class TokenHolder:
    """Who presented a live sessions token: the worker of one work item of one session."""

    work_id: str
    environment_id: str
    session_id: str


def mint_sessions_token(work_id: str) -> tuple[str, str]:
    """A new token for ``work_id`` and its hash (what the item stores)."""
    token = f"{SESSIONS_TOKEN_PREFIX}{work_id.removeprefix('work_')}.{secrets.token_urlsafe(32)}"
    return token, hash_key(token)


def work_secret(token: str) -> str:
    raw = json.dumps({"sessions_token": token}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


async def check_sessions_token(store: Resources, presented: str) -> TokenHolder | None:
    """The holder if ``presented`` is the live token of its work item (not stopped, not
    re-minted, not expired back into the queue); else ``None``, whichever the reason."""
    match = _SHAPE.match(presented)
    if match is None:
        return None
    work_id = "work_" + match.group(1)
    try:
        res = await store.get_resource(WORK_KIND, work_id)
    except NotFound:
        return None
    stored = res.body.get("token_hash")
    if not isinstance(stored, str) or not hmac.compare_digest(stored, hash_key(presented)):
        return None
    if res.body.get("state") == "stopped":
        return None
    return TokenHolder(work_id, str(res.body["environment_id"]), str(res.body["session_id"]))
