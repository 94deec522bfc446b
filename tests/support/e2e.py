"""The end-to-end tests' plain helpers: the admin API client, the enrolled-edge record, the names of
their Docker objects. The fixtures that build them are in ``tests/e2e/conftest.py``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx

from edge_agent.config import EdgeConfig
from edge_agent.identity import Identity
from scripted_model.responders import last_prompt_text, tool_results_since_prompt
from scripted_model.script import Turn

__all__ = [
    "NAME_PREFIX",
    "SANDBOX_IMAGE",
    "Api",
    "EnrolledEdge",
    "calls_responder",
    "result_text",
    "run_calls",
    "text_of",
]

SANDBOX_IMAGE = "outpost-sandbox:1"
NAME_PREFIX = "outpost-e2e"
"""The prefix of the sandboxes' containers and volumes of the e2e edges (the suite checks none is left)."""


@dataclass
class Api:
    """The control plane's admin API; each call asserts the status it expects."""

    client: httpx.AsyncClient

    async def post(self, path: str, body: dict[str, Any] | None = None, expect: int = 200) -> Any:
        r = await self.client.post(path, json=body or {})
        assert r.status_code == expect, r.text
        return r.json()

    async def get(self, path: str, expect: int = 200) -> Any:
        r = await self.client.get(path)
        assert r.status_code == expect, r.text
        return r.json()

    async def exec(
        self,
        env: str,
        session: str,
        tool: str,
        tool_input: dict[str, Any],
        key: str | None = None,
        expect: int = 200,
    ) -> Any:
        body: dict[str, Any] = {
            "environment_id": env,
            "session_id": session,
            "tool": tool,
            "input": tool_input,
        }
        if key:
            body["idempotency_key"] = key
        return await self.post("/v1/sandboxes/exec", body, expect=expect)


def text_of(result: dict[str, Any]) -> str:
    """The text of a tool result's content blocks."""
    return "".join(b.get("text", "") for b in result["content"])


@dataclass
class EnrolledEdge:
    """An edge registered with the control plane: its identity and the config file to run it with."""

    identity: Identity
    state_dir: Path
    config_path: Path

    def config(self) -> EdgeConfig:
        from edge_agent.config import load_config

        return load_config(self.config_path)


def calls_responder(request: Mapping[str, Any]) -> Turn:
    """A scripted model whose prompt is a JSON list of ``[tool, input]`` calls: it makes them in
    order, then ends the turn."""
    calls = json.loads(last_prompt_text(request) or "[]")
    done = len(tool_results_since_prompt(request))
    if done < len(calls):
        name, tool_input = calls[done]
        return Turn.tool_use(name, tool_input)
    return Turn.text("done")


async def run_calls(client: anthropic.AsyncAnthropic, session_id: str, calls: list[Any]) -> list[Any]:
    """Send ``calls`` (for :func:`calls_responder`) as one user message, wait for the session to go
    idle, and return the ``agent.tool_result`` events of these calls."""
    stream = await client.beta.sessions.events.stream(session_id)
    await client.beta.sessions.events.send(
        session_id,
        events=[{"type": "user.message", "content": [{"type": "text", "text": json.dumps(calls)}]}],
    )
    async for event in stream:
        if event.type == "session.status_idle":
            break
    results = [e async for e in client.beta.sessions.events.list(session_id) if e.type == "agent.tool_result"]
    return results[-len(calls) :]


def result_text(result: Any) -> str:
    """The text of an SDK ``agent.tool_result`` event."""
    return "".join(getattr(block, "text", "") or "" for block in result.content or [])
