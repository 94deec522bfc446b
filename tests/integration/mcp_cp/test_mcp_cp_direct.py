"""The control plane's own MCP client against a real Streamable-HTTP MCP server (the ``mcp`` SDK on
127.0.0.1, port 0) that requires a bearer token; and the router's edge route on a fake gateway."""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import pytest
from mcp_cp_server import PDF_BYTES, BearerMcpServer
from mcp_cp_support import ENV, FakeMcpGateway

from control_plane.mcp import (
    MCP_AUTHENTICATION_FAILED,
    MCP_CONNECTION_FAILED,
    DirectMcpClient,
    McpConfig,
    McpRouter,
    McpServerRef,
)
from control_plane.mcp.client_session import McpSession
from control_plane.outbound import OutboundGuard
from outpost_wire.results import ToolResult

TOKEN = "tok-7f3a9c-secret-value"
# The test servers listen on loopback, which the outbound rules refuse by default: these tests
# allow it as an operator would with outbound_allow_networks (the default is tested below).
LOOPBACK_ALLOWED = OutboundGuard(["127.0.0.0/8"])


@pytest.fixture
async def server() -> AsyncIterator[BearerMcpServer]:
    async with BearerMcpServer(TOKEN) as running:
        yield running


async def bearer(session_id: str, url: str) -> Mapping[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CountingFactory:
    """Makes real sessions and remembers them."""

    def __init__(self) -> None:
        self.sessions: list[McpSession] = []

    def __call__(self, url: str, headers: Mapping[str, str]) -> McpSession:
        session = McpSession(url, headers, outbound=LOOPBACK_ALLOWED)
        self.sessions.append(session)
        return session


def router_for(
    credentials: object = bearer, *, clock: Clock | None = None, factory: CountingFactory | None = None
) -> McpRouter:
    config = McpConfig(connect_timeout_s=5.0, list_timeout_s=5.0, tools_ttl_s=15.0)
    direct = DirectMcpClient(
        credentials,  # type: ignore[arg-type]
        config,
        session_factory=factory,
        outbound=LOOPBACK_ALLOWED,
        clock=clock or Clock(),
    )
    return McpRouter(None, config=config, direct=direct)


async def test_lists_and_calls_with_the_bearer_and_never_logs_it(
    server: BearerMcpServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    ref = McpServerRef("calc", server.url)
    async with router_for() as router:
        listing = await router.list_tools("sesn_1", None, ref)
        assert listing.ok, listing
        assert sorted(t.name for t in listing.tools) == ["add", "boom", "echo", "report", "sleep"]
        add = next(t for t in listing.tools if t.name == "add")
        assert add.description == "Add two integers."
        assert set(add.input_schema["properties"]) == {"a", "b"}

        outcome = await router.call("sesn_1", None, ref, "add", {"a": 2, "b": 40}, idempotency_key="k1")
        assert outcome.content == [{"type": "text", "text": "42"}]
        assert not outcome.is_error and outcome.error_type is None and outcome.outcome == "ok"
        assert outcome.latency_ms > 0

        failed = await router.call("sesn_1", None, ref, "boom", {}, idempotency_key="k2")
        assert failed.is_error and failed.outcome == "tool_error" and failed.error_type is None

        report = await router.call("sesn_1", None, ref, "report", {}, idempotency_key="k3")
        pdf = base64.b64encode(PDF_BYTES).decode("ascii")  # an embedded PDF is a document block
        source = {"type": "base64", "media_type": "application/pdf", "data": pdf}
        assert report.content == [{"type": "document", "source": source}] and not report.is_error

    assert server.guard is not None and all(
        a == f"Bearer {TOKEN}".encode() for a in server.guard.seen_authorizations
    )
    assert TOKEN not in caplog.text
    assert "MCP call server=calc tool=add route=direct outcome=ok" in caplog.text


async def test_wrong_credentials_are_an_authentication_error(
    server: BearerMcpServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = "Bearer wrong-token-123456"

    async def credentials(session_id: str, url: str) -> Mapping[str, str]:
        return {"Authorization": wrong}

    ref = McpServerRef("calc", server.url)
    async with router_for(credentials) as router:
        listing = await router.list_tools("sesn_1", None, ref)
        assert listing.error_type == MCP_AUTHENTICATION_FAILED
        assert "HTTP 401" in listing.message
        outcome = await router.call("sesn_1", None, ref, "add", {"a": 1, "b": 1}, idempotency_key="k1")
        assert outcome.error_type == MCP_AUTHENTICATION_FAILED and outcome.is_error
        assert outcome.outcome == MCP_AUTHENTICATION_FAILED
    assert server.calls["add"] == 0
    assert "wrong-token-123456" not in caplog.text
    assert "wrong-token-123456" not in listing.message + str(outcome.content)


async def test_credentials_that_fail_are_reported_without_their_text(server: BearerMcpServer) -> None:
    async def credentials(session_id: str, url: str) -> Mapping[str, str]:
        raise RuntimeError(f"vault said no for {TOKEN}")

    async with router_for(credentials) as router:
        listing = await router.list_tools("sesn_1", None, McpServerRef("calc", server.url))
    assert listing.error_type == MCP_AUTHENTICATION_FAILED
    assert TOKEN not in listing.message and "RuntimeError" in listing.message


async def test_sessions_are_pooled_per_credential_and_tool_lists_cached(server: BearerMcpServer) -> None:
    tokens = {"sesn_a": TOKEN, "sesn_b": TOKEN}

    async def credentials(session_id: str, url: str) -> Mapping[str, str]:
        return {"Authorization": f"Bearer {tokens[session_id]}"}

    clock, factory = Clock(), CountingFactory()
    ref = McpServerRef("calc", server.url)
    async with router_for(credentials, clock=clock, factory=factory) as router:
        for key in ("k1", "k2", "k3"):
            assert (
                await router.call("sesn_a", None, ref, "echo", {"text": key}, idempotency_key=key)
            ).outcome == "ok"
        await router.call("sesn_b", None, ref, "echo", {"text": "b"}, idempotency_key="k4")
        assert len(factory.sessions) == 1  # same URL, same credential: one session

        assert server.guard is not None
        before = len(server.guard.seen_authorizations)
        await router.list_tools("sesn_a", None, ref)
        after_first = len(server.guard.seen_authorizations)
        await router.list_tools("sesn_b", None, ref)  # cached (same URL and credential)
        assert len(server.guard.seen_authorizations) == after_first > before
        clock.now += 16  # past the TTL
        await router.list_tools("sesn_a", None, ref)
        assert len(server.guard.seen_authorizations) > after_first

        tokens["sesn_b"] = "another-credential"  # a different credential never shares a session
        listing = await router.list_tools("sesn_b", None, ref)
        assert listing.error_type == MCP_AUTHENTICATION_FAILED
        assert len(factory.sessions) == 2


async def test_a_repeated_idempotency_key_runs_the_tool_once(server: BearerMcpServer) -> None:
    ref = McpServerRef("calc", server.url)
    async with router_for() as router:
        first, second = await asyncio.gather(
            router.call("sesn_1", None, ref, "echo", {"text": "x"}, idempotency_key="same"),
            router.call("sesn_1", None, ref, "echo", {"text": "x"}, idempotency_key="same"),
        )
        third = await router.call("sesn_1", None, ref, "echo", {"text": "x"}, idempotency_key="same")
    assert first.content == second.content == third.content == [{"type": "text", "text": "x"}]
    assert server.calls["echo"] == 1


async def test_a_hung_tool_times_out_as_a_connection_error_and_the_session_goes_on(
    server: BearerMcpServer,
) -> None:
    ref = McpServerRef("calc", server.url)
    async with router_for() as router:
        hung = await router.call(
            "sesn_1", None, ref, "sleep", {"seconds": 30}, idempotency_key="k1", timeout_s=0.3
        )
        assert hung.error_type == MCP_CONNECTION_FAILED and hung.is_error
        assert "did not answer within 0.3 s" in hung.content[0]["text"]
        assert hung.latency_ms >= 300
        ok = await router.call("sesn_1", None, ref, "add", {"a": 1, "b": 2}, idempotency_key="k2")
        assert ok.content == [{"type": "text", "text": "3"}]


class ServerProcess:
    """The test server in a child process, so that it can crash for real (SIGKILL)."""

    def __init__(self) -> None:
        self.port = 0
        self._process: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    async def start(self) -> None:
        self._process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(Path(__file__).with_name("mcp_cp_server.py")),
            str(self.port),
            env={**os.environ, "MCP_CP_TEST_TOKEN": TOKEN},
            stdout=asyncio.subprocess.PIPE,
        )
        assert self._process.stdout is not None
        line = await asyncio.wait_for(self._process.stdout.readline(), 30)
        assert line.startswith(b"port "), line
        self.port = int(line.split()[1])

    async def kill(self) -> None:
        if self._process is not None and self._process.returncode is None:
            self._process.kill()
            await self._process.wait()


async def test_a_server_that_crashes_mid_call_and_comes_back() -> None:
    process = ServerProcess()
    await process.start()
    try:
        ref = McpServerRef("calc", process.url)
        async with router_for() as router:
            assert (await router.list_tools("sesn_1", None, ref)).ok
            call = asyncio.create_task(
                router.call("sesn_1", None, ref, "sleep", {"seconds": 30}, idempotency_key="k1", timeout_s=20)
            )
            await asyncio.sleep(0.3)  # the call is in flight (it sleeps 30 s on the server)
            assert not call.done()
            await process.kill()
            crashed = await asyncio.wait_for(call, 10)
            assert crashed.error_type == MCP_CONNECTION_FAILED and crashed.latency_ms < 10_000
            assert "connection" in crashed.content[0]["text"]

            down = await router.call("sesn_1", None, ref, "add", {"a": 1, "b": 2}, idempotency_key="k2")
            assert down.error_type == MCP_CONNECTION_FAILED
            assert "cannot connect" in down.content[0]["text"]
            assert (
                await router.list_tools("sesn_1", None, McpServerRef("c2", process.url + "/x"))
            ).error_type == (MCP_CONNECTION_FAILED)

            await process.start()  # same port: the client reconnects by itself
            again = await router.call("sesn_1", None, ref, "add", {"a": 1, "b": 2}, idempotency_key="k3")
            assert again.content == [{"type": "text", "text": "3"}]
    finally:
        await process.kill()


async def test_a_restarted_server_is_reconnected_to_transparently(server: BearerMcpServer) -> None:
    factory = CountingFactory()
    ref = McpServerRef("calc", server.url)
    async with router_for(factory=factory) as router:
        assert (
            await router.call("sesn_1", None, ref, "add", {"a": 1, "b": 1}, idempotency_key="k1")
        ).outcome == "ok"
        await server.restart()
        again = await router.call("sesn_1", None, ref, "add", {"a": 2, "b": 2}, idempotency_key="k2")
        assert again.content == [{"type": "text", "text": "4"}]
    assert server.calls["add"] == 2


async def test_a_server_that_never_answers_is_a_connection_error_within_the_deadline() -> None:
    hold: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hold.append(writer)  # accept, read, never answer

    tcp = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = tcp.sockets[0].getsockname()[1]
    config = McpConfig(connect_timeout_s=0.5, list_timeout_s=0.8)
    try:
        async with McpRouter(None, credentials=bearer, config=config, outbound=LOOPBACK_ALLOWED) as router:
            ref = McpServerRef("mute", f"http://127.0.0.1:{port}/mcp")
            started = asyncio.get_running_loop().time()
            listing = await router.list_tools("sesn_1", None, ref)
            outcome = await router.call("sesn_1", None, ref, "x", {}, idempotency_key="k", timeout_s=0.5)
            elapsed = asyncio.get_running_loop().time() - started
    finally:
        for writer in hold:
            writer.close()
        tcp.close()
        await tcp.wait_closed()
    assert listing.error_type == outcome.error_type == MCP_CONNECTION_FAILED
    assert "did not complete the MCP handshake" in listing.message
    assert elapsed < 3


async def test_unsupported_scheme() -> None:
    async with router_for() as router:
        ref = McpServerRef("odd", "ftp://example.test/mcp")
        listing = await router.list_tools("sesn_1", None, ref)
        outcome = await router.call("sesn_1", None, ref, "x", {}, idempotency_key="k")
    assert listing.error_type == outcome.error_type == MCP_CONNECTION_FAILED
    assert "'ftp' is not supported" in listing.message


async def test_loopback_private_and_metadata_servers_are_not_dialled_by_default() -> None:
    """Default outbound rules: the bearer never leaves; a loopback listener sees no connection."""
    connections: list[int] = []

    async def count(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        writer.close()

    tcp = await asyncio.start_server(count, "127.0.0.1", 0)
    port = tcp.sockets[0].getsockname()[1]

    async def rebinding(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]  # a public-looking name that resolves to loopback

    urls = {
        f"http://127.0.0.1:{port}/mcp": "outbound.loopback",
        f"http://[::ffff:127.0.0.1]:{port}/mcp": "outbound.loopback",
        f"http://2130706433:{port}/mcp": "outbound.loopback",
        "http://169.254.169.254/mcp": "outbound.metadata",
        "http://0.0.0.0/mcp": "outbound.unspecified",
        f"http://mcp.rebind.test:{port}/mcp": "outbound.loopback",
    }
    try:
        async with McpRouter(None, credentials=bearer, outbound=OutboundGuard(resolver=rebinding)) as router:
            for url, rule in urls.items():
                listing = await router.list_tools("sesn_1", None, McpServerRef("s", url))
                assert listing.error_type == MCP_CONNECTION_FAILED, url
                assert "is not dialled" in listing.message and "outbound_allow_networks" in listing.message
                outcome = await router.call(
                    "sesn_1", None, McpServerRef("s", url), "x", {}, idempotency_key=url
                )
                assert outcome.error_type == MCP_CONNECTION_FAILED
                assert f"(rule: {rule})" in listing.message and TOKEN not in listing.message
    finally:
        tcp.close()
        await tcp.wait_closed()
    assert connections == []


# -- the edge route ---------------------------------------------------------------------------------


async def _ok(arguments: Mapping[str, object]) -> ToolResult:
    return ToolResult.text(f"ran with {dict(arguments)}")


async def test_edge_route_lists_the_catalog_and_maps_refusals_and_failures() -> None:
    gateway = FakeMcpGateway({"wiki": {"search": _ok, "purge": _ok}})
    gateway.deny["purge"] = "rule mcp.wiki.deny[0]: tool 'purge' is not allowed"
    ref = McpServerRef("kb", "edge://wiki")
    async with McpRouter(gateway) as router:
        listing = await router.list_tools("sesn_1", ENV, ref)
        assert listing.ok and [t.name for t in listing.tools] == ["search", "purge"]
        assert (await router.list_tools("sesn_1", None, ref)).error_type == MCP_CONNECTION_FAILED
        missing = await router.list_tools("sesn_1", ENV, McpServerRef("x", "edge://nowhere"))
        assert missing.error_type == MCP_CONNECTION_FAILED and "'nowhere'" in missing.message

        ok = await router.call("sesn_1", ENV, ref, "search", {"q": "vpn"}, idempotency_key="k1")
        assert ok.outcome == "ok" and ok.content == [{"type": "text", "text": "ran with {'q': 'vpn'}"}]

        denied = await router.call("sesn_1", ENV, ref, "purge", {}, idempotency_key="k2")
        assert denied.is_error and denied.policy_denied and denied.error_type is None
        assert denied.outcome == "policy_denied"
        assert "rule mcp.wiki.deny[0]" in denied.content[0]["text"]

        gateway.down.add("wiki")
        assert (await router.list_tools("sesn_1", ENV, ref)).error_type == MCP_CONNECTION_FAILED
        down = await router.call("sesn_1", ENV, ref, "search", {}, idempotency_key="k3")
        assert down.error_type == MCP_CONNECTION_FAILED and down.outcome == MCP_CONNECTION_FAILED

        gone = await router.call(
            "sesn_1", ENV, McpServerRef("x", "edge://nowhere"), "a", {}, idempotency_key="k4"
        )
        assert gone.error_type == MCP_CONNECTION_FAILED
    assert gateway.runs == {"k1": 1}


async def test_the_mcp_http_pool_dials_only_what_the_guard_pinned() -> None:
    """Past the pre-flight check (a name that rebinds between the check and the connect): the
    SDK's HTTP pool asks the guard again and connects to the checked address only."""
    import httpx2

    from control_plane.mcp.client_session import _PinnedTransport
    from control_plane.outbound import OutboundRefused

    connections: list[int] = []

    async def count(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        writer.close()

    tcp = await asyncio.start_server(count, "127.0.0.1", 0)
    port = tcp.sockets[0].getsockname()[1]

    async def rebinding(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    try:
        guard = OutboundGuard(resolver=rebinding)
        async with httpx2.AsyncClient(transport=_PinnedTransport(guard.pin)) as http:
            with pytest.raises(OutboundRefused) as caught:
                await http.get(f"http://mcp.rebind.test:{port}/mcp")
        assert caught.value.rule == "outbound.loopback"
    finally:
        tcp.close()
        await tcp.wait_closed()
    assert connections == []
