"""The hub against a real stdio MCP server (tests/support/mcp_servers/stdio_server.py)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from _mcp_support import IDENTITY, allow, stdio_config, write_secret

from edge_agent.mcp import (
    DocumentBlock,
    ImageBlock,
    McpConnectionFailed,
    McpHub,
    McpToolNotAllowed,
    ServerStatus,
    TextBlock,
)
from tests.support import eventually

PDF_BYTES = b"%PDF-1.4\n%outpost test\n%%EOF\n"  # what servers/stdio_server.py's report tool embeds


def _env(identity_file: Path) -> dict[str, object]:
    return {"OUTPOST_TEST_IDENTITY": {"from_file": str(identity_file)}}


async def _pid(hub: McpHub, server: str = "local") -> int:
    result = await hub.call(server, "pid", {})
    block = result.content[0]
    assert isinstance(block, TextBlock)
    return int(block.text)


def _gone(pid: int) -> bool:
    """True when the process no longer exists -- not even as a zombie awaiting its reap."""
    return not Path(f"/proc/{pid}").exists()


def _children_running(script: str) -> list[int]:
    me = str(os.getpid())
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[1] == me and script in cmdline:
            found.append(int(proc.name))
    return found


async def test_catalog_calls_and_env_from_file(identity_file: Path) -> None:
    config = stdio_config("local", env=_env(identity_file))
    async with McpHub([config], allow("local")) as hub:
        entry = hub.catalog().server("local")
        assert entry is not None and entry.status is ServerStatus.UP
        names = [tool.name for tool in entry.tools]
        assert names == sorted(names) and {"add", "echo", "fail", "crash", "hang", "whoami"} <= set(names)
        add = next(tool for tool in entry.tools if tool.name == "add")
        assert add.description == "Add two integers."
        assert add.input_schema["required"] == ["a", "b"]

        result = await hub.call("local", "add", {"a": 2, "b": 40})
        assert (result.content, result.is_error) == ((TextBlock("42"),), False)
        assert result.latency_ms > 0
        assert (await hub.call("local", "echo", {"text": "héllo"})).content == (TextBlock("héllo"),)
        assert (await hub.call("local", "whoami", {})).content == (TextBlock(IDENTITY),)

        failed = await hub.call("local", "fail", {})  # isError is a result, not an exception
        assert failed.is_error and "always fails" in failed.content[0].to_json()["text"]
        picture = await hub.call("local", "picture", {})
        assert isinstance(picture.content[0], ImageBlock) and picture.content[0].media_type == "image/png"
        structured = await hub.call("local", "structured", {"name": "abc"})
        assert '"length": 3' in structured.content[0].to_json()["text"]
        report = await hub.call("local", "report", {})  # an embedded PDF is a document block
        assert report.content == (DocumentBlock("application/pdf", PDF_BYTES),)


async def test_policy_filters_the_catalog_and_refuses_other_tools(identity_file: Path) -> None:
    config = stdio_config("local", env=_env(identity_file))
    async with McpHub([config], allow(local={"tools": ["echo", "add"]})) as hub:
        entry = hub.catalog().server("local")
        assert entry is not None and [t.name for t in entry.tools] == ["add", "echo"]
        with pytest.raises(McpToolNotAllowed) as info:
            await hub.call("local", "whoami", {})
        assert info.value.rule == "mcp.servers.local.tools"
        assert IDENTITY not in str(info.value)


async def test_crash_fails_the_call_then_the_server_is_restarted(identity_file: Path) -> None:
    async with McpHub([stdio_config("local", env=_env(identity_file))], allow("local")) as hub:
        first = await _pid(hub)
        with pytest.raises(McpConnectionFailed, match="lost during the call; restarting it") as info:
            await hub.call("local", "crash", {})
        assert info.value.mcp_code.value == "mcp_connection_failed_error"
        await eventually(lambda: hub.catalog().servers[0].status is ServerStatus.UP)
        assert await _pid(hub) != first
        assert _gone(first)


async def test_hang_times_out_then_the_server_recovers(identity_file: Path) -> None:
    async with McpHub([stdio_config("local", env=_env(identity_file))], allow("local")) as hub:
        first = await _pid(hub)
        with pytest.raises(McpConnectionFailed, match=r"'hang' did not answer within 0.5s; restarting it"):
            await hub.call("local", "hang", {}, timeout_s=0.5)
        await eventually(lambda: hub.catalog().servers[0].status is ServerStatus.UP)
        assert (await hub.call("local", "echo", {"text": "back"})).content == (TextBlock("back"),)
        assert _gone(first)


async def test_fifty_concurrent_calls_share_one_session(identity_file: Path) -> None:
    async with McpHub([stdio_config("local", env=_env(identity_file))], allow("local")) as hub:
        pid = await _pid(hub)
        results = await asyncio.gather(*(hub.call("local", "echo", {"text": f"m{i}"}) for i in range(50)))
        assert [r.content for r in results] == [(TextBlock(f"m{i}"),) for i in range(50)]
        assert await _pid(hub) == pid  # one process served them all


async def test_close_leaves_no_child_process(identity_file: Path) -> None:
    configs = [stdio_config(n, env=_env(identity_file)) for n in ("one", "two")]
    hub = McpHub(configs, allow("one", "two"))
    await hub.start()
    pids = [await _pid(hub, "one"), await _pid(hub, "two")]
    assert sorted(_children_running("stdio_server.py")) == sorted(pids)
    await hub.close()
    await hub.close()
    assert all(_gone(pid) for pid in pids)  # exited and reaped: no zombie either
    assert _children_running("stdio_server.py") == []


async def test_broken_servers_are_down_and_the_rest_serve(tmp_path: Path, identity_file: Path) -> None:
    loose = write_secret(tmp_path / "loose", "value", mode=0o644)
    configs = [
        stdio_config("local", env=_env(identity_file)),
        stdio_config("loose", env={"X": {"from_file": str(loose)}}),
        stdio_config("ghost", command="/nonexistent/mcp-server"),
    ]
    async with McpHub(configs, allow("local", "loose", "ghost")) as hub:
        catalog = hub.catalog()
        assert catalog.server("local").status is ServerStatus.UP  # type: ignore[union-attr]
        loose_entry, ghost = catalog.server("loose"), catalog.server("ghost")
        assert loose_entry is not None and ghost is not None
        assert loose_entry.status is ServerStatus.DOWN and f"chmod 600 {loose}" in (
            loose_entry.last_error or ""
        )
        assert ghost.status is ServerStatus.DOWN
        assert ghost.last_error == "cannot start '/nonexistent/mcp-server': No such file or directory"
        with pytest.raises(McpConnectionFailed, match="is down"):
            await hub.call("ghost", "echo", {"text": "x"})
        assert (await hub.call("local", "echo", {"text": "ok"})).content == (TextBlock("ok"),)
