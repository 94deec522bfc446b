"""The control plane's store interface: resources, the session event log, leases and edge identity.

Everything above this module talks to these protocols only. The store has four roles, each a small
protocol with its own contract tests: :class:`Resources` (versioned documents), :class:`EventLog`
(append, read slices, last seq, the feed of appends), :class:`Coordination` (leases, placement,
presence, wakes, nonces), :class:`Identity` (enrollment tokens, edges, API keys) and
:class:`Memories` (the memories of memory stores and their versions); :class:`Store` is all five
in one object, as every backend provides them. Implementations: ``sqlite.SqliteStore``
(default, one file, WAL), ``memory.MemoryStore`` (tests) and ``postgres.PostgresStore``. A contract
test suite (``tests/contract``) runs against every implementation, so a new backend is done when
that suite passes.

Rules every implementation follows:

* Methods are ``async``; an implementation that wraps a synchronous driver does so at one seam.
* Times are timezone-aware UTC ``datetime`` objects, passed in by the caller (``now``) where the
  outcome depends on them, so tests control the clock.
* Resource bodies are JSON-compatible dicts; the store does not interpret them except for the
  fields named in ``list_resources`` filters.
* No method returns a secret: tokens and API keys are stored and looked up by hash only.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

__all__ = [
    "FEED_DELAY_S",
    "MEMORY_STORE_KIND",
    "ApiKeyRecord",
    "AppendFeed",
    "AppendListener",
    "Coordination",
    "EdgeRecord",
    "EnrollmentTokenRecord",
    "Event",
    "EventLog",
    "Identity",
    "Lease",
    "Memories",
    "MemoryActor",
    "MemoryRecord",
    "MemoryVersionFilter",
    "MemoryVersionRecord",
    "MemoryWrite",
    "NewEvent",
    "Order",
    "Page",
    "Resource",
    "Resources",
    "Store",
]


class Order(enum.Enum):
    ASC = "asc"
    DESC = "desc"


@dataclass(frozen=True, slots=True)
class Resource:
    """A versioned JSON document of one kind (``agent``, ``environment``, ``session``, ``vault`` ...)."""

    kind: str
    id: str
    version: int  # starts at 1, +1 on every update
    body: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    archived_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Page:
    items: list[Resource]
    next_cursor: str | None  # opaque; pass back as ``cursor`` to get the next page
    prev_cursor: str | None = None


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append. ``id`` is assigned by the caller (the API or the harness) so that a
    retried append is idempotent; ``payload`` is the event's JSON without ``id``, ``type`` and
    ``processed_at``."""

    id: str
    type: str
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Event:
    id: str
    session_id: str
    seq: int  # 1, 2, 3 ... per session, no gaps
    type: str
    payload: dict[str, Any]
    processed_at: datetime


@dataclass(frozen=True, slots=True)
class Lease:
    session_id: str
    holder: str  # who holds it (a harness id)
    epoch: int  # +1 every time the lease changes hands; fences appends
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class EnrollmentTokenRecord:
    id: str
    environment_id: str
    token_hash: str  # sha256 hex of the token; the token itself is never stored
    created_at: datetime
    expires_at: datetime
    used_at: datetime | None = None
    used_by_edge_id: str | None = None
    revoked_at: datetime | None = None  # an unused token the operator withdrew: it enrolls nothing


@dataclass(frozen=True, slots=True)
class EdgeRecord:
    id: str
    environment_id: str
    name: str
    cert_serial: str  # hex serial of the client certificate we issued
    cert_fingerprint: str  # sha256 hex of the certificate's DER
    created_at: datetime
    cert_not_after: datetime
    revoked_at: datetime | None = None
    #: The certificate this edge renewed from, still accepted until the edge first authenticates
    #: with its current one or until it expires (``None``: only the current one is accepted).
    previous_cert_fingerprint: str | None = None
    previous_cert_not_after: datetime | None = None
    #: When a control-plane process last recorded the edge's tunnel as up (``hold_edges``).
    last_seen_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class ApiKeyRecord:
    id: str
    name: str
    key_hash: str  # sha256 hex
    created_at: datetime
    revoked_at: datetime | None = None
    #: ``admin`` (everything, and the keys themselves), ``read_write`` or ``read_only``
    #: (``control_plane.api.caller``); the least power unless said otherwise.
    scope: str = "read_only"
    #: The environments the key may see (their sessions, edges, tokens); ``None``: every one.
    environment_ids: tuple[str, ...] | None = None
    expires_at: datetime | None = None  # None: until revoked
    last_used_at: datetime | None = None  # kept to the minute (``touch_api_key``)


