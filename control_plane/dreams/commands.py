"""What :class:`~control_plane.dreams.service.DreamService` is asked, and what it answers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from control_plane.store.base import Resource

__all__ = ["CreateDream", "DreamPage", "DreamQuery"]


@dataclass(frozen=True, slots=True)
class CreateDream:
    """The sessions and the memory store to read (ids as given: the service checks them), the
    model, the guidance, and where to write (``update_existing``: into ``memory_store_id``)."""

    session_ids: Sequence[str]
    memory_store_id: str
    model_id: str
    instructions: str | None = None
    update_existing: bool = False


@dataclass(frozen=True, slots=True)
class DreamQuery:
    """A page of dreams, newest first; time bounds are inclusive."""

    limit: int = 20
    cursor: str | None = None
    include_archived: bool = False
    statuses: Sequence[str] = ()
    created_after: datetime | None = None
    created_before: datetime | None = None


@dataclass(frozen=True, slots=True)
class DreamPage:
    items: Sequence[Resource]
    next_cursor: str | None
