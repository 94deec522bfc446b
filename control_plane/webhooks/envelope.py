"""Webhook events as the SDK reads them: the catalog of types, the envelope, stable ids, and the
webhook events a session's log gives.

A webhook body is the SDK's ``BetaWebhookEvent``::

    {"type": "event", "id": "wevt_...", "created_at": "<RFC 3339>",
     "data": {"type": "session.idled", "id": "sesn_...", "organization_id": "...", "workspace_id": "..."}}

``data`` is one member of ``BetaWebhookEventData`` (discriminated by ``type``): the subject's id,
the organization and workspace (Outpost has neither; they come from the configuration) and, for
some types, one more id (``session_thread_id``, ``vault_id``). Ids are derived from what caused
the event (:func:`event_id`), so every process that derives the same event names it the same, and
a receiver dedupes by it (it is also the ``webhook-id`` header).

Session events come from the log (:func:`from_log_event`); the rest are emitted by the service
that knows of them (:meth:`~control_plane.webhooks.outbox.WebhookOutbox.emit`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import datetime

from control_plane.store.base import Event
from control_plane.timestamps import timestamp

__all__ = [
    "EVENT_TYPES",
    "LOG_EVENT_TYPES",
    "PRODUCED_TYPES",
    "envelope_bytes",
    "event_id",
    "from_log_event",
]

_SESSION_TYPES = (
    *("created", "pending", "running", "idled", "requires_action", "archived", "deleted", "updated"),
    *("budget_reached", "outcome_evaluation_ended", "status_idled", "status_rescheduled"),
    *("status_run_started", "status_terminated", "thread_created", "thread_idled", "thread_terminated"),
)

#: Every type of the SDK's ``BetaWebhookEventData`` union (anthropic 2.16): an endpoint's filter
#: may name any of them; :data:`PRODUCED_TYPES` are the ones Outpost sends today.
EVENT_TYPES: frozenset[str] = frozenset(
    {
        *(f"session.{s}" for s in _SESSION_TYPES),
        *(f"agent.{s}" for s in ("created", "updated", "archived", "deleted")),
        *(f"environment.{s}" for s in ("created", "updated", "archived", "deleted")),
        *(f"deployment.{s}" for s in ("created", "updated", "paused", "unpaused", "archived", "deleted")),
        *(f"deployment_run.{s}" for s in ("started", "succeeded", "failed")),
        *(f"memory_store.{s}" for s in ("created", "archived", "deleted")),
        *(f"vault.{s}" for s in ("created", "archived", "deleted")),
        *(f"vault_credential.{s}" for s in ("created", "archived", "deleted", "refresh_failed")),
        "user_profile.enforcement_action_opened",
        "user_profile.enforcement_action_resolved",
        "user_profile.program_status_updated",
        "external_key.failed",
        "external_key.recovered",
        "external_storage.failed",
        "external_storage.recovered",
    }
)

#: What a log event of a session gives: log type -> webhook types (``session.status_idle`` more,
#: by its stop reason: see :func:`from_log_event`).
_FROM_LOG: Mapping[str, tuple[str, ...]] = {
    "session.status_running": ("session.running", "session.status_run_started"),
    "session.status_idle": ("session.idled", "session.status_idled"),
    "session.status_rescheduled": ("session.status_rescheduled",),
    "session.status_terminated": ("session.status_terminated",),
    "session.updated": ("session.updated",),
    "session.thread_created": ("session.thread_created",),
    "session.thread_status_idle": ("session.thread_idled",),
    "session.thread_status_terminated": ("session.thread_terminated",),
    "span.outcome_evaluation_end": ("session.outcome_evaluation_ended",),
}
_BY_STOP_REASON = {"requires_action": "session.requires_action", "budget_reached": "session.budget_reached"}

#: The log event types the session feed reads.
LOG_EVENT_TYPES: tuple[str, ...] = tuple(_FROM_LOG)

#: What Outpost sends: from the log, from the session service (created, archived, deleted) and
#: through ``emit`` (deployment runs, vault credential refreshes).
PRODUCED_TYPES: frozenset[str] = frozenset(
    {
        *(t for types in _FROM_LOG.values() for t in types),
        *_BY_STOP_REASON.values(),
        "session.created",
        "session.archived",
        "session.deleted",
        "deployment_run.started",
        "deployment_run.succeeded",
        "deployment_run.failed",
        "vault_credential.refresh_failed",
    }
)
_THREADED = frozenset({"session.thread_created", "session.thread_idled", "session.thread_terminated"})


def event_id(cause: str, event_type: str) -> str:
    """The webhook event's id: the same for the same cause and type, in every process."""
    digest = hashlib.sha256(f"{cause}\x00{event_type}".encode()).hexdigest()
    return "wevt_" + digest[:24]


def envelope_bytes(
    id: str,
    event_type: str,
    subject_id: str,
    created_at: datetime,
    *,
    organization_id: str,
    workspace_id: str,
    extra: Mapping[str, str] | None = None,
) -> bytes:
    """The body sent, byte for byte (it is signed as it is stored)."""
    data = {
        "type": event_type,
        "id": subject_id,
        "organization_id": organization_id,
        "workspace_id": workspace_id,
        **(extra or {}),
    }
    body = {"type": "event", "id": id, "created_at": timestamp(created_at), "data": data}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def from_log_event(event: Event) -> list[tuple[str, dict[str, str]]]:
    """The webhook events (type, extra ``data`` fields) a session's log event gives."""
    types = list(_FROM_LOG.get(event.type, ()))
    if event.type == "session.status_idle":
        reason = event.payload.get("stop_reason")
        by_reason = _BY_STOP_REASON.get(reason.get("type", "") if isinstance(reason, dict) else "")
        if by_reason is not None:
            types.append(by_reason)
    out: list[tuple[str, dict[str, str]]] = []
    for event_type in types:
        extra: dict[str, str] = {}
        if event_type in _THREADED:
            thread_id = event.payload.get("session_thread_id")
            if not isinstance(thread_id, str) or not thread_id:
                continue  # the SDK's model requires it
            extra["session_thread_id"] = thread_id
        out.append((event_type, extra))
    return out
