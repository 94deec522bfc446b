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
    assert "user.define_outcome" in INPUT_EVENT_TYPES


RUBRIC = {"type": "text", "content": "The answer names the capital of France."}


def test_define_outcome_gets_an_outcome_id_and_the_default_iterations() -> None:
    [event] = parse_input_events(
        [{"type": "user.define_outcome", "description": "Answer.", "rubric": RUBRIC}]
    )
    assert event.type == "user.define_outcome"
    assert event.payload["outcome_id"].startswith("outc_") and len(event.payload["outcome_id"]) == 29
    assert event.payload["max_iterations"] == 3
    assert event.payload["rubric"] == RUBRIC and event.payload["description"] == "Answer."
    file_rubric = {"type": "file", "file_id": "file_1"}
    [other] = parse_input_events(
        [{"type": "user.define_outcome", "description": "A", "rubric": file_rubric, "max_iterations": 20}]
    )
    assert other.payload["max_iterations"] == 20 and other.payload["rubric"] == file_rubric
    assert other.payload["outcome_id"] != event.payload["outcome_id"]


@pytest.mark.parametrize(
    "changes",
    [
        {"max_iterations": 0},
        {"max_iterations": 21},
        {"max_iterations": "3"},
        {"max_iterations": True},
        {"description": ""},
        {"rubric": {"type": "text", "content": ""}},
        {"rubric": {"type": "text", "content": "x" * 262_145}},
        {"rubric": {"type": "file"}},
        {"rubric": {"type": "url", "url": "https://x"}},
        {"outcome_id": "outc_mine"},
    ],
)
def test_define_outcome_refusals(changes: dict[str, Any]) -> None:
    event = {"type": "user.define_outcome", "description": "Answer.", "rubric": RUBRIC, **changes}
    with pytest.raises(InvalidRequest) as caught:
        parse_input_events([event])
    assert caught.value.param == "events[0]"


def test_define_outcome_bounds_are_accepted() -> None:
    for bound in (1, 20):
        [event] = parse_input_events(
            [{"type": "user.define_outcome", "description": "A", "rubric": RUBRIC, "max_iterations": bound}]
        )
        assert event.payload["max_iterations"] == bound
