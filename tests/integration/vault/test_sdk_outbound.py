"""The outbound rules through the real API with the official SDK, on the default configuration
(no ``outbound_allow_networks``): credentials and agents naming loopback, metadata or
IPv4-mapped-loopback URLs are refused with a 400 naming the rule, and nothing is dialled (a
loopback listener sees no connection)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import anthropic
import pytest

from tests.support.vault_app import VaultApi, running_vault_api


@pytest.fixture
async def strict_api(tmp_path: Path) -> AsyncIterator[VaultApi]:
    async with running_vault_api(tmp_path, allow_networks=()) as api:
        yield api


@pytest.fixture
async def listener() -> AsyncIterator[tuple[int, list[int]]]:
    """A loopback TCP listener that counts connections (none may arrive)."""
    connections: list[int] = []

    async def count(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        writer.close()

    server = await asyncio.start_server(count, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], connections
    finally:
        server.close()
        await server.wait_closed()


def _urls(port: int) -> dict[str, str]:
    return {
        f"https://127.0.0.1:{port}/x": "outbound.loopback",
        "https://169.254.169.254/latest/meta-data": "outbound.metadata",
        f"https://[::ffff:127.0.0.1]:{port}/x": "outbound.loopback",
        f"https://2130706433:{port}/x": "outbound.loopback",
        "https://0.0.0.0/x": "outbound.unspecified",
        "https://10.0.0.7/x": "outbound.private",
        f"https://localhost:{port}/x": "outbound.loopback",
    }


async def test_credential_urls_are_refused_and_not_dialled(
    strict_api: VaultApi, listener: tuple[int, list[int]]
) -> None:
    port, connections = listener
    creds = strict_api.client.beta.vaults.credentials
    vault = await strict_api.client.beta.vaults.create(display_name="outbound")
    for url, rule in _urls(port).items():
        with pytest.raises(anthropic.BadRequestError, match=rule.replace(".", r"\.")) as caught:
            await creds.create(vault.id, auth={"type": "static_bearer", "mcp_server_url": url, "token": "t"})
        assert "auth.mcp_server_url" in str(caught.value)
        with pytest.raises(anthropic.BadRequestError, match=rule.replace(".", r"\.")) as caught:
            await creds.create(
                vault.id,
                auth={
                    "type": "mcp_oauth",
                    "mcp_server_url": "https://mcp.example.com/mcp",
                    "access_token": "at",
                    "refresh": {
                        "refresh_token": "rt",
                        "client_id": "c",
                        "token_endpoint": url,
                        "token_endpoint_auth": {"type": "none"},
                    },
                },
            )
        assert "auth.refresh.token_endpoint" in str(caught.value)
    assert [c async for c in creds.list(vault.id)] == []
    assert connections == []


async def test_agent_mcp_server_urls_are_refused_and_not_dialled(
    strict_api: VaultApi, listener: tuple[int, list[int]]
) -> None:
    port, connections = listener
    agents = strict_api.client.beta.agents
    for url, rule in _urls(port).items():
        with pytest.raises(anthropic.BadRequestError, match=rule.replace(".", r"\.")) as caught:
            await agents.create(
                name="a",
                model="claude-opus-4-8",
                mcp_servers=[{"type": "url", "name": "kb", "url": url}],
                tools=[{"type": "mcp_toolset", "mcp_server_name": "kb"}],
            )
        assert "mcp_servers[0].url" in str(caught.value)
    agent = await agents.create(
        name="a",
        model="claude-opus-4-8",
        mcp_servers=[{"type": "url", "name": "kb", "url": "https://mcp.example.com/mcp"}],
        tools=[{"type": "mcp_toolset", "mcp_server_name": "kb"}],
    )
    with pytest.raises(anthropic.BadRequestError, match=r"outbound\.metadata"):
        await agents.update(
            agent.id,
            version=agent.version,
            mcp_servers=[{"type": "url", "name": "kb", "url": "http://169.254.169.254/"}],
        )
    assert connections == []
