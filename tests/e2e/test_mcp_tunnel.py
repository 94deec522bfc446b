"""MCP tunnels end to end: an agent's MCP server ``https://wiki.<tunnel domain>/mcp`` reaches the
private MCP server through a real edge that holds the tunnel's connector token (in another
environment than the session's), refused as ``mcp_connection_failed_error`` until the tunnel has
a CA certificate; a rotated token keeps the established edge and is refused for a new one; an
archived tunnel carries nothing."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anthropic
import pytest

from control_plane.mcp import McpServerRef
from control_plane.server import ControlPlane
from scripted_model import LocalModelServer, Turn
from scripted_model.responders import tool_results_since_prompt
from scripted_model.script import ToolUse
from tests.support import eventually
from tests.support.ca_certs import make_ca
from tests.support.mcp_servers.http_server import HttpMcpServer

pytestmark = pytest.mark.docker

HTTP_CANARY = "tunnel-canary-5e81c2d4"


def responder(request: Mapping[str, Any]) -> Turn:
    """Greet through the tunnel when the tool is offered, then report; without it, say so."""
    offered = {t["name"] for t in request.get("tools", [])}
    if "mcp__wiki__greet" not in offered:
        return Turn.text("no wiki tools")
    results = tool_results_since_prompt(request)
    if not results:
        return Turn([ToolUse("mcp__wiki__greet", {"name": "Tunnel"})], stop_reason="tool_use")
    return Turn.text("MCP said: " + json.dumps(results[0].get("content")))


@pytest.fixture
async def model_server() -> Any:
    """Overrides the conftest's: this model calls the tunnel's MCP tool."""
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


def secret_file(path: Path, text: str) -> Path:
    path.write_text(text + "\n")
    path.chmod(0o600)
    return path


async def turn(client: anthropic.AsyncAnthropic, session_id: str, seen: int) -> list[dict[str, Any]]:
    """Send a message and wait for the turn to end: the events after the first ``seen``."""
    await client.beta.sessions.events.send(
        session_id, events=[{"type": "user.message", "content": [{"type": "text", "text": "wiki?"}]}]
    )

    async def events() -> list[dict[str, Any]]:
        raw = await client.beta.sessions.events.with_raw_response.list(session_id, limit=1000)
        data: list[dict[str, Any]] = json.loads(raw.http_response.text)["data"]
        return data

    async def idle() -> bool:
        found = (await events())[seen:]
        return any(e["type"] == "user.message" for e in found) and found[-1]["type"] == "session.status_idle"

    await eventually(idle, 60, "the turn ended")
    return (await events())[seen:]


async def test_session_reaches_a_private_mcp_server_through_a_tunnel(
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
    client = anthropic.AsyncAnthropic(
        base_url=control_plane.http_url, api_key=control_plane.admin_key(), max_retries=0
    )
    tunnel = await client.beta.tunnels.create(display_name="private wiki")
    token = await client.beta.tunnels.reveal_token(tunnel.id)
    wiki_secret = secret_file(tmp_path / "wiki.token", HTTP_CANARY)
    token_file = secret_file(tmp_path / "tunnel.token", token.tunnel_token)

    private = await client.beta.environments.create(name="private-net", config={"type": "self_hosted"})
    wiki_http = {"url": wiki.url, "bearer_token": {"from_file": str(wiki_secret)}}
    edge_config = {
        "mcp_servers": [{"name": "wiki", "http": wiki_http}],
        "tunnel_token_files": [str(token_file)],
        "observability": {"listen": None},  # two edges in one process: no port to share
    }
    policy = {"mcp": {"servers": {"wiki": {}}}}
    first = await run_edge(await enroll(private.id, policy=policy, extra=edge_config))
    route = await control_plane.tunnels.route_for_domain(tunnel.domain)  # type: ignore[union-attr]
    assert route is not None

    async def served() -> bool:
        catalog = control_plane.gateway.mcp_catalog("", tunnel=route.grants)
        return catalog.get("wiki", {}).get("status") == "up"

    await eventually(served, 30, "the tunnel's edge fronts the wiki")
    assert [c.edge_id for c in control_plane.gateway.tunnel_edges(route.grants)] == [first.edge_id]

    url = f"https://wiki.{tunnel.domain}/mcp"
    agent = await client.beta.agents.create(  # the URL guard lets the tunnel's host through
        name="tunnel-user",
        model="claude-sonnet-5-5",
        mcp_servers=[{"type": "url", "name": "wiki", "url": url}],
        tools=[
            {
                "type": "mcp_toolset",
                "mcp_server_name": "wiki",
                "default_config": {"permission_policy": {"type": "always_allow"}},
            }
        ],
    )
    work = await client.beta.environments.create(name="work", config={"type": "self_hosted"})
    session = await client.beta.sessions.create(agent=agent.id, environment_id=work.id)

    # No CA certificate yet: the tunnel refuses, and the session says why.
    refused = await turn(client, session.id, 0)
    errors = [e["error"] for e in refused if e["type"] == "session.error"]
    assert [e["type"] for e in errors] == ["mcp_connection_failed_error"], refused
    assert "no active CA certificate" in errors[0]["message"] and errors[0]["mcp_server_name"] == "wiki"
    assert not any(e["type"] == "agent.mcp_tool_use" for e in refused)

    cert = await client.beta.tunnels.certificates.create(tunnel.id, ca_certificate_pem=make_ca()[0])
    served_turn = await turn(client, session.id, len(refused))
    results = [e for e in served_turn if e["type"] == "agent.mcp_tool_result"]
    assert [r["outcome"] for r in results] == ["ok"], served_turn
    assert "Tunnel" in json.dumps(results[0]["content"])
    assert not any(e["type"] == "session.error" for e in served_turn)

    # Rotation: the edge connected with the old token stays; a new edge with it is not served.
    await client.beta.tunnels.rotate_token(tunnel.id, reason="e2e")
    route = await control_plane.tunnels.route_for_domain(tunnel.domain)  # type: ignore[union-attr]
    assert route is not None
    second = await run_edge(await enroll(private.id, policy=policy, extra=edge_config))  # the old token
    assert control_plane.registry.get(second.edge_id) is not None
    assert [c.edge_id for c in control_plane.gateway.tunnel_edges(route.grants)] == [first.edge_id]
    router = control_plane.mcp
    assert router is not None
    listed = await router.list_tools(session.id, work.id, McpServerRef("wiki", url))
    assert listed.ok and "greet" in [t.name for t in listed.tools]

    # The last certificate archived: refused again; the tunnel archived: refused for good.
    await client.beta.tunnels.certificates.archive(cert.id, tunnel_id=tunnel.id)
    listed = await router.list_tools(session.id, work.id, McpServerRef("wiki", url))
    assert listed.error_type == "mcp_connection_failed_error" and "no active CA" in listed.message
    await client.beta.tunnels.certificates.create(tunnel.id, ca_certificate_pem=make_ca()[0])
    await client.beta.tunnels.archive(tunnel.id)
    listed = await router.list_tools(session.id, work.id, McpServerRef("wiki", url))
    assert listed.error_type == "mcp_connection_failed_error" and "archived" in listed.message
    outcome = await router.call(
        session.id, work.id, McpServerRef("wiki", url), "greet", {"name": "x"}, idempotency_key="k1"
    )
    assert outcome.error_type == "mcp_connection_failed_error"

    # Neither the tunnel token nor the MCP server's credential shows in a log line.
    assert token.tunnel_token not in caplog.text and HTTP_CANARY not in caplog.text
    await client.beta.sessions.delete(session.id)
    await client.close()
