"""``SharedNonces``: proof-of-possession tokens work once across every control-plane process on the
store, not once per process.

A token replayed within its lifetime (30 s, plus the clock skew allowed) to another process behind
the same load balancer must be refused there too: the store remembers each accepted token's nonce
(``Store.use_nonce``) until it could not be accepted anyway. A local :class:`NonceCache` answers
repeats in this process first (and bounds a flood) without a store round trip.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol

from outpost_wire.pop import CLOCK_SKEW_S, NonceCache, PopClaims, PopError, nonce_key

__all__ = ["NonceStore", "SharedNonces"]


class NonceStore(Protocol):
    async def use_nonce(self, key: str, expires_at: datetime, now: datetime) -> bool: ...


class SharedNonces:
    def __init__(self, store: NonceStore | None, *, skew_s: int = CLOCK_SKEW_S) -> None:
        """``store=None``: this process only (a single control plane, or tests)."""
        self._store = store
        self._skew_s = skew_s
        self._local = NonceCache(skew_s=skew_s)

    async def use(self, claims: PopClaims, now: float) -> None:
        """Accept the token's nonce once; raises :class:`PopError` (``replayed`` / ``busy``)."""
        self._local.use(claims, now)
        if self._store is None:
            return
        until = datetime.fromtimestamp(claims.expires_at + self._skew_s, UTC)
        if not await self._store.use_nonce(nonce_key(claims), until, datetime.fromtimestamp(now, UTC)):
            raise PopError("replayed", "this token was used already (on another control-plane process)")
