"""What a session's log event gives as webhooks, and that every produced type's envelope is one the
SDK's ``BetaWebhookEvent`` union parses strictly (the right member, every field present)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from anthropic.types.beta.beta_webhook_event import BetaWebhookEvent
from pydantic import TypeAdapter

from control_plane.store.base import Event
from control_plane.webhooks.envelope import (
    EVENT_TYPES,
    PRODUCED_TYPES,
    envelope_bytes,
    event_id,
    from_log_event,
)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
_EXTRA = {
    "session.thread_created": {"session_thread_id": "sthr_1"},
    "session.thread_idled": {"session_thread_id": "sthr_1"},
    "session.thread_terminated": {"session_thread_id": "sthr_1"},
    "vault_credential.refresh_failed": {"vault_id": "vlt_1"},
}


def _event(type_: str, **payload: object) -> Event:
    return Event("sevt_1", "sesn_1", 3, type_, dict(payload), NOW)


def test_log_events_map_to_the_sdk_webhook_types() -> None:
    assert [t for t, _ in from_log_event(_event("session.status_running"))] == [
        "session.running",
        "session.status_run_started",
    ]
    idle = _event("session.status_idle", stop_reason={"type": "requires_action", "event_ids": ["x"]})
    assert [t for t, _ in from_log_event(idle)] == [
        "session.idled",
        "session.status_idled",
        "session.requires_action",
    ]
    budget = _event("session.status_idle", stop_reason={"type": "budget_reached"})
    assert "session.budget_reached" in [t for t, _ in from_log_event(budget)]
    thread = _event("session.thread_created", session_thread_id="sthr_9", agent_name="helper")
    assert from_log_event(thread) == [("session.thread_created", {"session_thread_id": "sthr_9"})]
    assert from_log_event(_event("session.thread_created")) == []  # no thread id: nothing to send
    assert from_log_event(_event("agent.message", content=[])) == []


def test_ids_are_stable_per_cause_and_type() -> None:
    assert event_id("sevt_1", "session.idled") == event_id("sevt_1", "session.idled")
    assert event_id("sevt_1", "session.idled") != event_id("sevt_1", "session.status_idled")
    assert event_id("sevt_1", "session.idled").startswith("wevt_")


def test_every_produced_type_parses_strictly_as_the_sdk_event() -> None:
    assert PRODUCED_TYPES <= EVENT_TYPES
    adapter = TypeAdapter(BetaWebhookEvent)
    for type_ in sorted(PRODUCED_TYPES):
        body = envelope_bytes(
            event_id("c", type_),
            type_,
            "subj_1",
            NOW,
            organization_id="org_x",
            workspace_id="wrkspc_x",
            extra=_EXTRA.get(type_),
        )
        parsed = adapter.validate_json(body)
        assert parsed.data.type == type_
        missing = set(type(parsed.data).model_fields) - parsed.data.model_fields_set
        assert not missing, (type_, missing)
        assert json.loads(body)["created_at"] == "2026-03-01T12:00:00Z"
