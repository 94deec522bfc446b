"""Which repositories each session's sandbox may reach through the relay, and its relay token.

The sandbox-scoped token in a relay URL is ``HMAC-SHA256(key, session id)`` (URL-safe base64),
with a key of the edge's (``<state_dir>/git-relay.key``, 0600, made at first start). It is the same
after an edge restart, so the ``origin`` of a clone in a surviving workspace keeps working; it
names one session, and the relay also requires the request's source address to be that
session's sandbox, so one sandbox cannot use another's URL.

The table is refreshed from every sandbox request of a session (provisions and tool calls carry
the session's current repositories and delivered tokens), held in memory only, and dropped with
the session's sandbox: a repository removed from the session stops being relayed at the next
call, and a rotated token is used from then on.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from collections.abc import Sequence
from pathlib import Path

from outpost_wire.frames import Repository

__all__ = ["RelayRoutes", "load_or_create_key"]

KEY_BYTES = 32
_LABEL = b"outpost-git-relay-v1\x00"


def load_or_create_key(path: Path) -> bytes:
    """The relay key in ``path`` (created 0600 with a random key if missing). Blocking."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        key = path.read_bytes()
        if len(key) != KEY_BYTES:
            raise ValueError(
                f"{path}: not a git relay key ({len(key)} bytes, expected {KEY_BYTES})"
            ) from None
        return key
    key = secrets.token_bytes(KEY_BYTES)
    with os.fdopen(fd, "wb") as handle:
        handle.write(key)
    return key


class RelayRoutes:
    """Session id -> its repositories by id, and the session tokens."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key if key is not None else secrets.token_bytes(KEY_BYTES)
        self._by_session: dict[str, dict[str, Repository]] = {}

    def token_for(self, session_id: str) -> str:
        digest = hmac.new(self._key, _LABEL + session_id.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")

    def update(self, session_id: str, repositories: Sequence[Repository]) -> None:
        """The session's repositories are now exactly ``repositories``."""
        if repositories:
            self._by_session[session_id] = {r.id: r for r in repositories}
        else:
            self._by_session.pop(session_id, None)

    def forget(self, session_id: str) -> None:
        self._by_session.pop(session_id, None)

    def lookup(self, session_id: str, token: str, repository_id: str) -> Repository | None:
        """The repository if ``token`` is ``session_id``'s and the session has that repository."""
        if not hmac.compare_digest(token.encode(), self.token_for(session_id).encode()):
            return None
        return self._by_session.get(session_id, {}).get(repository_id)

    def sessions(self) -> list[str]:
        """Sessions with repositories (diagnostics and tests)."""
        return sorted(self._by_session)
