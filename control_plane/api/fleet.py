"""The fleet as an operator sees it: enrollment tokens and each edge's live status (the routes are
in :mod:`control_plane.api.enroll_routes`).

* :class:`EnrollmentTokenInfo` — a token as ``GET /v1/enrollment_tokens`` lists it, with its
  ``status``: ``unused``, ``used`` (and by which edge), ``expired`` or ``revoked``. Neither the
  token nor its hash is ever in it.
* :class:`FleetView` — what ``GET /v1/edges`` adds to each enrolled edge: whether its tunnel is
  up (on this process or, through the store's presence records, on another one), since when, when
  it was last seen, its software version and live sandboxes (from the process holding the
  tunnel: ``null`` when another process holds it), and which control-plane process holds it.

Times are RFC 3339 (UTC, ``Z``) like everywhere else in the API.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel

from control_plane.store.base import Coordination, EdgeRecord, EnrollmentTokenRecord
from control_plane.tunnel.registry import EdgeRegistry

__all__ = [
    "EdgeLive",
    "EnrollmentTokenInfo",
    "EnrollmentTokenList",
    "FleetView",
    "TokenStatus",
    "token_status",
]

TokenStatus = Literal["unused", "used", "expired", "revoked"]


def token_status(record: EnrollmentTokenRecord, now: datetime) -> TokenStatus:
    """What a token is good for now: ``used`` and ``revoked`` are final, ``expired`` once its
    expiry has passed, ``unused`` otherwise."""
    if record.used_at is not None:
        return "used"
    if record.revoked_at is not None:
        return "revoked"
    if record.expires_at <= now:
        return "expired"
    return "unused"


class EnrollmentTokenInfo(BaseModel):
    """An enrollment token as listings show it: no token, no hash."""

    type: Literal["enrollment_token"] = "enrollment_token"
    id: str
    environment_id: str
    status: TokenStatus
    created_at: datetime
    expires_at: datetime
    used_at: datetime | None = None
    used_by_edge_id: str | None = None
    revoked_at: datetime | None = None

    @classmethod
    def from_record(cls, record: EnrollmentTokenRecord, now: datetime) -> EnrollmentTokenInfo:
        return cls(
            id=record.id,
            environment_id=record.environment_id,
            status=token_status(record, now),
            created_at=record.created_at,
            expires_at=record.expires_at,
            used_at=record.used_at,
            used_by_edge_id=record.used_by_edge_id,
            revoked_at=record.revoked_at,
        )


class EnrollmentTokenList(BaseModel):
    """Every token in the Anthropic list shape (one page: ``has_more`` is always false)."""

    data: list[EnrollmentTokenInfo]
    has_more: bool = False
    first_id: str | None = None
    last_id: str | None = None


@dataclass(frozen=True, slots=True)
class EdgeLive:
    """An edge's live status, as far as this process knows it."""

    connected: bool = False
    connected_at: datetime | None = None  # known only on the process holding the tunnel
    last_seen_at: datetime | None = None
    control_plane_id: str | None = None  # the process holding its tunnel
    software_version: str | None = None
    sandboxes_in_use: int | None = None
    sandbox_capacity: int | None = None
    draining: bool | None = None
    peer: str | None = None


class FleetView:
    """Joins the registry of enrolled edges with the tunnels: this process's own (full detail) and
    the other processes' (from the store's presence records: who holds it, and when it was last
    recorded up)."""

    def __init__(
        self,
        registry: EdgeRegistry,
        store: Coordination,
        clock: Callable[[], datetime],
        control_plane_id: str,
    ) -> None:
        self._registry = registry
        self._store = store
        self._clock = clock
        self._id = control_plane_id

    async def live(self, records: Sequence[EdgeRecord]) -> dict[str, EdgeLive]:
        now = self._clock()
        here = {s.edge_id: s for s in self._registry.statuses()}
        elsewhere = await self._store.edge_holders(now) if any(r.id not in here for r in records) else {}
        out: dict[str, EdgeLive] = {}
        for record in records:
            status = here.get(record.id)
            if status is not None:
                out[record.id] = EdgeLive(
                    connected=True,
                    connected_at=status.connected_at,
                    last_seen_at=now,  # its heartbeats keep the tunnel up (within heartbeat_timeout_s)
                    control_plane_id=self._id,
                    software_version=status.software_version or None,
                    sandboxes_in_use=status.sandboxes_in_use,
                    sandbox_capacity=status.sandbox_capacity,
                    draining=status.draining,
                    peer=status.peer,
                )
            elif record.id in elsewhere and record.revoked_at is None:
                out[record.id] = EdgeLive(
                    connected=True, last_seen_at=record.last_seen_at, control_plane_id=elsewhere[record.id]
                )
            else:
                out[record.id] = EdgeLive(last_seen_at=record.last_seen_at)
        return out
