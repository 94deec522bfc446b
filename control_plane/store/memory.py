"""An in-memory :class:`~control_plane.store.base.Store` for unit tests.

It keeps everything in dicts and lists and follows the same contract as the SQLite store (the
contract suite in ``tests/contract`` runs against both). Documents are kept as JSON text and
decoded on every read, so a caller can never mutate stored state through a returned object and a
value JSON cannot hold is refused exactly as the durable stores refuse it.

Every method runs to completion without awaiting, so each one is atomic with respect to other
tasks on the event loop. Nothing survives the process.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from control_plane.errors import (
    Conflict,
    ControlPlaneError,
    Fenced,
    NotFound,
    SequenceConflict,
    TokenRejected,
    VersionConflict,
)
from control_plane.store import _codec as codec
from control_plane.store._memories_in_memory import InMemoryMemories
from control_plane.store.base import (
    MEMORY_STORE_KIND,
    ApiKeyRecord,
    AppendFeed,
    AppendListener,
    EdgeRecord,
    EnrollmentTokenRecord,
    Event,
    Lease,
    NewEvent,
    Order,
    Page,
    Resource,
)

__all__ = ["MemoryStore"]

_R = TypeVar("_R", EnrollmentTokenRecord, EdgeRecord, ApiKeyRecord)


@dataclass(slots=True)
class _Version:
    version: int
    body: str  # JSON text
    created_us: int
    updated_us: int
    archived_us: int | None


@dataclass(frozen=True, slots=True)
class _StoredEvent:
    id: str
    seq: int
    type: str
    payload: str  # JSON text
    processed_us: int


@dataclass(slots=True)
class _LeaseRow:
    holder: str | None  # None: released (the epoch is kept so it keeps counting up)
    epoch: int
    expires_us: int


def _resource(kind: str, id: str, row: _Version) -> Resource:
    return Resource(
        kind=kind,
        id=id,
        version=row.version,
        body=codec.loads(row.body),
        created_at=codec.from_us(row.created_us),
        updated_at=codec.from_us(row.updated_us),
        archived_at=codec.opt_from_us(row.archived_us),
    )


def _event(session_id: str, row: _StoredEvent) -> Event:
    return Event(
        id=row.id,
        session_id=session_id,
        seq=row.seq,
        type=row.type,
        payload=codec.loads(row.payload),
        processed_at=codec.from_us(row.processed_us),
    )


def _normalize(record: _R) -> _R:
    """The record with every datetime converted to UTC (naive ones refused)."""
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if isinstance(value, datetime):
            changes[f.name] = codec.from_us(codec.to_us(value, f.name))
    return dataclasses.replace(record, **changes)


class _MemoryFeed:
    """Listeners are called in the append itself: one process, nothing to poll."""

    def __init__(self, listeners: list[AppendListener], notify: AppendListener) -> None:
        self._listeners = listeners
        self._notify = notify

    async def close(self) -> None:
        with contextlib.suppress(ValueError):
            self._listeners.remove(self._notify)


class MemoryStore(InMemoryMemories):
    """A :class:`~control_plane.store.base.Store` held in process memory (its memories: the
    mixin in ``_memories_in_memory``)."""

    def __init__(self) -> None:
        self._closed = False
        self._resources: dict[tuple[str, str], _Version] = {}
        self._history: dict[tuple[str, str], dict[int, _Version]] = {}
        self._events: dict[str, list[_StoredEvent]] = {}  # index i holds seq i + 1
        self._event_seqs: dict[str, dict[str, int]] = {}  # session -> event id -> seq
        self._leases: dict[str, _LeaseRow] = {}
        self._sandbox_edges: dict[str, str] = {}
        self._presence: dict[str, tuple[str, int]] = {}  # edge id -> (holder, expires_us)
        self._wakes: dict[str, int] = {}  # session id -> requested at (us)
        self._nonces: dict[str, int] = {}  # key -> expires at (us)
        self._tokens: dict[str, EnrollmentTokenRecord] = {}
        self._token_ids_by_hash: dict[str, str] = {}
        self._edges: dict[str, EdgeRecord] = {}
        self._api_keys: dict[str, ApiKeyRecord] = {}
        self._api_key_ids_by_hash: dict[str, str] = {}
        self._listeners: list[AppendListener] = []
        self._init_memories()

    async def __aenter__(self) -> MemoryStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        self._closed = True

    async def ping(self) -> None:
        self._check_open()

    def _check_open(self) -> None:
        if self._closed:
            raise ControlPlaneError("the store is closed")

    def _memory_store_archived(self, store_id: str) -> bool:
        self._check_open()
        row = self._resources.get((MEMORY_STORE_KIND, store_id))
        if row is None:
            raise NotFound(MEMORY_STORE_KIND, store_id)
        return row.archived_us is not None

    # -- resources --------------------------------------------------------------------------

    async def create_resource(self, kind: str, id: str, body: Mapping[str, Any], now: datetime) -> Resource:
        self._check_open()
        text = codec.dumps(body, "body")
        now_us = codec.to_us(now)
        if (kind, id) in self._resources:
            raise Conflict(f"{kind} {id!r} exists already")
        row = _Version(1, text, now_us, now_us, None)
        self._resources[kind, id] = row
        return _resource(kind, id, row)

    async def get_resource(self, kind: str, id: str, version: int | None = None) -> Resource:
        self._check_open()
        row = self._resources.get((kind, id))
        if row is None:
            raise NotFound(kind, id)
        if version is None or version == row.version:
            return _resource(kind, id, row)
        old = self._history.get((kind, id), {}).get(version)
        if old is None:
            raise NotFound(f"{kind} version {version}", id)
        return _resource(kind, id, old)

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
        self._check_open()
        text = codec.dumps(body, "body")
        now_us = codec.to_us(now)
        row = self._resources.get((kind, id))
        if row is None:
            raise NotFound(kind, id)
        if expected_version is not None and expected_version != row.version:
            raise VersionConflict(kind, id, expected_version, row.version)
        if keep_history:
            self._history.setdefault((kind, id), {})[row.version] = dataclasses.replace(row)
        new = _Version(row.version + 1, text, row.created_us, now_us, row.archived_us)
        self._resources[kind, id] = new
        return _resource(kind, id, new)

    async def list_resources(
        self,
        kind: str,
        *,
        filters: Mapping[str, Any] | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        include_archived: bool = False,
        limit: int = 20,
        cursor: str | None = None,
        order: Order = Order.DESC,
    ) -> Page:
        self._check_open()
        wanted = codec.check_filters(filters)
        codec.check_limit(limit)
        after_us = codec.opt_to_us(created_after, "created_after")
        before_us = codec.opt_to_us(created_before, "created_before")
        position = None if cursor is None else codec.decode_resource_cursor(cursor)

        listing: list[tuple[tuple[int, str], _Version]] = []
        for (k, id), row in self._resources.items():
            if k != kind:
                continue
            if not include_archived and row.archived_us is not None:
                continue
            if after_us is not None and row.created_us < after_us:
                continue
            if before_us is not None and row.created_us > before_us:
                continue
            if wanted:
                body = codec.loads(row.body)
                if not all(codec.filter_matches(body, name, value) for name, value in wanted.items()):
                    continue
            listing.append(((row.created_us, id), row))
        listing.sort(key=lambda item: item[0], reverse=order is Order.DESC)

        def later(a: tuple[int, str], b: tuple[int, str]) -> bool:
            """``a`` comes after ``b`` in the listing order."""
            return a > b if order is Order.ASC else a < b

        if position is None:
            page, has_prev, has_next = listing[:limit], False, len(listing) > limit
        elif position.direction == "next":
            key = (position.created_us, position.id)
            rest = [item for item in listing if later(item[0], key)]
            page, has_next = rest[:limit], len(rest) > limit
            has_prev = bool(page) and later(page[0][0], listing[0][0])
        else:
            key = (position.created_us, position.id)
            rest = [item for item in listing if later(key, item[0])]
            page, has_prev = rest[-limit:], len(rest) > limit
            has_next = bool(page) and later(listing[-1][0], page[-1][0])
        if not page:
            return Page(items=[], next_cursor=None, prev_cursor=None)
        first, last = page[0][0], page[-1][0]
        return Page(
            items=[_resource(kind, key[1], row) for key, row in page],
            next_cursor=codec.encode_resource_cursor("next", *last) if has_next else None,
            prev_cursor=codec.encode_resource_cursor("prev", *first) if has_prev else None,
        )

    async def list_resource_versions(
        self, kind: str, id: str, *, limit: int = 20, cursor: str | None = None
    ) -> Page:
        self._check_open()
        codec.check_limit(limit)
        below = None if cursor is None else codec.decode_version_cursor(cursor)
        row = self._resources.get((kind, id))
        if row is None:
            raise NotFound(kind, id)
        rows = [row, *self._history.get((kind, id), {}).values()]
        rows.sort(key=lambda r: r.version, reverse=True)
        if below is not None:
            rows = [r for r in rows if r.version < below]
        page = rows[:limit]
        next_cursor = codec.encode_version_cursor(page[-1].version) if len(rows) > limit else None
        return Page(items=[_resource(kind, id, r) for r in page], next_cursor=next_cursor)

    async def archive_resource(self, kind: str, id: str, now: datetime) -> Resource:
        self._check_open()
        now_us = codec.to_us(now)
        row = self._resources.get((kind, id))
        if row is None:
            raise NotFound(kind, id)
        if row.archived_us is None:
            row.archived_us = now_us
            row.updated_us = now_us
        return _resource(kind, id, row)

    async def delete_resource(self, kind: str, id: str) -> None:
        self._check_open()
        if self._resources.pop((kind, id), None) is None:
            raise NotFound(kind, id)
        self._history.pop((kind, id), None)
        if kind == "session":
            self._events.pop(id, None)
            self._event_seqs.pop(id, None)
            self._leases.pop(id, None)
            self._sandbox_edges.pop(id, None)
            self._wakes.pop(id, None)
        if kind == MEMORY_STORE_KIND:
            self._forget_memory_store(id)

    # -- the session event log --------------------------------------------------------------

    async def append(
        self,
        session_id: str,
        events: Sequence[NewEvent],
        now: datetime,
        *,
        expected_seq: int | None = None,
        epoch: int | None = None,
    ) -> list[Event]:
        self._check_open()
        codec.check_new_events(events)
        now_us = codec.to_us(now)
        if epoch is not None:
            lease = self._leases.get(session_id)
            current = None if lease is None or lease.holder is None else lease.epoch
            if current != epoch:
                raise Fenced(session_id, epoch, current)
        log = self._events.get(session_id, [])
        seqs = self._event_seqs.get(session_id, {})
        fresh = [e for e in events if e.id not in seqs]
        if fresh and expected_seq is not None and expected_seq != len(log):
            raise SequenceConflict(session_id, expected_seq, len(log))
        # Serialize everything before touching the log: all or nothing.
        rows: dict[str, _StoredEvent] = {}
        next_seq = len(log) + 1
        for event in fresh:
            payload = codec.dumps(event.payload, "events.payload")
            rows[event.id] = _StoredEvent(event.id, next_seq, event.type, payload, now_us)
            next_seq += 1
        if rows:
            log = self._events.setdefault(session_id, log)
            seqs = self._event_seqs.setdefault(session_id, seqs)
            for row in rows.values():
                log.append(row)
                seqs[row.id] = row.seq
            for listener in list(self._listeners):
                listener(session_id, len(log))
        return [_event(session_id, log[seqs[e.id] - 1]) for e in events]

    async def get_events(
        self,
        session_id: str,
        *,
        after_seq: int = 0,
        before_seq: int | None = None,
        types: Sequence[str] | None = None,
        limit: int | None = None,
        order: Order = Order.ASC,
    ) -> list[Event]:
        self._check_open()
        log = self._events.get(session_id, [])
        start = max(after_seq, 0)
        stop = len(log) if before_seq is None else max(min(before_seq - 1, len(log)), 0)
        rows = log[start:stop]
        if order is Order.DESC:
            rows.reverse()
        if types is not None:
            wanted = set(types)
            rows = [r for r in rows if r.type in wanted]
        if limit is not None:
            rows = rows[: max(limit, 0)]
        return [_event(session_id, r) for r in rows]

    async def last_seq(self, session_id: str) -> int:
        self._check_open()
        return len(self._events.get(session_id, ()))

    async def last_seqs(self, session_ids: Sequence[str]) -> dict[str, int]:
        self._check_open()
        return {sid: len(self._events.get(sid, ())) for sid in session_ids}

    async def follow_appends(self, notify: AppendListener) -> AppendFeed:
        self._check_open()
        self._listeners.append(notify)
        return _MemoryFeed(self._listeners, notify)

    # -- leases -----------------------------------------------------------------------------

    async def acquire_lease(self, session_id: str, holder: str, ttl_s: float, now: datetime) -> Lease | None:
        self._check_open()
        now_us = codec.to_us(now)
        expires_us = codec.to_us(now + timedelta(seconds=ttl_s))
        row = self._leases.get(session_id)
        if row is None:
            row = self._leases[session_id] = _LeaseRow(holder, 1, expires_us)
        elif row.holder is not None and row.expires_us > now_us:
            if row.holder != holder:
                return None
            row.expires_us = expires_us
        else:
            row.holder, row.epoch, row.expires_us = holder, row.epoch + 1, expires_us
        return Lease(session_id, holder, row.epoch, codec.from_us(expires_us))

    async def renew_lease(
        self, session_id: str, holder: str, epoch: int, ttl_s: float, now: datetime
    ) -> Lease | None:
        self._check_open()
        expires_us = codec.to_us(now + timedelta(seconds=ttl_s))
        row = self._leases.get(session_id)
        if row is None or row.holder != holder or row.epoch != epoch:
            return None
        row.expires_us = expires_us
        return Lease(session_id, holder, epoch, codec.from_us(expires_us))

    async def release_lease(self, session_id: str, holder: str, epoch: int) -> None:
        self._check_open()
        row = self._leases.get(session_id)
        if row is not None and row.holder == holder and row.epoch == epoch:
            row.holder = None

    async def get_lease(self, session_id: str) -> Lease | None:
        self._check_open()
        row = self._leases.get(session_id)
        if row is None or row.holder is None:
            return None
        return Lease(session_id, row.holder, row.epoch, codec.from_us(row.expires_us))

    async def expired_leases(self, now: datetime, limit: int = 100) -> list[Lease]:
        self._check_open()
        now_us = codec.to_us(now)
        codec.check_limit(limit)
        expired = sorted(
            (row.expires_us, session_id, row.holder, row.epoch)
            for session_id, row in self._leases.items()
            if row.holder is not None and row.expires_us <= now_us
        )
        return [Lease(s, h, e, codec.from_us(x)) for x, s, h, e in expired[:limit]]

    # -- sandbox placement ------------------------------------------------------------------

    async def get_sandbox_edge(self, session_id: str) -> str | None:
        self._check_open()
        return self._sandbox_edges.get(session_id)

    async def set_sandbox_edge(self, session_id: str, edge_id: str | None) -> None:
        self._check_open()
        if edge_id is None:
            self._sandbox_edges.pop(session_id, None)
        else:
            self._sandbox_edges[session_id] = edge_id

    # -- edge presence ----------------------------------------------------------------------

    async def hold_edges(self, holder: str, edge_ids: Sequence[str], ttl_s: float, now: datetime) -> None:
        self._check_open()
        expires_us = codec.to_us(now + timedelta(seconds=ttl_s))
        seen = codec.from_us(codec.to_us(now))
        for edge_id in edge_ids:
            self._presence[edge_id] = (holder, expires_us)
            edge = self._edges.get(edge_id)
            if edge is not None:
                self._edges[edge_id] = dataclasses.replace(edge, last_seen_at=seen)

    async def release_edges(self, holder: str, edge_ids: Sequence[str]) -> None:
        self._check_open()
        for edge_id in edge_ids:
            if self._presence.get(edge_id, ("", 0))[0] == holder:
                del self._presence[edge_id]

    async def edge_holder(self, edge_id: str, now: datetime) -> str | None:
        self._check_open()
        record = self._presence.get(edge_id)
        if record is None or record[1] <= codec.to_us(now):
            return None
        return record[0]

    async def edge_holders(self, now: datetime) -> dict[str, str]:
        self._check_open()
        now_us = codec.to_us(now)
        return {edge_id: holder for edge_id, (holder, until) in self._presence.items() if until > now_us}

    # -- wake requests ----------------------------------------------------------------------

    async def request_wake(self, session_id: str, now: datetime) -> None:
        self._check_open()
        self._wakes.setdefault(session_id, codec.to_us(now))

    async def wake_requests(self, limit: int = 100) -> list[str]:
        self._check_open()
        codec.check_limit(limit)
        return [sid for _, sid in sorted((at, sid) for sid, at in self._wakes.items())][:limit]

    async def clear_wake(self, session_id: str) -> None:
        self._check_open()
        self._wakes.pop(session_id, None)

    # -- one-time nonces --------------------------------------------------------------------

    async def use_nonce(self, key: str, expires_at: datetime, now: datetime) -> bool:
        self._check_open()
        now_us = codec.to_us(now)
        for old in [k for k, until in self._nonces.items() if until <= now_us]:
            del self._nonces[old]
        if key in self._nonces:
            return False
        self._nonces[key] = codec.to_us(expires_at)
        return True

    # -- enrollment and edges -----------------------------------------------------------------

    async def create_enrollment_token(self, record: EnrollmentTokenRecord) -> None:
        self._check_open()
        record = _normalize(record)
        if record.id in self._tokens:
            raise Conflict(f"enrollment token {record.id!r} exists already")
        if record.token_hash in self._token_ids_by_hash:
            raise Conflict("an enrollment token with this hash exists already")
        self._tokens[record.id] = record
        self._token_ids_by_hash[record.token_hash] = record.id

    async def consume_enrollment_token(
        self, token_hash: str, edge_id: str, now: datetime
    ) -> EnrollmentTokenRecord:
        self._check_open()
        now_us = codec.to_us(now)
        token_id = self._token_ids_by_hash.get(token_hash)
        if token_id is None:
            raise TokenRejected("unknown")
        record = self._tokens[token_id]
        if record.revoked_at is not None:
            raise TokenRejected("revoked")
        if record.used_at is not None:
            raise TokenRejected("used")
        if codec.to_us(record.expires_at) <= now_us:
            raise TokenRejected("expired")
        record = dataclasses.replace(record, used_at=codec.from_us(now_us), used_by_edge_id=edge_id)
        self._tokens[token_id] = record
        return record

    async def list_enrollment_tokens(self, environment_id: str | None = None) -> list[EnrollmentTokenRecord]:
        self._check_open()
        return sorted(
            (
                r
                for r in self._tokens.values()
                if environment_id is None or r.environment_id == environment_id
            ),
            key=lambda r: (r.created_at, r.id),
        )

    async def revoke_enrollment_token(self, token_id: str, now: datetime) -> EnrollmentTokenRecord:
        self._check_open()
        record = self._tokens.get(token_id)
        if record is None:
            raise NotFound("enrollment token", token_id)
        if record.used_at is not None:
            raise Conflict(
                f"enrollment token {token_id!r} was used already (by edge {record.used_by_edge_id})"
            )
        if record.revoked_at is None:
            record = self._tokens[token_id] = dataclasses.replace(
                record, revoked_at=codec.from_us(codec.to_us(now))
            )
        return record

    async def create_edge(self, record: EdgeRecord) -> None:
        self._check_open()
        record = _normalize(record)
        if record.id in self._edges:
            raise Conflict(f"edge {record.id!r} exists already")
        self._edges[record.id] = record

    async def get_edge(self, edge_id: str) -> EdgeRecord:
        self._check_open()
        record = self._edges.get(edge_id)
        if record is None:
            raise NotFound("edge", edge_id)
        return record

    async def get_edges(self, edge_ids: Sequence[str]) -> list[EdgeRecord]:
        self._check_open()
        return sorted(
            (self._edges[i] for i in set(edge_ids) if i in self._edges), key=lambda r: (r.created_at, r.id)
        )

    async def list_edges(self, environment_id: str | None = None) -> list[EdgeRecord]:
        self._check_open()
        return sorted(
            (r for r in self._edges.values() if environment_id is None or r.environment_id == environment_id),
            key=lambda r: (r.created_at, r.id),
        )

    async def revoke_edge(self, edge_id: str, now: datetime) -> EdgeRecord:
        self._check_open()
        now_us = codec.to_us(now)
        record = self._edges.get(edge_id)
        if record is None:
            raise NotFound("edge", edge_id)
        record = self._edges[edge_id] = dataclasses.replace(
            record,
            revoked_at=record.revoked_at or codec.from_us(now_us),
            previous_cert_fingerprint=None,
            previous_cert_not_after=None,
        )
        return record

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
        self._check_open()
        not_after_us = codec.to_us(not_after, "not_after")
        now_us = codec.to_us(now)
        record = self._edges.get(edge_id)
        if record is None:
            raise NotFound("edge", edge_id)
        if record.revoked_at is not None:
            raise Conflict(f"edge {edge_id!r} is revoked")
        previous_live = (
            record.previous_cert_not_after is not None
            and codec.to_us(record.previous_cert_not_after) > now_us
        )
        if renewed_from == record.cert_fingerprint:
            from_not_after = record.cert_not_after
        elif renewed_from == record.previous_cert_fingerprint and previous_live:
            assert record.previous_cert_not_after is not None
            from_not_after = record.previous_cert_not_after
        else:
            raise Conflict(f"the certificate edge {edge_id!r} renewed from is no longer accepted")
        record = self._edges[edge_id] = dataclasses.replace(
            record,
            cert_serial=serial,
            cert_fingerprint=fingerprint,
            cert_not_after=codec.from_us(not_after_us),
            previous_cert_fingerprint=renewed_from,
            previous_cert_not_after=from_not_after,
        )
        return record

    async def forget_previous_edge_certificate(self, edge_id: str, current_fingerprint: str) -> EdgeRecord:
        self._check_open()
        record = self._edges.get(edge_id)
        if record is None:
            raise NotFound("edge", edge_id)
        if record.cert_fingerprint == current_fingerprint and record.previous_cert_fingerprint is not None:
            record = self._edges[edge_id] = dataclasses.replace(
                record, previous_cert_fingerprint=None, previous_cert_not_after=None
            )
        return record

    # -- API keys ------------------------------------------------------------------------------

    async def create_api_key(self, record: ApiKeyRecord) -> None:
        self._check_open()
        record = _normalize(record)
        if record.environment_ids is not None:
            record = dataclasses.replace(record, environment_ids=tuple(record.environment_ids))
        if record.id in self._api_keys:
            raise Conflict(f"API key {record.id!r} exists already")
        if record.key_hash in self._api_key_ids_by_hash:
            raise Conflict("an API key with this hash exists already")
        self._api_keys[record.id] = record
        self._api_key_ids_by_hash[record.key_hash] = record.id

    async def find_api_key(self, key_hash: str) -> ApiKeyRecord | None:
        self._check_open()
        key_id = self._api_key_ids_by_hash.get(key_hash)
        return None if key_id is None else self._api_keys[key_id]

    async def get_api_key(self, key_id: str) -> ApiKeyRecord:
        self._check_open()
        record = self._api_keys.get(key_id)
        if record is None:
            raise NotFound("api_key", key_id)
        return record

    async def list_api_keys(self) -> list[ApiKeyRecord]:
        self._check_open()
        return sorted(self._api_keys.values(), key=lambda r: (r.created_at, r.id))

    async def revoke_api_key(self, key_id: str, now: datetime) -> ApiKeyRecord:
        record = await self.get_api_key(key_id)
        if record.revoked_at is None:
            record = self._api_keys[key_id] = dataclasses.replace(
                record, revoked_at=codec.from_us(codec.to_us(now))
            )
        return record

    async def touch_api_key(self, key_id: str, now: datetime) -> None:
        self._check_open()
        record = self._api_keys.get(key_id)
        now = codec.from_us(codec.to_us(now))
        if record is not None and (record.last_used_at is None or record.last_used_at < now):
            self._api_keys[key_id] = dataclasses.replace(record, last_used_at=now)

    # -- retention ------------------------------------------------------------------------------

    async def prune_archived(self, kind: str, archived_before: datetime, limit: int = 100) -> list[str]:
        self._check_open()
        codec.check_limit(limit)
        before_us = codec.to_us(archived_before, "archived_before")
        due = sorted(
            (row.archived_us, id)
            for (k, id), row in self._resources.items()
            if k == kind and row.archived_us is not None and row.archived_us < before_us
        )[:limit]
        for _, id in due:
            await self.delete_resource(kind, id)
        return [id for _, id in due]

    async def forget_lease(self, session_id: str) -> bool:
        self._check_open()
        row = self._leases.get(session_id)
        if row is None or row.holder is not None:
            return False
        del self._leases[session_id]
        return True

    async def prune_enrollment_tokens(self, before: datetime, limit: int = 500) -> int:
        self._check_open()
        codec.check_limit(limit)
        before = codec.from_us(codec.to_us(before, "before"))
        done = [
            r
            for r in self._tokens.values()
            if min(t for t in (r.used_at, r.revoked_at, r.expires_at) if t is not None) < before
        ][:limit]
        for record in done:
            del self._tokens[record.id]
            self._token_ids_by_hash.pop(record.token_hash, None)
        return len(done)
