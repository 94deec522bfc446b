"""``parse_input_events``: strict validation of client events, whole batch or nothing."""

from __future__ import annotations

from typing import Any

import pytest

from control_plane.errors import InvalidRequest
from control_plane.sessions.events import INPUT_EVENT_TYPES
from control_plane.sessions.input_events import parse_input_events

TEXT = [{"type": "text", "text": "hi"}]


def test_payloads_are_the_event_without_type_and_ids_are_fresh() -> None:
    events = parse_input_events(
        [
            {"type": "user.message", "content": TEXT},
            {"type": "user.interrupt", "session_thread_id": None},
            {"type": "user.tool_result", "tool_use_id": "sevt_1", "is_error": False},
        ]
    )
    assert [e.type for e in events] == ["user.message", "user.interrupt", "user.tool_result"]
    assert events[0].payload == {"content": TEXT}
    assert events[1].payload == {}
    assert events[2].payload == {"tool_use_id": "sevt_1", "is_error": False}
    assert len({e.id for e in events}) == 3
    assert all(e.id.startswith("sevt_") for e in events)


def test_system_message_after_a_message_is_accepted() -> None:
    events = parse_input_events(
        [{"type": "user.message", "content": TEXT}, {"type": "system.message", "content": TEXT}]
    )
    assert events[1].payload == {"content": TEXT}


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        ({"type": "user.message"}, "events"),
        ([{"type": "nope"}], "events[0].type"),
        ([{"type": "user.message", "content": TEXT}, {"type": "session.error"}], "events[1].type"),
        ([{"type": "user.message", "content": [{"type": "text", "text": 3}]}], "events[0]"),
        ([{"type": "user.message", "content": [{"type": "text", "text": ""}]}], "events[0]"),
        ([{"type": "user.custom_tool_result", "custom_tool_use_id": "x", "is_error": "yes"}], "events[0]"),
        ([{"type": "user.interrupt", "extra": 1}], "events[0]"),
        (
            [
                {"type": "user.message", "content": TEXT},
                {"type": "system.message", "content": TEXT},
                {"type": "system.message", "content": TEXT},
            ],
            "events",
        ),
    ],
)
def test_refusals_name_the_place(raw: Any, param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_input_events(raw)
    assert caught.value.param == param


def test_allowed_and_max_events() -> None:
    with pytest.raises(InvalidRequest, match="cannot be sent here"):
        parse_input_events([{"type": "user.interrupt"}], allowed={"user.message"}, param="initial_events")
    with pytest.raises(InvalidRequest, match="at most 2"):
        parse_input_events([{"type": "user.interrupt"}] * 3, max_events=2)
    assert "user.define_outcome" not in INPUT_EVENT_TYPES
