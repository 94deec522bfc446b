"""``client.beta.sessions.events.send`` / ``list``: every accepted input event type round-trips into
the SDK's typed events; a bad batch is refused whole, leaving the log untouched."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import anthropic
import pytest
from anthropic.types.beta.sessions.beta_managed_agents_send_session_events import (
    BetaManagedAgentsSendSessionEvents,
)

from control_plane.sessions.events import new_event_id
from control_plane.store.base import NewEvent
from tests.support.api_app import Api, assert_valid

TEXT = [{"type": "text", "text": "hello"}]

EVERY_INPUT: list[dict[str, Any]] = [
    {
        "type": "user.message",
        "content": [
            {"type": "text", "text": "look at this"},
            {"type": "image", "source": {"type": "base64", "data": "aGk=", "media_type": "image/png"}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
            {"type": "document", "source": {"type": "text", "data": "notes", "media_type": "text/plain"}},
            {"type": "document", "source": {"type": "file", "file_id": "file_1"}, "title": "spec"},
        ],
    },
    {"type": "user.interrupt"},
    {"type": "user.tool_confirmation", "tool_use_id": "sevt_1", "result": "allow"},
    {"type": "user.tool_confirmation", "tool_use_id": "sevt_2", "result": "deny", "deny_message": "no"},
    {
        "type": "user.custom_tool_result",
        "custom_tool_use_id": "sevt_3",
        "content": [
            {
                "type": "search_result",
                "source": "https://example.com",
                "title": "Example",
                "content": [{"type": "text", "text": "result"}],
                "citations": {"enabled": True},
            }
        ],
        "is_error": False,
    },
    {"type": "user.tool_result", "tool_use_id": "sevt_4", "content": TEXT, "is_error": True},
    {"type": "system.message", "content": [{"type": "text", "text": "be brief"}]},
]


async def _waiting_for(api: Api, session_id: str, event_ids: list[str]) -> None:
    """Put the session in ``requires_action`` on these tool uses, as the harness would."""
    idle = NewEvent(
        new_event_id(),
        "session.status_idle",
        {"stop_reason": {"type": "requires_action", "event_ids": event_ids}},
    )
    await api.store.append(session_id, [idle], datetime.now(UTC))


async def test_send_every_input_type_and_list(api: Api) -> None:
    session = await api.session()
    await _waiting_for(api, session.id, ["sevt_1", "sevt_2", "sevt_3", "sevt_4"])
    sent = await api.client.beta.sessions.events.send(session.id, events=EVERY_INPUT)
    assert isinstance(sent, BetaManagedAgentsSendSessionEvents)
    assert sent.data is not None
    assert [e.type for e in sent.data] == [e["type"] for e in EVERY_INPUT]
    for event in sent.data:
        assert_valid(event)
        assert event.id.startswith("sevt_")
        assert event.processed_at is not None
    assert api.runner.wakes(session.id) == 1

    listed = [e async for e in api.client.beta.sessions.events.list(session.id)][1:]  # after the idle
    assert [e.id for e in listed] == [e.id for e in sent.data]
    for event in listed:
        assert_valid(event)
    message = listed[0]
    assert message.type == "user.message"
    assert message.content[1].type == "image"
    confirmation = listed[3]
    assert confirmation.type == "user.tool_confirmation"
    assert confirmation.deny_message == "no"


async def test_list_pages_order_types_and_times(api: Api) -> None:
    session = await api.session()
    events = api.client.beta.sessions.events
    sent = []
    for i in range(5):
        reply = await events.send(
            session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": str(i)}]}]
        )
        assert reply.data is not None
        sent.extend(reply.data)
    t0 = datetime.now(UTC)
    marker = NewEvent(new_event_id(), "session.status_running")
    await api.store.append(session.id, [marker], t0 + timedelta(hours=1))
    ids = [e.id for e in sent] + [marker.id]

    first = await events.list(session.id, limit=2)
    assert [e.id for e in first.data] == ids[:2]
    assert first.next_page
    assert [e.id async for e in events.list(session.id, limit=2)] == ids
    assert [e.id async for e in events.list(session.id, limit=4, order="desc")] == ids[::-1]
    assert [e.id async for e in events.list(session.id, types=["session.status_running"])] == [marker.id]
    assert [
        e.id async for e in events.list(session.id, types=["user.message"], limit=3, order="desc")
    ] == ids[4::-1]
    later = [e.id async for e in events.list(session.id, created_at_gt=t0 + timedelta(minutes=30))]
    assert later == [marker.id]
    earlier = [e.id async for e in events.list(session.id, created_at_lt=t0 + timedelta(minutes=30), limit=2)]
    assert earlier == ids[:5]
    with pytest.raises(anthropic.BadRequestError, match="types"):
        await events.list(session.id, types=["no.such_type"])
    with pytest.raises(anthropic.BadRequestError, match="page"):
        await events.list(session.id, page="not-a-cursor")


@pytest.mark.parametrize(
    ("events", "match"),
    [
        (
            [{"type": "user.message", "content": TEXT}, {"type": "agent.mesage", "content": TEXT}],
            "unknown event type 'agent.mesage'",
        ),
        (
            [{"type": "user.message", "content": TEXT}, {"type": "agent.message", "content": TEXT}],
            "cannot be sent",
        ),
        (
            [
                {"type": "user.message", "content": TEXT},
                {
                    "type": "user.define_outcome",
                    "description": "x",
                    "rubric": {"type": "text", "content": "y"},
                    "max_iterations": 0,
                },
            ],
            r"events\[1\]\.max_iterations",
        ),
        ([{"type": "user.message", "content": [{"type": "text"}]}], r"events\[0\]\.content\[0\]"),
        ([{"type": "user.message", "content": TEXT, "id": "sevt_mine"}], "id"),
        ([{"type": "user.message", "content": [{"type": "video", "url": "x"}]}], "video"),
        (
            [{"type": "user.tool_confirmation", "tool_use_id": "a", "result": "allow", "deny_message": "x"}],
            "deny_message",
        ),
        ([{"type": "user.tool_confirmation", "tool_use_id": "a", "result": "maybe"}], "result"),
        ([{"type": "user.tool_result", "tool_use_id": 7}], "tool_use_id"),
        ([{"type": "system.message", "content": TEXT}], "must directly follow"),
        (
            [{"type": "system.message", "content": TEXT}, {"type": "user.message", "content": TEXT}],
            "must be the last",
        ),
        ([{"content": TEXT}], "type is required"),
        (["user.message"], "must be an object"),
        ([], "at least one"),
    ],
)
async def test_bad_batches_write_nothing(api: Api, events: list[Any], match: str) -> None:
    session = await api.session()
    with pytest.raises(anthropic.BadRequestError, match=match) as caught:
        await api.client.beta.sessions.events.send(session.id, events=events)
    assert caught.value.type == "invalid_request_error"
    assert await api.store.last_seq(session.id) == 0
    assert api.runner.wakes(session.id) == 0


async def test_send_to_terminated_or_unknown_session(api: Api) -> None:
    session = await api.session()
    stored = await api.store.append(
        session.id, [NewEvent(new_event_id(), "session.status_terminated")], datetime.now(UTC)
    )
    with pytest.raises(anthropic.BadRequestError, match="terminated"):
        await api.client.beta.sessions.events.send(
            session.id, events=[{"type": "user.message", "content": TEXT}]
        )
    assert await api.store.last_seq(session.id) == stored[-1].seq
    with pytest.raises(anthropic.NotFoundError):
        await api.client.beta.sessions.events.send(
            "sesn_nope", events=[{"type": "user.message", "content": TEXT}]
        )
    assert (await api.client.beta.sessions.retrieve(session.id)).status == "terminated"


async def test_answers_only_for_tool_uses_the_session_waits_on(api: Api) -> None:
    """Confirmations and tool results for unknown or already-answered ids are refused whole."""
    events = api.client.beta.sessions.events
    session = await api.session()

    def confirm(tool_use_id: str) -> dict[str, Any]:
        return {"type": "user.tool_confirmation", "tool_use_id": tool_use_id, "result": "allow"}

    custom = {"type": "user.custom_tool_result", "custom_tool_use_id": "sevt_b", "content": TEXT}
    with pytest.raises(anthropic.BadRequestError, match="not waiting"):  # nothing is pending
        await events.send(session.id, events=[confirm("sevt_a")])
    await _waiting_for(api, session.id, ["sevt_a", "sevt_b"])
    before = await api.store.last_seq(session.id)
    for batch in (
        [confirm("sevt_nope")],  # unknown id
        [confirm("sevt_a"), confirm("sevt_a")],  # the same id twice in one batch
        [confirm("sevt_a"), confirm("sevt_zzz")],  # one bad event refuses the batch
    ):
        with pytest.raises(anthropic.BadRequestError, match="not waiting") as caught:
            await events.send(session.id, events=batch)
        assert caught.value.type == "invalid_request_error"
    assert await api.store.last_seq(session.id) == before
    await events.send(session.id, events=[confirm("sevt_a"), custom])
    for again in (confirm("sevt_a"), custom):  # already answered
        with pytest.raises(anthropic.BadRequestError, match="already answered"):
            await events.send(session.id, events=[again])
    assert await api.store.last_seq(session.id) == before + 2
