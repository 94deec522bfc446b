"""The agent toolset through SandboxManager.execute, in real containers."""

from __future__ import annotations

import asyncio
import base64
import struct
import time
import zlib
from typing import Any

import pytest
from _sandbox_support import LIMITS

from edge_agent.sandbox import SandboxManager
from outpost_wire.results import ImageBlock, ToolResult
from tests.support.sandbox_calls import run_tool

pytestmark = pytest.mark.docker

SID = "sesn_tools"


async def run(
    manager: SandboxManager, tool: str, timeout_s: float | None = None, **tool_input: Any
) -> ToolResult:
    return await run_tool(manager, SID, tool, tool_input, timeout_s=timeout_s, limits=LIMITS)


async def bash(manager: SandboxManager, command: str, **extra: Any) -> ToolResult:
    return await run(manager, "bash", command=command, **extra)


def tiny_png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\0\0\0\0"))
        + chunk(b"IEND", b"")
    )


async def test_shell_state_persists(manager: SandboxManager) -> None:
    first = await bash(manager, "cd /tmp && export X=1")
    assert not first.is_error
    second = await bash(manager, "echo $X; pwd")
    assert (second.plain_text, second.is_error) == ("1\n/tmp", False)


async def test_restart_timeout_exit_and_truncation(manager: SandboxManager) -> None:
    await bash(manager, "cd /tmp && export X=1")
    assert (await run(manager, "bash", restart=True)).plain_text == "bash session restarted"
    assert (await bash(manager, 'echo "[$X]"; pwd')).plain_text == "[]\n/workspace"

    started = time.monotonic()
    timed_out = await bash(manager, "sleep 20", timeout_ms=500)
    assert timed_out.is_error and timed_out.plain_text == "bash: bash command timed out after 0.5s"
    assert time.monotonic() - started < 5
    assert (await bash(manager, "echo back")).plain_text == "back"

    failed = await bash(manager, "echo some output; exit 7")
    assert failed.is_error and failed.plain_text == "some output"
    assert (await run(manager, "bash")).plain_text == "bash: command is required"

    long = await bash(manager, "seq 1 200000")
    assert not long.is_error
    assert long.plain_text.startswith("[output truncated]\n") and long.plain_text.endswith("\n200000")
    assert len(long.plain_text.encode()) <= 100 * 1024 + 64


async def test_execute_timeout_caps_bash_timeout(manager: SandboxManager) -> None:
    result = await bash(manager, "sleep 20", timeout_ms=60_000, timeout_s=0.3)
    assert result.is_error and "timed out after 0.3s" in result.plain_text


async def test_file_tools_round_trip(manager: SandboxManager) -> None:
    wrote = await run(manager, "write", file_path="src/app.py", content="def main():\n    return 1\n# TODO\n")
    assert (wrote.plain_text, wrote.is_error) == ("wrote 32 bytes to src/app.py", False)
    await run(manager, "write", file_path="/workspace/notes.md", content="TODO: ship\n")

    read = await run(manager, "read", file_path="src/app.py")
    assert read.plain_text == "def main():\n    return 1\n# TODO\n"
    ranged = await run(manager, "read", file_path="src/app.py", view_range=[2, 2])
    assert ranged.plain_text == "    return 1"

    edited = await run(manager, "edit", file_path="src/app.py", old_string="return 1", new_string="return 2")
    assert edited.plain_text == "edited src/app.py (1 replacement(s))"
    assert "return 2" in (await bash(manager, "cat src/app.py")).plain_text
    dup = await run(manager, "edit", file_path="src/app.py", old_string="TODO", new_string="x")
    assert not dup.is_error
    missing = await run(manager, "edit", file_path="src/app.py", old_string="nope", new_string="x")
    assert missing.is_error and "not found" in missing.plain_text

    globbed = await run(manager, "glob", pattern="**/*.py")
    assert globbed.plain_text == "/workspace/src/app.py"
    assert (await run(manager, "glob", pattern="*.rs")).plain_text == "no matches"
    assert (await run(manager, "glob", pattern="/etc/*")).is_error

    grepped = await run(manager, "grep", pattern="TODO")
    assert grepped.plain_text == "/workspace/notes.md:1:TODO: ship"
    assert (await run(manager, "grep", pattern="return \\d", path="src")).plain_text == (
        "/workspace/src/app.py:2:    return 2"
    )
    assert (await run(manager, "grep", pattern="absent")).plain_text == "no matches"
    bad = await run(manager, "grep", pattern="(")
    assert bad.is_error and bad.plain_text.startswith("grep: invalid regex")


async def test_read_image_gives_image_block(manager: SandboxManager) -> None:
    png = tiny_png()
    encoded = base64.b64encode(png).decode()
    await bash(manager, f"echo {encoded} | base64 -d > pixel.png")
    result = await run(manager, "read", file_path="pixel.png")
    assert not result.is_error
    assert result.content == (ImageBlock("image/png", png),)


@pytest.mark.parametrize(
    "path",
    ["../etc/passwd", "/etc/passwd", "etc-link/passwd", "/proc/self/environ", "/mnt/../etc/passwd"],
)
async def test_paths_outside_workspace(manager: SandboxManager, path: str) -> None:
    await bash(manager, "ln -sfn /etc etc-link")
    result = await run(manager, "read", file_path=path)
    assert result.is_error
    assert result.plain_text == (
        f"read: path '{path}' is outside the session's working directory (/workspace) and its mounts (/mnt)"
    )
    written = await run(manager, "write", file_path=path, content="x")
    assert written.is_error and "outside the session's working directory" in written.plain_text


async def test_invalid_input_is_rejected_before_provisioning(manager: SandboxManager) -> None:
    result = await run(manager, "read")
    assert result.is_error and "file_path" in result.plain_text
    unknown = await run(manager, "web_search", query="x")
    assert unknown.is_error and "unknown tool" in unknown.plain_text
    assert manager.in_use() == 0


async def test_file_tools_run_while_bash_is_busy(manager: SandboxManager) -> None:
    await bash(manager, "true")
    slow = asyncio.create_task(bash(manager, "sleep 1.5; echo slow"))
    started = time.monotonic()
    fast = await run(manager, "write", file_path="quick.txt", content="x")
    assert not fast.is_error and time.monotonic() - started < 1.0
    assert (await slow).plain_text == "slow"


async def test_sessions_run_in_parallel(manager: SandboxManager) -> None:
    async def session(sid: str) -> tuple[str, float]:
        await run_tool(manager, sid, "bash", {"command": "true"}, limits=LIMITS)
        started = time.monotonic()
        result = await run_tool(manager, sid, "bash", {"command": f"sleep 1; echo {sid}"}, limits=LIMITS)
        return result.plain_text, time.monotonic() - started

    started = time.monotonic()
    results = await asyncio.gather(session("par_a"), session("par_b"))
    assert [text for text, _ in results] == ["par_a", "par_b"]
    assert time.monotonic() - started < 1.0 + 2.0  # two provisions + one second, not two
    assert all(elapsed < 1.8 for _, elapsed in results)