MEMORY_STORE_KIND = "memory_store"  # the resource kind whose memories :class:`Memories` holds


@dataclass(frozen=True, slots=True)
class MemoryActor:
    """Who wrote a memory version (or redacted one): ``type`` is ``api_actor`` (``id``: the API
    key's id) or ``session_actor`` (``id``: the session's id)."""

    type: str
    id: str


@dataclass(frozen=True, slots=True)
class MemoryWrite:
    """What every write records on the version it appends: its id (assigned by the caller), who
    wrote and when."""

    version_id: str
    actor: MemoryActor | None
    now: datetime


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """A memory as it stands. ``content`` is ``None`` when it was not asked for."""

    id: str
    store_id: str
    path: str
    content: str | None
    content_sha256: str  # lowercase hex of the UTF-8 content
    content_size_bytes: int
    version_id: str  # the version holding the current content
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class MemoryVersionRecord:
    """One write of a memory. ``seq`` orders a store's versions (1, 2, 3 ... in commit order).
    ``deleted`` versions carry the path but no content; a redacted one carries neither (its
    ``content_sha256`` and ``content_size_bytes`` are ``None`` too). ``content`` is also ``None``
    when it was not asked for."""

    id: str
    store_id: str
    memory_id: str
    seq: int
    operation: str  # created | modified | deleted
    path: str | None
    content: str | None
    content_sha256: str | None
    content_size_bytes: int | None
    created_by: MemoryActor | None
    created_at: datetime
    redacted_at: datetime | None = None
    redacted_by: MemoryActor | None = None


@dataclass(frozen=True, slots=True)
class MemoryVersionFilter:
    """Which versions ``list_memory_versions`` returns (every given condition holds; time bounds
    inclusive). ``after_seq`` / ``before_seq`` bound the store's ``seq`` (exclusive): the cursor
    of a listing, or "what changed since" for a session that keeps a copy of the store."""

    memory_id: str | None = None
    operation: str | None = None
    actor: MemoryActor | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    after_seq: int | None = None
    before_seq: int | None = None


AppendListener = Callable[[str | None, int], None]
"""``(session_id, last_seq)`` after an append; ``(None, 0)``: notices may have been lost."""

FEED_DELAY_S = 0.05
"""How soon after an append its notice reaches every follower (polling backends poll this often)."""


class AppendFeed(Protocol):
    async def close(self) -> None: ...


class Resources(Protocol):
    """Versioned JSON documents by kind (agents, environments, sessions, vaults, credentials)."""

    async def create_resource(self, kind: str, id: str, body: Mapping[str, Any], now: datetime) -> Resource:
        """Insert version 1. Raises ``Conflict`` if the id exists."""

    async def get_resource(self, kind: str, id: str, version: int | None = None) -> Resource:
        """Latest version, or the given one (kept for kinds updated with ``keep_history``)."""

    async def update_resource(
        self,
        kind: str,
        id: str,
        body: Mapping[str, Any],
        now: datetime,
        *,
        expected_version: int | None = None,
        keep_history: bool = False,
    ) -> Resource:
        """Replace the body, version + 1. ``expected_version`` mismatch raises ``VersionConflict``.
        With ``keep_history`` the previous version stays readable through ``get_resource(version=)``."""

    async def list_resources(
        self,
        kind: str,
        *,
        filters: Mapping[str, Any] | None = None,  # top-level body field -> required value
        created_after: datetime | None = None,  # inclusive bounds
        created_before: datetime | None = None,
        include_archived: bool = False,
        limit: int = 20,
        cursor: str | None = None,
        order: Order = Order.DESC,
    ) -> Page: ...

    async def list_resource_versions(
        self, kind: str, id: str, *, limit: int = 20, cursor: str | None = None
    ) -> Page:
        """Every stored version, newest first."""

    async def archive_resource(self, kind: str, id: str, now: datetime) -> Resource: ...

    async def delete_resource(self, kind: str, id: str) -> None:
        """Delete the resource; for sessions also their events and lease."""

    async def prune_archived(self, kind: str, archived_before: datetime, limit: int = 100) -> list[str]:
        """Retention: delete up to ``limit`` resources of ``kind`` archived before
        ``archived_before``, the longest archived first, as ``delete_resource`` does (a session
        with its events, lease, sandbox placement and wake request). Returns the ids deleted;
        fewer than ``limit`` means none is left. Safe from several processes at once (each is
        deleted once); one call's work is bounded, so it never holds the writer long (a backend
        may delete a long log in several transactions, the resource last)."""


