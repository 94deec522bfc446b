"""The hub against a real Streamable-HTTP MCP server on 127.0.0.1 that requires a bearer token."""

from __future__ import annotations

from pathlib import Path

import pytest
from _mcp_support import TOKEN, allow, http_config, write_secret

from control_plane.enroll.ca import CertificateAuthority
from edge_agent.mcp import McpConnectionFailed, McpHub, McpServerNotAllowed, ServerStatus, TextBlock
from tests.support import eventually
from tests.support.mcp_servers.http_server import HttpMcpServer


def _status(hub: McpHub, name: str) -> ServerStatus:
    entry = hub.catalog().server(name)
    assert entry is not None
    return entry.status


async def test_catalog_and_calls(http_server: HttpMcpServer, token_file: Path) -> None:
    async with McpHub([http_config("remote", http_server.url, token_file)], allow("remote")) as hub:
        entry = hub.catalog().server("remote")
        assert entry is not None and entry.status is ServerStatus.UP
        assert [t.name for t in entry.tools] == ["greet", "mul", "requests_seen"]
        assert (await hub.call("remote", "mul", {"a": 6, "b": 7})).content == (TextBlock("42"),)
        assert (await hub.call("remote", "greet", {"name": "edge"})).content == (TextBlock("hello, edge"),)
        with pytest.raises(McpServerNotAllowed, match="not configured"):
            await hub.call("elsewhere", "mul", {"a": 1, "b": 2})


@pytest.mark.parametrize("token", ["wrong-token-value-31337", None])
async def test_wrong_or_missing_bearer_is_a_clear_connection_failure(
    http_server: HttpMcpServer, tmp_path: Path, token: str | None
) -> None:
    token_file = write_secret(tmp_path / "bad-token", token) if token else None
    async with McpHub([http_config("remote", http_server.url, token_file)], allow("remote")) as hub:
        entry = hub.catalog().server("remote")
        assert entry is not None and entry.status is ServerStatus.DOWN
        expected = (
            f"{http_server.url} refused the credentials (HTTP 401 Unauthorized); "
            "check bearer_token / headers in mcp_servers[remote].http"
        )
        assert entry.last_error == expected
        with pytest.raises(McpConnectionFailed) as info:
            await hub.call("remote", "mul", {"a": 1, "b": 2})
        assert expected in str(info.value)
        for secret in (TOKEN, token):
            if secret:
                assert secret not in str(info.value) and secret not in str(hub.catalog().to_dict())


async def test_server_stopped_then_restarted_reconnects(http_server: HttpMcpServer, token_file: Path) -> None:
    async with McpHub([http_config("remote", http_server.url, token_file)], allow("remote")) as hub:
        assert (await hub.call("remote", "mul", {"a": 2, "b": 3})).content == (TextBlock("6"),)
        await http_server.stop()
        with pytest.raises(McpConnectionFailed, match="MCP server 'remote'"):
            await hub.call("remote", "mul", {"a": 2, "b": 3})
        await eventually(lambda: "cannot connect" in (hub.catalog().servers[0].last_error or ""))
        assert _status(hub, "remote") is ServerStatus.DOWN
        with pytest.raises(McpConnectionFailed, match=r"cannot connect to http://127\.0\.0\.1"):
            await hub.call("remote", "mul", {"a": 2, "b": 3})

        await http_server.start()  # same port
        await eventually(lambda: _status(hub, "remote") is ServerStatus.UP)
        assert (await hub.call("remote", "mul", {"a": 2, "b": 5})).content == (TextBlock("10"),)


async def test_a_stopped_server_is_noticed_without_a_call(
    http_server: HttpMcpServer, token_file: Path
) -> None:
    config = http_config("remote", http_server.url, token_file, refresh_interval_s=0.1)
    async with McpHub([config], allow("remote")) as hub:
        assert _status(hub, "remote") is ServerStatus.UP
        await http_server.stop()
        await eventually(lambda: _status(hub, "remote") is ServerStatus.DOWN)
        await http_server.start()
        await eventually(lambda: _status(hub, "remote") is ServerStatus.UP)


async def test_https_with_a_private_ca(tmp_path: Path, token_file: Path) -> None:
    ca = CertificateAuthority.load_or_create(tmp_path / "ca")
    key_pem, cert_pem = ca.issue_server_cert([], ["127.0.0.1"])
    (tmp_path / "server.key").write_bytes(key_pem)
    (tmp_path / "server.crt").write_bytes(cert_pem)
    (tmp_path / "ca.crt").write_bytes(ca.ca_cert_pem)
    server = HttpMcpServer(TOKEN, tls=(tmp_path / "server.crt", tmp_path / "server.key"))
    await server.start()
    try:
        trusted = http_config(
            "trusted", server.url, token_file, http_extra={"ca_file": str(tmp_path / "ca.crt")}
        )
        untrusted = http_config("untrusted", server.url, token_file)
        async with McpHub([trusted, untrusted], allow("trusted", "untrusted")) as hub:
            assert (await hub.call("trusted", "mul", {"a": 3, "b": 3})).content == (TextBlock("9"),)
            entry = hub.catalog().server("untrusted")
            assert entry is not None and entry.status is ServerStatus.DOWN
            assert "CERTIFICATE_VERIFY_FAILED" in (entry.last_error or "")
    finally:
        await server.stop()
