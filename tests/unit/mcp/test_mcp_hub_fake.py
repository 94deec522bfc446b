"""McpHub and ServerConnection against a fake opener: start, failure and recovery, restart after a
lost or hung call, policy, arguments, lifecycle. The real SDK is covered in tests/integration/mcp."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
import pytest

from edge_agent.errors import ConfigError
from edge_agent.mcp import (
    McpCatalog,
    McpConnectionFailed,
    McpHub,
    McpInvalidArguments,
    McpPolicy,
    McpServerConfig,
    McpServerNotAllowed,
    McpTool,
    McpToolNotAllowed,
    ServerStatus,
    TextBlock,
)
from edge_agent.mcp.models import ToolOutput
from edge_agent.mcp.server_connection import IllegalTransition, ServerConnection, ServerState, Session
from tests.support import eventually

TOOLS = (
    McpTool("echo", "Echo.", {"type": "object"}),
    McpTool("hang", "Hang.", {"type": "object"}),
    McpTool("lose", "Lose the connection.", {"type": "object"}),
    McpTool("secret_admin", "Not for agents.", {"type": "object"}),
)


class FakeSession:
    def __init__(self, backend: FakeBackend, on_lost: Callable[[str], None]) -> None:
        self.backend = backend
        self.on_lost = on_lost
        self.number = backend.opened

    async def list_tools(self) -> tuple[McpTool, ...]:
        if self.backend.list_fails:
            raise McpConnectionFailed("listing the tools failed: boom")
        return self.backend.tools

    async def call_tool(self, tool: str, arguments: Mapping[str, Any], timeout_s: float) -> ToolOutput:
        if tool == "hang":
            with anyio.move_on_after(timeout_s):
                await anyio.sleep_forever()
            raise McpConnectionFailed(f"tool 'hang' did not answer within {timeout_s:.3g}s")
        if tool == "lose":
            self.on_lost("the server process exited")
            raise McpConnectionFailed("the connection was lost during the call")
        return ToolOutput((TextBlock(f"{arguments.get('text', '')}#{self.number}"),), is_error=tool == "fail")


class FakeBackend:
    """Scripted outcomes for successive connects: "ok", "fail", "hang" or a delay in seconds."""

    def __init__(self, *plan: str | float, then: str | float = "ok") -> None:
        self.plan = list(plan)
        self.then = then
        self.opened = 0
        self.tools: tuple[McpTool, ...] = TOOLS
        self.list_fails = False
        self.live: list[FakeSession] = []

    @asynccontextmanager
    async def open(self, on_lost: Callable[[str], None]) -> AsyncIterator[Session]:
        self.opened += 1
        step = self.plan.pop(0) if self.plan else self.then
        if step == "fail":
            raise McpConnectionFailed(f"refused (attempt {self.opened})")
        if step == "hang":
            await anyio.sleep_forever()
        if isinstance(step, float):
            await anyio.sleep(step)
        session = FakeSession(self, on_lost)
        self.live.append(session)
        try:
            yield session
        finally:
            self.live.remove(session)


def _opener(backends: dict[str, FakeBackend]) -> Callable[..., AbstractAsyncContextManager[Session]]:
    def opener(
        config: McpServerConfig, on_lost: Callable[[str], None]
    ) -> AbstractAsyncContextManager[Session]:
        return backends[config.name].open(on_lost)

    return opener


def _config(name: str, **extra: Any) -> McpServerConfig:
    return McpServerConfig.model_validate(
        {
            "name": name,
            "stdio": {"command": "unused"},
            "restart_backoff_initial_s": 0.01,
            "restart_backoff_max_s": 0.05,
            "call_timeout_s": 5,
            **extra,
        }
    )


def _policy(**servers: Any) -> McpPolicy:
    return McpPolicy.model_validate({"servers": servers})


def _status(hub: McpHub, name: str) -> ServerStatus | None:
    entry = hub.catalog().server(name)
    return None if entry is None else entry.status


async def test_one_failing_server_does_not_stop_the_others() -> None:
    backends = {"good": FakeBackend(), "bad": FakeBackend(then="fail")}
    hub = McpHub([_config("good"), _config("bad")], _policy(good={}, bad={}), opener=_opener(backends))
    async with hub:
        catalog = hub.catalog()
        good, bad = catalog.server("good"), catalog.server("bad")
        assert good is not None and bad is not None
        assert good.status is ServerStatus.UP and good.last_error is None
        assert bad.status is ServerStatus.DOWN and bad.last_error is not None
        assert bad.last_error.startswith("refused")
        assert (await hub.call("good", "echo", {"text": "hi"})).content == (TextBlock("hi#1"),)
        with pytest.raises(McpConnectionFailed, match=r"MCP server 'bad' is down \(refused"):
            await hub.call("bad", "echo", {})
        await eventually(lambda: backends["bad"].opened >= 3)  # retried in the background


async def test_a_server_that_comes_up_later_fires_on_change() -> None:
    changes: list[McpCatalog] = []
    backends = {"late": FakeBackend("fail", "fail")}
    hub = McpHub([_config("late")], _policy(late={}), opener=_opener(backends), on_change=changes.append)
    async with hub:
        assert _status(hub, "late") is ServerStatus.DOWN
        await eventually(lambda: bool(changes))
        assert changes[-1].server("late").status is ServerStatus.UP  # type: ignore[union-attr]
        assert changes[-1].digest == hub.catalog().digest
        assert (await hub.call("late", "echo", {"text": "x"})).content == (TextBlock("x#3"),)


async def test_startup_timeout_marks_the_server_down() -> None:
    backends = {"slow": FakeBackend("hang")}
    hub = McpHub([_config("slow", startup_timeout_s=0.1)], _policy(slow={}), opener=_opener(backends))
    async with hub:
        entry = hub.catalog().server("slow")
        assert entry is not None and entry.status is ServerStatus.DOWN
        assert entry.last_error == "did not start within 0.1s (startup_timeout_s)"
        await eventually(lambda: _status(hub, "slow") is ServerStatus.UP)


async def test_a_hung_call_fails_and_restarts_the_server() -> None:
    backends = {"s": FakeBackend()}
    async with McpHub([_config("s")], _policy(s={}), opener=_opener(backends)) as hub:
        with pytest.raises(McpConnectionFailed, match=r"'hang' did not answer within 0.05s; restarting it"):
            await hub.call("s", "hang", {}, timeout_s=0.05)
        assert _status(hub, "s") is ServerStatus.DOWN  # at once, before the supervisor acts
        await eventually(lambda: _status(hub, "s") is ServerStatus.UP)
        assert (await hub.call("s", "echo", {"text": "again"})).content == (TextBlock("again#2"),)


async def test_a_lost_connection_restarts_and_calls_wait_for_a_connect_in_progress() -> None:
    backends = {"s": FakeBackend(then=0.2)}
    async with McpHub([_config("s")], _policy(s={}), opener=_opener(backends)) as hub:
        with pytest.raises(McpConnectionFailed, match="lost during the call"):
            await hub.call("s", "lose", {})
        connection = hub._connections["s"]
        await eventually(lambda: connection.state is ServerState.CONNECTING)
        result = await hub.call("s", "echo", {"text": "waited"})  # waits for the connect
        assert result.content == (TextBlock("waited#2"),)
        assert result.latency_ms > 0


async def test_policy_refusals_name_the_rule() -> None:
    backends = {"s": FakeBackend(), "hidden": FakeBackend()}
    configs = [_config("s"), _config("hidden")]
    async with McpHub(
        configs, _policy(s={"tools": ["echo", "hang", "lose"]}), opener=_opener(backends)
    ) as hub:
        assert backends["hidden"].opened == 0  # configured but not allowed: never started
        assert [s.name for s in hub.catalog().servers] == ["s"]
        assert [t.name for t in hub.catalog().servers[0].tools] == ["echo", "hang", "lose"]
        with pytest.raises(McpServerNotAllowed) as unknown:
            await hub.call("nope", "echo", {})
        assert unknown.value.rule == "mcp.servers" and "not configured" in str(unknown.value)
        with pytest.raises(McpServerNotAllowed) as hidden:
            await hub.call("hidden", "echo", {})
        assert "policy rule: mcp.servers" in str(hidden.value)
        with pytest.raises(McpToolNotAllowed) as tool:
            await hub.call("s", "secret_admin", {})
        assert tool.value.rule == "mcp.servers.s.tools"


@pytest.mark.parametrize("arguments", [["a"], {1: "x"}, {"x": object()}, {"x": float("nan")}])
async def test_arguments_must_be_a_json_object(arguments: Any) -> None:
    async with McpHub([_config("s")], _policy(s={}), opener=_opener({"s": FakeBackend()})) as hub:
        with pytest.raises(McpInvalidArguments):
            await hub.call("s", "echo", arguments)


async def test_lifecycle() -> None:
    backends = {"s": FakeBackend()}
    hub = McpHub([_config("s")], _policy(s={}), opener=_opener(backends))
    with pytest.raises(McpConnectionFailed, match="not running"):
        await hub.call("s", "echo", {})
    await hub.start()
    await hub.start()  # idempotent
    assert backends["s"].opened == 1 and len(backends["s"].live) == 1
    await hub.close()
    await hub.close()  # idempotent
    assert backends["s"].live == []
    assert hub._connections["s"].state is ServerState.CLOSED
    with pytest.raises(McpConnectionFailed, match="not running"):
        await hub.call("s", "echo", {})


async def test_close_while_connecting() -> None:
    backends = {"s": FakeBackend("hang")}
    hub = McpHub([_config("s", startup_timeout_s=30)], _policy(s={}), opener=_opener(backends))
    start = asyncio.create_task(hub.start())
    await eventually(lambda: backends["s"].opened == 1)
    await hub.close()
    await asyncio.wait_for(start, 5)
    assert hub._connections["s"].state is ServerState.CLOSED


def test_duplicate_names_and_illegal_transitions() -> None:
    with pytest.raises(ConfigError, match="more than once"):
        McpHub([_config("s"), _config("s")], _policy(s={}))
    connection = ServerConnection(_config("s"), opener=_opener({}), on_change=lambda: None)
    with pytest.raises(IllegalTransition, match="idle -> up"):
        connection._set(ServerState.UP)


async def test_calls_are_logged_with_argument_keys_only(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    policy = _policy(s={"tools": ["echo"]})
    async with McpHub([_config("s")], policy, opener=_opener({"s": FakeBackend()})) as hub:
        await hub.call("s", "echo", {"text": "hunter2-value", "note": "x"})
        with pytest.raises(McpToolNotAllowed):
            await hub.call("s", "nope", {"password": "hunter2-value"})
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("edge_agent.mcp")]
    assert any("tool=echo outcome=ok" in line and "arg_keys=['note', 'text']" in line for line in lines)
    assert any("outcome=mcp_tool_not_allowed" in line and "arg_keys=['password']" in line for line in lines)
    assert all("hunter2-value" not in line for line in lines)


async def test_the_tool_list_is_refreshed_while_up() -> None:
    changes: list[McpCatalog] = []
    backend = FakeBackend()
    config = _config("s", refresh_interval_s=0.02)
    async with McpHub(
        [config], _policy(s={}), opener=_opener({"s": backend}), on_change=changes.append
    ) as hub:
        backend.tools = (*TOOLS, McpTool("added", "New.", {"type": "object"}))
        await eventually(lambda: bool(changes))
        assert "added" in [t.name for t in changes[-1].servers[0].tools]
        backend.list_fails = True  # a failed refresh restarts the connection
        await eventually(lambda: backend.opened >= 2)
        assert hub.catalog().servers[0].last_error == "listing the tools failed: boom"


async def test_start_can_return_before_slow_servers_settle() -> None:
    backend = FakeBackend(1.0)
    hub = McpHub([_config("slow")], _policy(slow={}), opener=_opener({"slow": backend}))
    started = time.monotonic()
    await hub.start(wait_s=0.05)
    try:
        assert time.monotonic() - started < 0.9
        assert hub.catalog().servers[0].status is ServerStatus.DOWN
        assert hub.catalog().servers[0].last_error == "connecting"
        result = await hub.call("slow", "echo", {"text": "t"})  # waits for the connect in progress
        assert result.content == (TextBlock("t#1"),)
    finally:
        await hub.close()
