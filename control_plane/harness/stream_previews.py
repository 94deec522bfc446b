"""Live previews of a model's answer: its stream fanned out on the bus as ``event_start`` /
``event_delta`` items, and the event id of every content block.

The ids given in ``event_start`` frames are the ids the blocks' events get when the answer is
appended (:func:`block_event_ids`), so a client can match a preview to its event. Consecutive text
blocks are one ``agent.message`` (one id; the delta ``index`` counts blocks within it). Deltas are
built only while a subscriber of the session takes them (:meth:`EventBus.wants_deltas`). A subagent
thread's previews carry its thread id on the bus (not in the frame), so its thread's stream can
show them. Nothing here awaits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from control_plane.bus import EventBus
from control_plane.harness import event_drafts as ev
from control_plane.harness.model import BlockStart, StreamEvent, TextDelta

__all__ = ["block_event_ids", "stream_previews"]


def stream_previews(
    bus: EventBus,
    session_id: str,
    new_id: Callable[[], str],
    ids: dict[int, str],
    *,
    thread_id: str | None = None,
) -> Callable[[StreamEvent], None]:
    """A model stream callback that fans its events out as previews; ``ids`` receives the event
    id of every content block (consecutive text blocks share one ``agent.message``);
    ``thread_id``: the subagent thread whose model answers (``None``: the primary)."""
    kinds: dict[int, str] = {}
    group_start: dict[int, int] = {}

    def publish(payload: dict[str, Any]) -> None:
        bus.publish_delta(session_id, payload, thread_id=thread_id)

    def on_event(item: StreamEvent) -> None:
        if isinstance(item, BlockStart):
            kinds[item.index] = item.type
            prev = item.index - 1
            if item.type == "text" and kinds.get(prev) == "text" and prev in ids:
                ids[item.index] = ids[prev]
                group_start[item.index] = group_start[prev]
                return
            ids[item.index] = event_id = new_id()
            group_start[item.index] = item.index
            if item.type == "text":
                kind = ev.AGENT_MESSAGE
            elif item.type in ("thinking", "redacted_thinking"):
                kind = ev.AGENT_THINKING
            else:
                return
            publish({"type": "event_start", "event": {"type": kind, "id": event_id}})
        elif isinstance(item, TextDelta) and item.index in ids and bus.wants_deltas(session_id):
            delta = {
                "type": "content_delta",
                "index": item.index - group_start[item.index],
                "content": {"type": "text", "text": item.text},
            }
            publish({"type": "event_delta", "event_id": ids[item.index], "delta": delta})

    return on_event


def block_event_ids(
    message: Mapping[str, Any], streamed: Mapping[int, str], new_id: Callable[[], str]
) -> list[str]:
    """An event id per content block: the ids streamed in ``event_start`` frames, else fresh
    ones (consecutive text blocks share one)."""
    content = [b for b in message.get("content") or () if isinstance(b, Mapping)]
    ids: list[str] = []
    for index, block in enumerate(content):
        if index in streamed:
            ids.append(streamed[index])
        elif block.get("type") == "text" and index > 0 and content[index - 1].get("type") == "text":
            ids.append(ids[-1])
        else:
            ids.append(new_id())
    return ids
