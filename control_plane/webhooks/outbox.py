"""The outbox: every webhook delivery is a ``webhook_delivery`` resource before it is sent.

:meth:`WebhookOutbox.emit` is what other parts call when something happened::

    await outbox.emit("deployment_run.failed", run_id, environment_id=env_id, cause=run_id)
    await outbox.emit("vault_credential.refresh_failed", credential_id, extra={"vault_id": vault_id},
                      cause=f"{credential_id}:{attempt_id}")

It builds the SDK's envelope once (:func:`~control_plane.webhooks.envelope.envelope_bytes`) and
writes one delivery per endpoint that wants it: enabled, created before the event, its
``event_types`` empty or naming the type, its environment none or the event's. A delivery's id is
derived from the endpoint and the event id, and the event id from ``cause`` and the type, so the
same event emitted again (a retry, another process deriving the same log event) writes nothing
new: ``create_resource`` raises ``Conflict``, which is the point. Without ``cause`` the event is new
each call.

A delivery's body (top-level fields, so the store filters on them)::

    endpoint_id, event_id, event_type, payload (the body sent, as text), state
    ("pending" | "delivered" | "failed"), attempts, next_attempt_at, claimed_by, claimed_until,
    last_status, last_error

The deliverer (:mod:`control_plane.webhooks.deliverer`) claims due pending deliveries with a
compare-and-set on the resource version, sends them, and archives each when it ends (delivered,
or failed for good); archived deliveries are pruned after ``webhooks.keep_days``.

Why the generic ``Resources`` role and no table of its own: versions give the compare-and-set
claim, deterministic ids give exactly-once records, archiving keeps listings of pending ones
short, ``prune_archived`` bounds growth; all three backends have it, across processes.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from datetime import datetime

from control_plane.errors import Conflict
from control_plane.store.base import Resource, Resources
from control_plane.timestamps import timestamp
from control_plane.webhooks.config import WebhookConfig
from control_plane.webhooks.envelope import EVENT_TYPES, envelope_bytes, event_id
from control_plane.webhooks.service import list_enabled_endpoints

__all__ = ["DELIVERY_KIND", "WebhookOutbox", "delivery_id", "wants"]

log = logging.getLogger(__name__)

DELIVERY_KIND = "webhook_delivery"


def delivery_id(endpoint_id: str, webhook_event_id: str) -> str:
    digest = hashlib.sha256(f"{endpoint_id}\x00{webhook_event_id}".encode()).hexdigest()
    return "whdl_" + digest[:32]


def wants(endpoint: Resource, event_type: str, environment_id: str | None, occurred_at: datetime) -> bool:
    """Whether ``endpoint`` gets an event of this type, environment and time."""
    body = endpoint.body
    types = body.get("event_types") or []
    scope = body.get("environment_id")
    return (
        bool(body.get("enabled"))
        and endpoint.created_at <= occurred_at
        and (not types or event_type in types)
        and (scope is None or scope == environment_id)
    )


class WebhookOutbox:
    """Records deliveries. ``wake``: called after new ones are written (the local deliverer's
    nudge; other processes find them by polling)."""

    def __init__(
        self,
        store: Resources,
        clock: Callable[[], datetime],
        config: WebhookConfig | None = None,
        *,
        wake: Callable[[], None] | None = None,
        endpoints_ttl_s: float = 0.0,
    ) -> None:
        self._store = store
        self._clock = clock
        self._config = config or WebhookConfig()
        self.wake = wake
        # The enabled endpoints as the session feed reads them (``cached=True``): at most once per
        # ``endpoints_ttl_s`` (0: on every call), as every append asks. A change made through this
        # process's API calls :meth:`forget_endpoints`; one made elsewhere holds here within the
        # TTL — no event is lost meanwhile, as every process derives the log's events (the
        # process that made the change, fresh, among them) to the same ids. Events only one
        # process emits (``session.created``, deployment runs ...) always read them fresh.
        self._endpoints_ttl_s = endpoints_ttl_s
        self._endpoints: tuple[float, list[Resource]] | None = None

    def now(self) -> datetime:
        return self._clock()

    async def endpoints(self, *, cached: bool = False) -> list[Resource]:
        held = self._endpoints
        if cached and held is not None and time.monotonic() - held[0] < self._endpoints_ttl_s:
            return held[1]
        read_at = time.monotonic()
        found = await list_enabled_endpoints(self._store, self._config.max_endpoints)
        if self._endpoints_ttl_s > 0:
            self._endpoints = (read_at, found)
        return found

    def forget_endpoints(self) -> None:
        """The endpoints changed: the next :meth:`endpoints` reads them again."""
        self._endpoints = None

    async def emit(
        self,
        event_type: str,
        subject_id: str,
        *,
        environment_id: str | None = None,
        extra: Mapping[str, str] | None = None,
        cause: str | None = None,
        occurred_at: datetime | None = None,
        endpoints: list[Resource] | None = None,
    ) -> str:
        """Record the event's deliveries; returns the webhook event's id. ``cause``: what makes
        this event this one (its repeat is not sent again); ``endpoints``: the enabled ones, if
        the caller read them already. Never raises for a store error on one delivery: it is
        logged (the event is lost for that endpoint, as a receiver down for good would lose it)."""
        if event_type not in EVENT_TYPES:
            raise ValueError(f"{event_type!r} is not a webhook event type of the SDK")
        when = occurred_at or self._clock()
        wid = event_id(cause if cause is not None else secrets.token_hex(16), event_type)
        targets = [
            e
            for e in (endpoints if endpoints is not None else await self.endpoints())
            if wants(e, event_type, environment_id, when)
        ]
        if not targets:
            return wid
        cfg = self._config
        payload = envelope_bytes(
            wid,
            event_type,
            subject_id,
            when,
            organization_id=cfg.organization_id,
            workspace_id=cfg.workspace_id,
            extra=extra,
        ).decode()
        now = self._clock()
        written = 0
        for endpoint in targets:
            body = {
                "endpoint_id": endpoint.id,
                "event_id": wid,
                "event_type": event_type,
                "payload": payload,
                "state": "pending",
                "attempts": 0,
                "next_attempt_at": timestamp(now),
                "claimed_by": None,
                "claimed_until": None,
                "last_status": None,
                "last_error": None,
            }
            try:
                await self._store.create_resource(DELIVERY_KIND, delivery_id(endpoint.id, wid), body, now)
                written += 1
            except Conflict:
                pass  # recorded already (by this process before, or by another one)
            except Exception as exc:
                log.error("webhook %s (%s) for %s not recorded: %s", wid, event_type, endpoint.id, exc)
        if written and self.wake is not None:
            self.wake()
        return wid