class EventLog(Protocol):
    """The sessions' append-only event logs, and the feed of appends every replica can follow."""

    async def append(
        self,
        session_id: str,
        events: Sequence[NewEvent],
        now: datetime,
        *,
        expected_seq: int | None = None,
        epoch: int | None = None,
    ) -> list[Event]:
        """Durably append ``events`` in order; returns them as stored.

        * Idempotent by event id: events whose id is already in the log are not written again and
          are returned as stored. If every id is already present the call succeeds whatever
          ``expected_seq`` says (it is a retry of an append that landed).
        * ``expected_seq``: the caller's view of the last seq; if the log has moved on, raise
          ``SequenceConflict`` and write nothing.
        * ``epoch``: the writer's lease epoch; if the session's lease has a different epoch (or
          none), raise ``Fenced`` and write nothing. ``None`` means an unfenced writer (the API
          appending user input).
        * All-or-nothing: either every new event is written, or none is.
        """

    async def get_events(
        self,
        session_id: str,
        *,
        after_seq: int = 0,
        before_seq: int | None = None,
        types: Sequence[str] | None = None,
        limit: int | None = None,
        order: Order = Order.ASC,
    ) -> list[Event]: ...

    async def last_seq(self, session_id: str) -> int:
        """0 for an empty log."""

    async def last_seqs(self, session_ids: Sequence[str]) -> dict[str, int]:
        """The last seq of each of ``session_ids`` in one read (0 for an empty or unknown log)."""

    async def follow_appends(self, notify: AppendListener) -> AppendFeed:
        """Start calling ``notify(session_id, last_seq)`` after appends to any session's log, by
        any process on this store (this one included), within ``FEED_DELAY_S`` or so; stop with
        the returned feed's ``close()``. Notices may repeat or come late, never carry a seq the log
        does not hold yet. When notices may have been lost (a dropped connection to the
        database), ``notify(None, 0)`` says so: the listener then re-reads what it follows
        (``last_seqs``). Listeners must be quick and must not raise."""


class Coordination(Protocol):
    """Who runs what: session leases, sandbox placement, edge presence, wake requests, nonces."""

    async def acquire_lease(self, session_id: str, holder: str, ttl_s: float, now: datetime) -> Lease | None:
        """Take the lease if it is free or expired (epoch + 1), or renew it if ``holder`` holds it
        (same epoch). Returns ``None`` if another holder has a live lease."""

    async def renew_lease(
        self, session_id: str, holder: str, epoch: int, ttl_s: float, now: datetime
    ) -> Lease | None:
        """Extend a held lease; ``None`` if it was lost (expired and taken, or released)."""

    async def release_lease(self, session_id: str, holder: str, epoch: int) -> None: ...

    async def get_lease(self, session_id: str) -> Lease | None:
        """The session's lease as it stands, ``None`` if it was never taken or has been released.
        An expired lease nobody took over yet is returned as is: compare ``expires_at`` with the
        time. Changes nothing (the credential broker reads it to fence a zombie harness)."""

    async def expired_leases(self, now: datetime, limit: int = 100) -> list[Lease]:
        """Leases past their expiry, for the harness to ``wake``."""

    # -- sandbox placement (which edge holds a session's sandbox and workspace) ----------------
    async def get_sandbox_edge(self, session_id: str) -> str | None:
        """The edge recorded as holding the session's sandbox, ``None`` if none is."""

    async def set_sandbox_edge(self, session_id: str, edge_id: str | None) -> None:
        """Record the edge holding the session's sandbox (``None``: forget it). Last write wins:
        only the holder of the session's lease moves its sandbox. Deleting the session forgets it."""

    # -- edge presence (which control-plane process holds each edge's tunnel) -----------------
    async def hold_edges(self, holder: str, edge_ids: Sequence[str], ttl_s: float, now: datetime) -> None:
        """Record that the control-plane process ``holder`` holds the tunnels of ``edge_ids`` until
        ``now + ttl_s`` (it refreshes them while it does). An edge has one tunnel: the last
        process to record it wins. ``now`` also becomes the ``last_seen_at`` of those of
        ``edge_ids`` that are enrolled edges."""

    async def release_edges(self, holder: str, edge_ids: Sequence[str]) -> None:
        """Forget those of ``edge_ids`` that ``holder`` recorded (their tunnels closed)."""

    async def edge_holder(self, edge_id: str, now: datetime) -> str | None:
        """The process holding the edge's tunnel, ``None`` if no unexpired record says so."""

    async def edge_holders(self, now: datetime) -> dict[str, str]:
        """Every edge with an unexpired presence record, and the process holding its tunnel."""

    # -- wake requests (work one process noticed and another must run) -------------------------
    async def request_wake(self, session_id: str, now: datetime) -> None:
        """Ask whichever process may run the session to wake it (its sweep reads these). Asking
        again keeps the first request's time."""

    async def wake_requests(self, limit: int = 100) -> list[str]:
        """Session ids with a wake request, oldest request first."""

    async def clear_wake(self, session_id: str) -> None:
        """The session is being run: forget its wake request (if any)."""

    # -- one-time nonces (proof-of-possession tokens work once, on every process) -------------
    async def use_nonce(self, key: str, expires_at: datetime, now: datetime) -> bool:
        """Record ``key`` until ``expires_at``: ``True`` the first time, ``False`` while an earlier
        record of it has not expired. Expired records are pruned as a side effect."""

    async def forget_lease(self, session_id: str) -> bool:
        """The session has ended (archived or terminated): delete its lease if it is released.
        A held lease stays, expired or not (its holder may still write: the epoch keeps fencing
        it; the harness that next takes it releases it and forgets it). Returns whether a lease
        was deleted. A later ``acquire_lease`` starts again at epoch 1, so call it only for
        sessions that run no more."""


