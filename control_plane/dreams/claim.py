"""``DreamClaim``: one process's hold on one running dream, by compare-and-set on the dream.

The dream resource carries ``claim: {holder, expires_at}``. :meth:`DreamClaim.take` moves a
``pending`` dream, or a ``running`` one whose claim expired (its process died) or was given back,
to ``running`` under this holder, with one ``update_resource(expected_version=...)``: of two
processes trying at once, one wins and the other gets ``VersionConflict``. Every later write of
the dream (its session, outputs, usage, the final status) goes through :meth:`DreamClaim.update`,
which re-reads on a conflict and applies the change only while the dream is still ``running``
under this holder; otherwise it raises :class:`DreamStopped` (canceled, or taken over after this
process stalled past the expiry). The scheduler renews the claim every third of its TTL.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from control_plane.dreams.service import DREAM_KIND
from control_plane.errors import VersionConflict
from control_plane.store.base import Resource, Resources

__all__ = ["DreamClaim", "DreamStopped", "claim_expired"]

_ATTEMPTS = 10


class DreamStopped(Exception):
    """The dream is no longer this process's to run (canceled, ended, or claimed by another)."""


def claim_expired(body: dict[str, Any], now: datetime) -> bool:
    """Whether a ``running`` dream's claim is free: none, or past its expiry."""
    claim = body.get("claim")
    if not isinstance(claim, dict) or not isinstance(claim.get("expires_at"), str):
        return True
    return datetime.fromisoformat(claim["expires_at"]) <= now


class DreamClaim:
    def __init__(
        self, store: Resources, dream_id: str, holder: str, ttl_s: float, clock: Callable[[], datetime]
    ) -> None:
        self._store = store
        self.dream_id = dream_id
        self._holder = holder
        self._ttl = timedelta(seconds=ttl_s)
        self._clock = clock
        self.current: Resource | None = None

    def _claim(self) -> dict[str, str]:
        return {"holder": self._holder, "expires_at": (self._clock() + self._ttl).isoformat()}

    async def take(self) -> bool:
        """Claim the dream if it is pending, or running with a free claim; ``False`` otherwise."""
        dream = await self._store.get_resource(DREAM_KIND, self.dream_id)
        status = dream.body.get("status")
        if status == "running" and not claim_expired(dream.body, self._clock()):
            return False
        if status not in ("pending", "running"):
            return False
        body = {**dream.body, "status": "running", "claim": self._claim()}
        try:
            self.current = await self._store.update_resource(
                DREAM_KIND, self.dream_id, body, self._clock(), expected_version=dream.version
            )
        except VersionConflict:
            return False
        return True

    def _mine(self, dream: Resource) -> bool:
        claim = dream.body.get("claim")
        holder = claim.get("holder") if isinstance(claim, dict) else None
        return dream.body.get("status") == "running" and holder == self._holder

    async def check(self) -> Resource:
        """The dream as it stands; :class:`DreamStopped` unless it is still ours to run."""
        dream = await self._store.get_resource(DREAM_KIND, self.dream_id)
        if not self._mine(dream):
            raise DreamStopped(f"dream {self.dream_id} is {dream.body.get('status')} or claimed elsewhere")
        self.current = dream
        return dream

    async def update(
        self, change: Callable[[dict[str, Any]], dict[str, Any]], *, renew: bool = True
    ) -> Resource:
        """Apply ``change`` (body -> new body) while the dream is ours; renews the claim too."""
        for _ in range(_ATTEMPTS):
            dream = await self.check()
            body = change(dict(dream.body))
            if renew:
                body["claim"] = self._claim()
            try:
                self.current = await self._store.update_resource(
                    DREAM_KIND, self.dream_id, body, self._clock(), expected_version=dream.version
                )
                return self.current
            except VersionConflict:
                continue
        raise DreamStopped(f"dream {self.dream_id} kept changing; leaving it to the next claim")

    async def renew(self) -> None:
        await self.update(lambda body: body)

    async def finish(self, status: str, error: dict[str, str] | None = None) -> Resource:
        """The final status (``completed`` / ``failed``), the claim given up."""

        def final(body: dict[str, Any]) -> dict[str, Any]:
            ended = self._clock().isoformat()
            return {**body, "status": status, "error": error, "ended_at": ended, "claim": None}

        return await self.update(final, renew=False)

    async def release(self) -> None:
        """Give the claim back (this process is stopping): another process resumes the dream at
        its next scan. Best effort: an unreleased claim expires."""
        with contextlib.suppress(DreamStopped):
            await self.update(lambda body: {**body, "claim": None}, renew=False)
