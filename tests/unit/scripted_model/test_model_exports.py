"""The public exports of scripted_model are pinned."""

from __future__ import annotations

import scripted_model
import scripted_model.local_server


def test_package_exports() -> None:
    assert sorted(scripted_model.__all__) == [
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
    for name in scripted_model.__all__:
        assert hasattr(scripted_model, name)


def test_local_server_module_exports_the_server() -> None:
    assert scripted_model.local_server.LocalModelServer is scripted_model.LocalModelServer
    assert sorted(scripted_model.local_server.__all__) == [
        "InjectedError",
        "LocalModelServer",
        "RecordedRequest",
        "load_script",
        "main",
    ]
