"""A local, scripted Messages API server, so the real ``anthropic`` SDK runs without Claude.

- :mod:`~control_plane.model.script`: turns (content blocks + stop reason), :class:`Script`, responders;
- :mod:`~control_plane.model.responders`: the offline demo's responder and request-reading helpers;
- :mod:`~control_plane.model.wire`: the Messages API shapes (messages, SSE events, errors), no I/O;
- :mod:`~control_plane.model.server`: :class:`LocalModelServer`, the ASGI app served by uvicorn;
- :mod:`~control_plane.model.local_server`: the standalone entry point
  (``python -m control_plane.model.local_server --port 0 --script demo``).
"""

from __future__ import annotations

from control_plane.model.responders import DemoResponder, demo_responder, echo_responder
from control_plane.model.script import (
    Block,
    InvalidTurn,
    LocalModelError,
    RedactedThinking,
    Responder,
    Script,
    ScriptExhausted,
    StopReason,
    Text,
    Thinking,
    ToolUse,
    Turn,
)
from control_plane.model.server import InjectedError, LocalModelServer, RecordedRequest

__all__ = [
    "Block",
    "DemoResponder",
    "InjectedError",
    "InvalidTurn",
    "LocalModelError",
    "LocalModelServer",
    "RecordedRequest",
    "RedactedThinking",
    "Responder",
    "Script",
    "ScriptExhausted",
    "StopReason",
    "Text",
    "Thinking",
    "ToolUse",
    "Turn",
    "demo_responder",
    "echo_responder",
]
