"""A local, scripted Messages API server, so the real ``anthropic`` SDK runs without Claude.

It serves the offline demo (``scripts/demo.py``), the tests and the benchmarks; it is no part of
either daemon. Neither ``control_plane`` nor ``edge_agent`` imports it, and it imports neither
(import-linter contract ``scripted-model-apart`` in ``pyproject.toml``).

- :mod:`~scripted_model.script`: turns (content blocks + stop reason), :class:`Script`, responders;
- :mod:`~scripted_model.responders`: the offline demo's responder and request-reading helpers;
- :mod:`~scripted_model.wire`: the Messages API shapes (messages, SSE events, errors), no I/O;
- :mod:`~scripted_model.server`: :class:`LocalModelServer`, the ASGI app served by uvicorn;
- :mod:`~scripted_model.local_server`: the standalone entry point
  (``python -m scripted_model.local_server --port 0 --script demo``).
"""

from __future__ import annotations

from scripted_model.responders import DemoResponder, demo_responder, echo_responder
from scripted_model.script import (
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
from scripted_model.server import InjectedError, LocalModelServer, RecordedRequest

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
