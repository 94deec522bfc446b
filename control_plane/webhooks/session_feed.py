"""``session.*`` webhooks, derived from the session event log (the log is the truth).

:class:`SessionWebhookFeed` follows the store's feed of appends (``EventLog.follow_appends``, the
feed :class:`~control_plane.log_follower.LogFollower` uses: appends by any process reach every
process). For a session with new events it reads the log past the session's **cursor** (a
``webhook_cursor`` resource holding the last seq turned into webhooks), turns each event into its
webhook events (:func:`~control_plane.webhooks.envelope.from_log_event`: ``session.status_idle``
gives ``session.idled`` + ``session.status_idled`` (+ ``session.requires_action`` or
``session.budget_reached`` by its stop reason), ``session.status_running`` gives
``session.running`` + ``session.status_run_started`` ...), records their deliveries in the outbox,
and moves the cursor on. The webhook event's id is derived from the log event's id, so every
process that derives it (each follows the same feed) writes the same deliveries: the first write
wins, the others get ``Conflict`` and write nothing. A crash between the outbox writes and the
cursor just derives the same events again, to the same ids.

Nothing is lost while no process runs: at start (and when the feed says notices may have been
lost) every session's last seq is compared with its cursor. Endpoints get only events that
happened after they were created, so an endpoint made later is not flooded with history. While
there is no enabled endpoint the feed reads nothing and writes no cursor.

``session.created``, ``session.archived`` and ``session.deleted`` have no log event of their own (a
session may be created without one; a deleted session's log is gone): the session service calls
:class:`SessionLifecycleWebhooks` for them, after the change is durable.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from control_plane.errors import Conflict, NotFound
from control_plane.store.base import AppendFeed, EventLog, Order, Resource, Resources
from control_plane.webhooks.envelope import LOG_EVENT_TYPES, from_log_event
from control_plane.webhooks.outbox import WebhookOutbox

__all__ = ["CURSOR_KIND", "SessionLifecycleWebhooks", "SessionWebhookFeed"]

log = logging.getLogger(__name__)

CURSOR_KIND = "webhook_cursor"
_BATCH = 500
_SCAN_PAGE = 200
_MAX_KNOWN = 10_000


class _Store(Resources, EventLog, Protocol):
    """The roles the feed uses."""


class SessionWebhookFeed:
    def __init__(self, store: _Store, outbox: WebhookOutbox) -> None:
        self._store = store
        self._outbox = outbox
        self._feed: AppendFeed | None = None
        self._task: asyncio.Task[None] | None = None
        self._dirty: dict[str, None] = {}  # sessions to catch up, in notice order
        self._known: dict[str, int] = {}  # session -> seq its webhooks are derived up to
        self._rescan = True
        self._wakeup = asyncio.Event()
        self.derived = 0  # webhook events derived by this process (tests, metrics)

    # -- catching up -------------------------------------------------------------------------
    async def catch_up(self, session_id: str) -> int:
        """Derive the webhooks of the session's events past its cursor; returns how many."""
        endpoints = await self._outbox.endpoints(cached=True)
        if not endpoints:
            return 0
        upto = await self._store.last_seq(session_id)
        cursor = await self._cursor(session_id)
        done = int(cursor.body["seq"]) if cursor is not None else 0
        if upto <= done:
            self._remember(session_id, done)
            return 0
        try:
            session = await self._store.get_resource("session", session_id)
        except NotFound:
            return 0  # deleted meanwhile: its log is gone too
        environment_id = session.body.get("environment_id")
        count, after = 0, done
        while after < upto:
            events = await self._store.get_events(
                session_id, after_seq=after, before_seq=upto + 1, types=LOG_EVENT_TYPES, limit=_BATCH
            )
            for event in events:
                for event_type, extra in from_log_event(event):
                    await self._outbox.emit(
                        event_type,
                        session_id,
                        environment_id=environment_id if isinstance(environment_id, str) else None,
                        extra=extra,
                        cause=event.id,
                        occurred_at=event.processed_at,
                        endpoints=endpoints,
                    )
                    count += 1
            after = events[-1].seq if len(events) == _BATCH else upto
        await self._advance(session_id, cursor, upto)
        self._remember(session_id, upto)
        self.derived += count
        return count

    async def _cursor(self, session_id: str) -> Resource | None:
        try:
            return await self._store.get_resource(CURSOR_KIND, session_id)
        except NotFound:
            return None

    async def _advance(self, session_id: str, cursor: Resource | None, seq: int) -> None:
        """Move the cursor to ``seq`` unless another process moved it as far (or further)."""
        for _ in range(3):
            now = self._outbox.now()
            try:
                if cursor is None:
                    await self._store.create_resource(CURSOR_KIND, session_id, {"seq": seq}, now)
                elif int(cursor.body["seq"]) < seq:
                    await self._store.update_resource(
                        CURSOR_KIND, session_id, {"seq": seq}, now, expected_version=cursor.version
                    )
                return
            except Conflict:
                cursor = await self._cursor(session_id)
                if cursor is not None and int(cursor.body["seq"]) >= seq:
                    return

    def _remember(self, session_id: str, seq: int) -> None:
        if len(self._known) >= _MAX_KNOWN:
            self._known.clear()
        self._known[session_id] = seq

    async def scan(self) -> int:
        """Mark every session whose log is past what this process knows as to be caught up;
        returns how many were marked (nothing while there is no enabled endpoint)."""
        if not await self._outbox.endpoints(cached=True):
            return 0
        marked, cursor = 0, None
        while True:
            page = await self._store.list_resources(
                "session", include_archived=True, limit=_SCAN_PAGE, cursor=cursor, order=Order.ASC
            )
            seqs = await self._store.last_seqs([r.id for r in page.items])
            for session_id, seq in seqs.items():
                if seq > self._known.get(session_id, 0):
                    self._dirty[session_id] = None
                    marked += 1
            cursor = page.next_cursor
            if cursor is None:
                return marked

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        if self._task is None:
            self._feed = await self._store.follow_appends(self._on_notice)
            self._task = asyncio.create_task(self._loop(), name="webhook-session-feed")
            self._wakeup.set()  # the first round scans

    async def close(self) -> None:
        """Stop following. Idempotent; a catch-up cut short is done again by the next start."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})
        if self._feed is not None:
            await self._feed.close()
            self._feed = None

    def _on_notice(self, session_id: str | None, last_seq: int) -> None:
        if session_id is None:
            self._rescan = True
        elif last_seq > self._known.get(session_id, 0):
            self._dirty[session_id] = None
        self._wakeup.set()

    async def _loop(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            try:
                if self._rescan:
                    self._rescan = False
                    await self.scan()
                while self._dirty:
                    session_id = next(iter(self._dirty))
                    del self._dirty[session_id]
                    await self.catch_up(session_id)
            except Exception as exc:
                log.warning("webhook session feed: catching up failed (rescan on the next notice): %s", exc)
                self._rescan = True


class SessionLifecycleWebhooks:
    """What the session service calls after a session was created, archived or deleted
    (``session.created`` / ``session.archived`` / ``session.deleted``). Never raises: the change is
    durable already; a failure to record the webhook is logged."""

    def __init__(self, store: Resources, outbox: WebhookOutbox) -> None:
        self._store = store
        self._outbox = outbox

    async def session_changed(self, change: str, session_id: str, environment_id: str | None) -> None:
        try:
            await self._outbox.emit(
                f"session.{change}", session_id, environment_id=environment_id, cause=session_id
            )
            if change == "deleted":
                await self._store.delete_resource(CURSOR_KIND, session_id)
        except NotFound:
            pass
        except Exception:
            log.exception("webhook session.%s for %s not recorded", change, session_id)


class DeploymentRunWebhooks:
    """The deployments' run listener (``control_plane.deployments.RunListener``):
    ``deployment_run.started`` / ``.succeeded`` / ``.failed`` for a recorded run, scoped to its
    deployment's environment. Never raises: the run is recorded already; a failure to record the
    webhook is logged."""

    def __init__(self, store: Resources, outbox: WebhookOutbox) -> None:
        self._store = store
        self._outbox = outbox

    async def __call__(self, event: str, run: Resource) -> None:
        try:
            deployment = await self._store.get_resource("deployment", str(run.body.get("deployment_id")))
            environment_id = deployment.body.get("environment_id")
            await self._outbox.emit(
                event,
                run.id,
                environment_id=environment_id if isinstance(environment_id, str) else None,
                cause=run.id,
            )
        except Exception:
            log.exception("webhook %s for %s not recorded", event, run.id)


class RefreshFailedWebhooks:
    """The vault's OAuth refresher's ``on_refresh_failed``: ``vault_credential.refresh_failed``,
    once per access token that could not be refreshed (the token's expiry is the cause, so a
    refresh failing on every tool call until the token expires sends one webhook)."""

    def __init__(self, store: Resources, outbox: WebhookOutbox) -> None:
        self._store = store
        self._outbox = outbox

    async def __call__(self, vault_id: str, credential_id: str) -> None:
        try:
            res = await self._store.get_resource("vault_credential", credential_id)
            expires = res.body.get("auth", {}).get("expires_at")
            await self._outbox.emit(
                "vault_credential.refresh_failed",
                credential_id,
                extra={"vault_id": vault_id},
                cause=f"{credential_id}:{expires}",
            )
        except Exception:
            log.exception("webhook vault_credential.refresh_failed for %s not recorded", credential_id)
