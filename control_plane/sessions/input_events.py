"""Validation of the events clients send (``POST /v1/sessions/{id}/events``, ``initial_events``).

:func:`parse_input_events` checks a whole batch before anything is written: one bad event refuses
the batch with :class:`~control_plane.errors.InvalidRequest` naming the event and the field. The
models mirror the SDK's ``*EventParams`` types field for field, strictly (no coercion, no unknown
keys), so what is stored is exactly what the SDK's response types can parse back.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from control_plane.errors import InvalidRequest
from control_plane.sessions.events import EVENT_TYPES, INPUT_EVENT_TYPES, new_event_id
from control_plane.sessions.outcome_evaluations import (
    MAX_ITERATIONS,
    MAX_RUBRIC_CHARS,
    define_outcome_payload,
)
from control_plane.store.base import NewEvent

__all__ = ["UNSUPPORTED_INPUT_EVENT_TYPES", "format_validation_error", "parse_input_events"]

UNSUPPORTED_INPUT_EVENT_TYPES: dict[str, str] = {}

_NonEmpty = Annotated[str, Field(min_length=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# -- content blocks ------------------------------------------------------------------------------


class TextBlock(_Strict):
    type: Literal["text"]
    text: _NonEmpty


class Base64Source(_Strict):
    type: Literal["base64"]
    data: _NonEmpty
    media_type: _NonEmpty


class UrlSource(_Strict):
    type: Literal["url"]
    url: _NonEmpty


class FileSource(_Strict):
    type: Literal["file"]
    file_id: _NonEmpty


class PlainTextSource(_Strict):
    type: Literal["text"]
    data: str
    media_type: Literal["text/plain"]


ImageSource = Annotated[Base64Source | UrlSource | FileSource, Field(discriminator="type")]
DocumentSource = Annotated[
    Base64Source | PlainTextSource | UrlSource | FileSource, Field(discriminator="type")
]


class ImageBlock(_Strict):
    type: Literal["image"]
    source: ImageSource


class DocumentBlock(_Strict):
    type: Literal["document"]
    source: DocumentSource
    context: str | None = None
    title: str | None = None


class RedactedBlock(_Strict):
    type: Literal["redacted"]


class SearchResultCitations(_Strict):
    enabled: bool


class SearchResultBlock(_Strict):
    type: Literal["search_result"]
    citations: SearchResultCitations
    content: list[TextBlock]
    source: str
    title: str


UserContent = Annotated[TextBlock | ImageBlock | DocumentBlock | RedactedBlock, Field(discriminator="type")]
ResultContent = Annotated[
    TextBlock | ImageBlock | DocumentBlock | SearchResultBlock, Field(discriminator="type")
]


# -- events --------------------------------------------------------------------------------------


class UserMessage(_Strict):
    type: Literal["user.message"]
    content: Annotated[list[UserContent], Field(min_length=1)]


class UserInterrupt(_Strict):
    type: Literal["user.interrupt"]
    session_thread_id: str | None = None


class UserToolConfirmation(_Strict):
    type: Literal["user.tool_confirmation"]
    session_thread_id: str | None = None  # multiagent: the thread whose call it answers
    tool_use_id: _NonEmpty
    result: Literal["allow", "deny"]
    deny_message: str | None = None

    @model_validator(mode="after")
    def _deny_message_only_on_deny(self) -> UserToolConfirmation:
        if self.deny_message is not None and self.result != "deny":
            raise ValueError("deny_message is only allowed when result is 'deny'")
        return self


class UserCustomToolResult(_Strict):
    type: Literal["user.custom_tool_result"]
    session_thread_id: str | None = None  # multiagent: the thread whose call it answers
    custom_tool_use_id: _NonEmpty
    content: list[ResultContent] | None = None
    is_error: bool | None = None


class UserToolResult(_Strict):
    type: Literal["user.tool_result"]
    session_thread_id: str | None = None  # multiagent: the thread whose call it answers
    tool_use_id: _NonEmpty
    content: list[ResultContent] | None = None
    is_error: bool | None = None


class SystemMessage(_Strict):
    type: Literal["system.message"]
    content: Annotated[list[TextBlock], Field(min_length=1)]


class TextRubric(_Strict):
    type: Literal["text"]
    content: Annotated[str, Field(min_length=1, max_length=MAX_RUBRIC_CHARS)]


class FileRubric(_Strict):
    type: Literal["file"]
    file_id: _NonEmpty


class UserDefineOutcome(_Strict):
    """Outcomes: ``max_iterations`` 1 to 20 (absent: 3; see ``outcome_evaluations``)."""

    type: Literal["user.define_outcome"]
    description: _NonEmpty
    rubric: Annotated[TextRubric | FileRubric, Field(discriminator="type")]
    max_iterations: Annotated[int, Field(ge=1, le=MAX_ITERATIONS)] | None = None


_MODELS: dict[str, type[_Strict]] = {
    "user.message": UserMessage,
    "user.interrupt": UserInterrupt,
    "user.tool_confirmation": UserToolConfirmation,
    "user.custom_tool_result": UserCustomToolResult,
    "user.tool_result": UserToolResult,
    "system.message": SystemMessage,
    "user.define_outcome": UserDefineOutcome,
}
_ADAPTERS: dict[str, TypeAdapter[Any]] = {name: TypeAdapter(model) for name, model in _MODELS.items()}

# A system.message must directly follow one of these in the same request.
_SYSTEM_MESSAGE_FOLLOWS = frozenset({"user.message", "user.tool_result", "user.custom_tool_result"})


def format_validation_error(exc: ValidationError, prefix: str) -> str:
    """``prefix.field[0].sub: message; ...`` for every error pydantic reported."""
    parts = []
    for err in exc.errors():
        where = prefix
        for part in err.get("loc", ()):
            where += f"[{part}]" if isinstance(part, int) else f".{part}"
        message = str(err.get("msg", "invalid value"))
        parts.append(f"{where}: {message}")
    return "; ".join(parts) or f"{prefix}: invalid value"


def parse_input_events(
    raw: object,
    *,
    allowed: Collection[str] = INPUT_EVENT_TYPES,
    param: str = "events",
    max_events: int = 1000,
) -> list[NewEvent]:
    """Validate a batch of client events and give each a fresh server id.

    Raises ``InvalidRequest`` (nothing is returned, so nothing can be half-written) when the batch
    is not a non-empty list of at most ``max_events`` objects, when an event's type is unknown, not
    one of ``allowed`` or not supported yet, when a field is missing, mistyped or unknown, or when a
    ``system.message`` is not the last event directly after a message or tool result.
    """
    if not isinstance(raw, list):
        raise InvalidRequest(f"{param} must be an array of events", param=param)
    if not raw:
        raise InvalidRequest(f"{param} must contain at least one event", param=param)
    if len(raw) > max_events:
        raise InvalidRequest(f"{param}: at most {max_events} events per request", param=param)
    parsed: list[NewEvent] = []
    for index, item in enumerate(raw):
        where = f"{param}[{index}]"
        event_type = _event_type(item, where, allowed)
        try:
            model = _ADAPTERS[event_type].validate_python(item)
        except ValidationError as exc:
            raise InvalidRequest(format_validation_error(exc, where), param=where) from None
        payload = model.model_dump(mode="json", exclude_none=True, exclude={"type"})
        if event_type == "user.define_outcome":  # outcomes: a server outcome_id, the default iterations
            payload = define_outcome_payload(payload)
        parsed.append(NewEvent(id=new_event_id(), type=event_type, payload=payload))
    _check_system_messages(parsed, param)
    return parsed


def _event_type(item: object, where: str, allowed: Collection[str]) -> str:
    if not isinstance(item, dict):
        raise InvalidRequest(f"{where} must be an object", param=where)
    event_type = item.get("type")
    if not isinstance(event_type, str) or not event_type:
        raise InvalidRequest(f"{where}.type is required (a string)", param=f"{where}.type")
    if event_type in UNSUPPORTED_INPUT_EVENT_TYPES:
        raise InvalidRequest(f"{where}: {UNSUPPORTED_INPUT_EVENT_TYPES[event_type]}", param=f"{where}.type")
    accepted = ", ".join(sorted(allowed))
    if event_type not in EVENT_TYPES:
        raise InvalidRequest(
            f"{where}: unknown event type {event_type!r} (accepted: {accepted})", param=f"{where}.type"
        )
    if event_type not in allowed or event_type not in _MODELS:
        raise InvalidRequest(
            f"{where}: {event_type!r} events cannot be sent here (accepted: {accepted})",
            param=f"{where}.type",
        )
    return event_type


def _check_system_messages(events: Sequence[NewEvent], param: str) -> None:
    positions = [i for i, e in enumerate(events) if e.type == "system.message"]
    if not positions:
        return
    if len(positions) > 1:
        raise InvalidRequest(f"{param}: at most one system.message per request", param=param)
    index = positions[0]
    where = f"{param}[{index}]"
    if index != len(events) - 1:
        raise InvalidRequest(f"{where}: a system.message must be the last event", param=where)
    if index == 0 or events[index - 1].type not in _SYSTEM_MESSAGE_FOLLOWS:
        raise InvalidRequest(
            f"{where}: a system.message must directly follow the user.message, user.tool_result "
            "or user.custom_tool_result it accompanies",
            param=where,
        )
