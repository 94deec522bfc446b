"""The public exports of control_plane.model are pinned."""

from __future__ import annotations

import control_plane.model
import control_plane.model.local_server


def test_package_exports() -> None:
    assert sorted(control_plane.model.__all__) == [
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
    for name in control_plane.model.__all__:
        assert hasattr(control_plane.model, name)


def test_local_server_module_exports_the_server() -> None:
    assert control_plane.model.local_server.LocalModelServer is control_plane.model.LocalModelServer
    assert sorted(control_plane.model.local_server.__all__) == [
        "InjectedError",
        "LocalModelServer",
        "RecordedRequest",
        "load_script",
        "main",
    ]
