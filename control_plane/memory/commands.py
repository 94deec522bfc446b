"""What :class:`~control_plane.memory.service.MemoryService` is asked, and what it answers.

Typed values, not HTTP models: the API's router translates request bodies and query strings into
these. ``full`` is the API's ``view`` (``full``: with content; ``basic``: without). Page cursors
are opaque strings the service makes (``next_cursor``) and reads back (``cursor``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from control_plane.patch import KEEP, Keep
from control_plane.store.base import MemoryRecord, MemoryVersionRecord

__all__ = [
    "CreateMemory",
    "CreateMemoryStore",
    "MemoryPage",
    "MemoryPrefix",
    "MemoryQuery",
    "MemoryStoreQuery",
    "MemoryVersionPage",
    "MemoryVersionQuery",
    "UpdateMemory",
    "UpdateMemoryStore",
]


@dataclass(frozen=True, slots=True)
class CreateMemoryStore:
    name: str
    description: str = ""
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class UpdateMemoryStore:
    """A patch: :data:`KEEP` leaves a field; ``description`` ``None`` or ``""`` clears it;
    ``metadata`` upserts, ``None`` values delete (``None`` for the whole map: keep)."""

    name: str | Keep | None = KEEP
    description: str | Keep | None = KEEP
    metadata: Mapping[str, str | None] | Keep | None = KEEP


@dataclass(frozen=True, slots=True)
class MemoryStoreQuery:
    """A page of memory stores, newest first; time bounds are inclusive."""

    limit: int = 20
    cursor: str | None = None  # the store's
    include_archived: bool = False
    created_after: datetime | None = None
    created_before: datetime | None = None


@dataclass(frozen=True, slots=True)
class CreateMemory:
    path: str
    content: str


@dataclass(frozen=True, slots=True)
class UpdateMemory:
    """``None``: leave it. ``expected_sha256``: apply only if the content still has this hash."""

    content: str | None = None
    path: str | None = None
    expected_sha256: str | None = None


@dataclass(frozen=True, slots=True)
class MemoryQuery:
    """Memories below ``path_prefix`` in path order; ``depth`` 0: all of them, ``n``: those at
    most ``n`` segments below it, the deeper ones rolled up into one :class:`MemoryPrefix` each."""

    path_prefix: str = "/"
    depth: int = 0
    limit: int = 20
    cursor: str | None = None
    full: bool = False


@dataclass(frozen=True, slots=True)
class MemoryPrefix:
    """A directory of memories a ``depth`` listing rolled up (``path`` ends with ``/``)."""

    path: str


@dataclass(frozen=True, slots=True)
class MemoryPage:
    items: Sequence[MemoryRecord | MemoryPrefix]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class MemoryVersionQuery:
    """A page of a store's versions, newest first; every given filter holds."""

    memory_id: str | None = None
    operation: str | None = None
    api_key_id: str | None = None
    session_id: str | None = None
    service_account_id: str | None = None  # Outpost has no service accounts: matches nothing
    created_after: datetime | None = None
    created_before: datetime | None = None
    limit: int = 20
    cursor: str | None = None
    full: bool = False


@dataclass(frozen=True, slots=True)
class MemoryVersionPage:
    items: Sequence[MemoryVersionRecord]
    next_cursor: str | None
