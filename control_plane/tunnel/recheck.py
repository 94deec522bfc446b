"""Live tunnels checked again against the store: revocation and expiry, on every process at once.

Revoking an edge cuts its tunnel at once on the process that handled the revocation (a revocation
listener). Other control-plane processes on the same store learn it here: every
``interval_s`` each process reads the records of the edges it holds tunnels for, in one query,
and cuts the tunnel of an edge that is revoked, gone from the store, or whose certificates have
all expired (a tunnel outlives the TLS handshake that checked its certificate). The edge is told
why with the words of :mod:`outpost_wire.admission`, which it takes as final.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime

from control_plane.store.base import EdgeRecord, Identity
from control_plane.tunnel.registry import EdgeRegistry
from outpost_wire.admission import refusal_message
from outpost_wire.errors import ErrorCode

__all__ = ["EdgeRecheck", "refusal_reason"]

log = logging.getLogger(__name__)


def refusal_reason(record: EdgeRecord | None, now: datetime) -> str | None:
    """Why a live tunnel of this edge must be cut now, or ``None`` if it may stay."""
    if record is None:
        return "unknown_edge"
    if record.revoked_at is not None:
        return "revoked"
    valid_until = max(record.cert_not_after, record.previous_cert_not_after or record.cert_not_after)
    if now >= valid_until:
        return "expired"
    return None


class EdgeRecheck:
    def __init__(
        self,
        registry: EdgeRegistry,
        store: Identity,
        *,
        interval_s: float,
        clock: Callable[[], datetime],
    ) -> None:
        self._registry = registry
        self._store = store
        self._interval_s = interval_s
        self._clock = clock

    async def run(self) -> None:
        """Check every ``interval_s`` until cancelled; a failed check (the store away) is logged
        and tried again next time."""
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.check_once()
            except Exception:
                log.warning("re-checking live tunnels against the store failed", exc_info=True)

    async def check_once(self) -> list[str]:
        """Cut the tunnels that must go; returns their edge ids."""
        held = {conn.edge.id for conn in self._registry.all_connections()}
        if not held:
            return []
        records = {r.id: r for r in await self._store.get_edges(sorted(held))}
        now = self._clock()
        cut = []
        for edge_id in sorted(held):
            reason = refusal_reason(records.get(edge_id), now)
            if reason is None:
                continue
            if self._registry.disconnect(edge_id, ErrorCode.UNAUTHENTICATED, refusal_message(reason)):
                log.warning("edge %s: tunnel cut (%s, seen in the store)", edge_id, reason)
                cut.append(edge_id)
        return cut
