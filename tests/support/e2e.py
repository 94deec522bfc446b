"""The end-to-end tests' plain helpers: the admin API client, the enrolled-edge record, the names of
their Docker objects. The fixtures that build them are in ``tests/e2e/conftest.py``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from edge_agent.config import EdgeConfig
from edge_agent.identity import Identity

__all__ = ["NAME_PREFIX", "SANDBOX_IMAGE", "Api", "EnrolledEdge", "text_of"]

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