class Identity(Protocol):
    """Who may connect: enrollment tokens, enrolled edges and their certificates, API keys."""

    async def create_enrollment_token(self, record: EnrollmentTokenRecord) -> None: ...

    async def consume_enrollment_token(
        self, token_hash: str, edge_id: str, now: datetime
    ) -> EnrollmentTokenRecord:
        """Atomically mark the token used. Raises ``TokenRejected`` with reason ``unknown``,
        ``revoked``, ``used`` or ``expired``."""

    async def list_enrollment_tokens(self, environment_id: str | None = None) -> list[EnrollmentTokenRecord]:
        """Every token (of one environment, if given), oldest first (by ``created_at``, then id)."""

    async def revoke_enrollment_token(self, token_id: str, now: datetime) -> EnrollmentTokenRecord:
        """Withdraw an unused token: it enrolls nothing from now on (the first revocation stands).
        ``NotFound`` for an unknown id; ``Conflict`` for a token already used (revoke the edge it
        enrolled instead)."""

    async def create_edge(self, record: EdgeRecord) -> None: ...

    async def get_edge(self, edge_id: str) -> EdgeRecord: ...

    async def list_edges(self, environment_id: str | None = None) -> list[EdgeRecord]: ...

    async def get_edges(self, edge_ids: Sequence[str]) -> list[EdgeRecord]:
        """The edges of ``edge_ids`` that exist, in one read, oldest first (unknown ids are left
        out)."""

    async def revoke_edge(self, edge_id: str, now: datetime) -> EdgeRecord:
        """Mark the edge revoked (the first revocation stands) and forget its previous certificate.
        ``NotFound`` if there is no such edge."""

    async def renew_edge_certificate(
        self,
        edge_id: str,
        serial: str,
        fingerprint: str,
        not_after: datetime,
        now: datetime,
        *,
        renewed_from: str,
    ) -> EdgeRecord:
        """Record a newly issued certificate as the edge's current one, atomically.

        ``renewed_from`` is the fingerprint of the certificate the edge authenticated with to
        renew: its current one, or its previous one not expired at ``now`` (an edge that lost the
        answer to its last renewal). That certificate becomes the previous one (with its
        ``not_after``), so an edge that does not get to save the new certificate can still
        authenticate with the one it holds; any other previous certificate is forgotten.

        Raises ``NotFound`` for an unknown edge, and ``Conflict`` (writing nothing) if the edge is
        revoked or ``renewed_from`` is neither its current nor its live previous certificate (a
        concurrent renewal or a revocation won the race)."""

    async def forget_previous_edge_certificate(self, edge_id: str, current_fingerprint: str) -> EdgeRecord:
        """Stop accepting the edge's previous certificate, if its current certificate is still
        ``current_fingerprint`` (so a renewal that happened in between is not undone). Returns the
        record as it stands; ``NotFound`` if there is no such edge."""

    # -- API keys ------------------------------------------------------------------------------
    async def create_api_key(self, record: ApiKeyRecord) -> None: ...

    async def find_api_key(self, key_hash: str) -> ApiKeyRecord | None:
        """The key with this hash, revoked or expired ones too (the caller decides)."""

    async def get_api_key(self, key_id: str) -> ApiKeyRecord:
        """``NotFound`` for an unknown id."""

    async def list_api_keys(self) -> list[ApiKeyRecord]:
        """Every key, revoked and expired ones too, oldest first (by ``created_at``, then id)."""

    async def revoke_api_key(self, key_id: str, now: datetime) -> ApiKeyRecord:
        """Mark the key revoked (the first revocation stands). ``NotFound`` for an unknown id."""

    async def touch_api_key(self, key_id: str, now: datetime) -> None:
        """Record ``now`` as the key's ``last_used_at`` unless a later time is recorded already
        (an unknown id is ignored)."""

    async def prune_enrollment_tokens(self, before: datetime, limit: int = 500) -> int:
        """Retention: delete up to ``limit`` enrollment tokens that enroll nothing since before
        ``before`` (used, revoked or expired before it). Returns how many were deleted; fewer
        than ``limit`` means none is left."""


