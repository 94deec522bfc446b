"""Issue 4 end to end: an agent session (official SDK) uses two private MCP servers behind the
edge — one over stdio, one over streamable HTTP on loopback — and their credentials appear in no
event, API response or log."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anthropic
import pytest

from control_plane.server import ControlPlane
from scripted_model import LocalModelServer, Turn
from scripted_model.responders import tool_results_since_prompt
from scripted_model.script import ToolUse
from tests.support import eventually
from tests.support.mcp_servers.http_server import HttpMcpServer

pytestmark = pytest.mark.docker

STDIO_SERVER = Path(__file__).resolve().parents[1] / "support" / "mcp_servers" / "stdio_server.py"
STDIO_CANARY = "stdio-canary-4b1d9e2a"
HTTP_CANARY = "http-canary-93c0f7b5"


def responder(request: Mapping[str, Any]) -> Turn:
    """Turn 1: add with the stdio server; turn 2: greet with the HTTP server; then report."""
    offered = {t["name"] for t in request.get("tools", [])}
    results = tool_results_since_prompt(request)
    if not results:
        assert "mcp__tickets__add" in offered, offered
        return Turn([ToolUse("mcp__tickets__add", {"a": 20, "b": 22})], stop_reason="tool_use")
    if len(results) == 1:
        assert "mcp__wiki__greet" in offered, offered
        return Turn([ToolUse("mcp__wiki__greet", {"name": "Outpost"})], stop_reason="tool_use")
    texts = [json.dumps(r.get("content")) for r in results]
    return Turn.text("MCP said: " + " | ".join(texts))


@pytest.fixture
async def model_server() -> Any:
    """Overrides the conftest's: this model calls the MCP tools."""
    async with LocalModelServer(responder) as server:
        yield server


@pytest.fixture
async def wiki() -> Any:
    server = HttpMcpServer(HTTP_CANARY)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def test_session_uses_stdio_and_http_mcp_servers_behind_the_edge(
    tmp_path: Path,
    control_plane: ControlPlane,
    model_server: LocalModelServer,
    enroll,
    run_edge,
    wiki: Any,
    caplog,
) -> None:
    caplog.set_level(logging.DEBUG)
    for noisy in ("mcp", "httpx", "httpx2", "httpcore"):  # as the entry points configure them
        logging.getLogger(noisy).setLevel(logging.INFO)
    stdio_secret = tmp_path / "tickets.token"
    stdio_secret.write_text(STDIO_CANARY)
    stdio_secret.chmod(0o600)
    wiki_secret = tmp_path / "wiki.token"
    wiki_secret.write_text(HTTP_CANARY)
    wiki_secret.chmod(0o600)

    client = anthropic.AsyncAnthropic(
        base_url=control_plane.http_url, api_key=control_plane.admin_key(), max_retries=0
    )
    env = await client.beta.environments.create(name="mcp", config={"type": "self_hosted"})
    await run_edge(
        await enroll(
            env.id,
            policy={"mcp": {"servers": {"tickets": {"tools": ["add"]}, "wiki": {}}}},
            extra={
                "mcp_servers": [
                    {
                        "name": "tickets",
                        "stdio": {
                            "command": sys.executable,
                            "args": [str(STDIO_SERVER)],
                            "env": {"TICKETS_TOKEN": {"from_file": str(stdio_secret)}},
                        },
                    },
                    {
                        "name": "wiki",
                        "http": {"url": wiki.url, "bearer_token": {"from_file": str(wiki_secret)}},
                    },
                ]
            },
        )
    )

    async def both_up() -> bool:
        catalog = control_plane.gateway.mcp_catalog(env.id)
        return all(catalog.get(n, {}).get("status") == "up" for n in ("tickets", "wiki"))

    await eventually(both_up, 30, "both MCP servers up at the edge")
    agent = await client.beta.agents.create(
        name="mcp-user",
        model="claude-sonnet-5-5",
        mcp_servers=[
            {"type": "url", "name": "tickets", "url": "edge://tickets"},
            {"type": "url", "name": "wiki", "url": "edge://wiki"},
        ],
        tools=[
            {
                "type": "mcp_toolset",
                "mcp_server_name": "tickets",
                "default_config": {"permission_policy": {"type": "always_allow"}},
            },
            {
                "type": "mcp_toolset",
                "mcp_server_name": "wiki",
                "default_config": {"permission_policy": {"type": "always_allow"}},
            },
        ],
    )
    session = await client.beta.sessions.create(agent=agent.id, environment_id=env.id)
    await client.beta.sessions.events.send(
        session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "use the tools"}]}]
    )

    async def idle() -> bool:
        events = [e async for e in client.beta.sessions.events.list(session.id)]
        return (
            any(e.type == "session.status_idle" for e in events) and events[-1].type == "session.status_idle"
        )

    await eventually(idle, 30, "session idle")
    raw = await client.beta.sessions.events.with_raw_response.list(session.id, limit=1000)
    body = raw.http_response.text
    events = json.loads(body)["data"]
    uses = [e for e in events if e["type"] == "agent.mcp_tool_use"]
    results = [e for e in events if e["type"] == "agent.mcp_tool_result"]
    assert [(u["mcp_server_name"], u["name"]) for u in uses] == [("tickets", "add"), ("wiki", "greet")]
    assert [r["outcome"] for r in results] == ["ok", "ok"] and all("latency_ms" in r for r in results)
    assert "42" in json.dumps(results[0]["content"]) and "Outpost" in json.dumps(results[1]["content"])
    final = [e for e in events if e["type"] == "agent.message"][-1]
    assert "42" in json.dumps(final["content"])

    # The credentials stayed at the edge: not in the log, the API's answers, or any log line.
    responses = [body]
    for call in (
        client.beta.sessions.with_raw_response.retrieve(session.id),
        client.beta.agents.with_raw_response.retrieve(agent.id),
        client.beta.environments.with_raw_response.retrieve(env.id),
    ):
        responses.append((await call).http_response.text)
    for canary in (STDIO_CANARY, HTTP_CANARY):
        assert not any(canary in text for text in responses)
        assert canary not in caplog.text
    await client.beta.sessions.delete(session.id)
    await client.close()