class Memories(Protocol):
    """The memories of memory stores (resources of kind ``memory_store``) and their versions.

    Every write is one transaction that checks the store exists (``NotFound`` with kind
    ``memory_store``) and, for creates and updates, is not archived (``InvalidRequest``), checks
    its preconditions, changes the memory and appends one version (``MemoryWrite``): so two
    writers holding the same ``expected_sha256`` cannot both win, and the versions of a store
    are in the order the writes committed. Paths are compared byte for byte (case-sensitive) and
    listed in code-point order; the caller validates them (``control_plane.memory.limits``).
    Deleting the memory store (``delete_resource``, ``prune_archived``) deletes its memories and
    versions with it."""

    async def create_memory(
        self, store_id: str, memory_id: str, path: str, content: str, write: MemoryWrite, *, max_memories: int
    ) -> MemoryRecord:
        """A new memory at ``path`` with a ``created`` version. ``MemoryPathConflict`` if a
        memory holds the path; ``InvalidRequest`` if the store holds ``max_memories`` already."""

    async def get_memory(self, store_id: str, memory_id: str, *, with_content: bool = True) -> MemoryRecord:
        """``NotFound`` (kind ``memory``) for a memory that is not (or no longer) in the store."""

    async def update_memory(
        self,
        store_id: str,
        memory_id: str,
        write: MemoryWrite,
        *,
        content: str | None = None,
        path: str | None = None,
        expected_sha256: str | None = None,
    ) -> MemoryRecord:
        """Change the content and/or the path (``None``: keep). ``MemoryPreconditionFailed`` if
        ``expected_sha256`` is given and is not the current content's; ``MemoryPathConflict`` if
        another memory holds the new path. A change that changes nothing appends no version and
        returns the memory as it is."""

    async def delete_memory(
        self, store_id: str, memory_id: str, write: MemoryWrite, *, expected_sha256: str | None = None
    ) -> None:
        """Delete the memory (its versions stay) with a ``deleted`` version; the precondition as
        for ``update_memory``. Works on an archived store."""

    async def list_memories(
        self,
        store_id: str,
        *,
        path_prefix: str = "/",
        path_from: str | None = None,
        limit: int = 20,
        with_content: bool = False,
    ) -> list[MemoryRecord]:
        """Up to ``limit`` memories whose path starts with ``path_prefix`` and is not before
        ``path_from`` (inclusive), in path order."""

    async def get_memory_version(
        self, store_id: str, version_id: str, *, with_content: bool = True
    ) -> MemoryVersionRecord:
        """``NotFound`` (kind ``memory_version``) for a version not in the store."""

    async def list_memory_versions(
        self,
        store_id: str,
        query: MemoryVersionFilter,
        *,
        limit: int = 20,
        order: Order = Order.DESC,
        with_content: bool = False,
    ) -> list[MemoryVersionRecord]:
        """Up to ``limit`` versions matching ``query``, by ``seq`` (newest first by default)."""

    async def redact_memory_version(
        self, store_id: str, version_id: str, actor: MemoryActor | None, now: datetime
    ) -> MemoryVersionRecord:
        """Clear the version's path and content (sha and size too), recording who and when; the
        record stays. Redacting again changes nothing. ``InvalidRequest`` for the version holding
        a live memory's current content (change or delete the memory first). Works on an
        archived store."""


class Store(Resources, EventLog, Coordination, Identity, Memories, Protocol):
    """Durable state of the control plane: every role in one object. Errors raised: see
    ``control_plane.errors`` (``NotFound``, ``VersionConflict``, ``SequenceConflict``, ``Fenced``,
    ``TokenRejected``). Services should be typed with the roles they use, not ``Store``."""

    async def close(self) -> None: ...

    async def ping(self) -> None:
        """Return if the store answers now; raise ``ControlPlaneError`` saying why not (closed,
        unreachable). For readiness probes: cheap, changes nothing."""
        ...
