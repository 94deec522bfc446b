"""The file tools' race-free path resolution and the workspace quota, in real containers."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from _sandbox_support import LIMITS, ManagerFactory

from edge_agent.sandbox import DockerRuntime, SandboxManager
from edge_agent.sandbox.channel import DaemonChannel
from outpost_wire.results import ToolResult
from tests.support.sandbox_calls import run_tool

pytestmark = pytest.mark.docker

SID = "sesn_paths"
SECRET = "SECRET-OUTSIDE-THE-WORKSPACE"
RACE_S = 5.0  # how long the tools run against the swapper (bounded, not a timing assertion)

# Runs inside the sandbox: swap /workspace/dir between a real directory and a symlink to /tmp/outside
# as fast as possible until killed (or for 60 s at most).
SWAPPER = """
import os, shutil, time
os.chdir("/workspace")
end = time.monotonic() + 60
while time.monotonic() < end:
    for step in (
        lambda: os.rename("real", "dir"),
        lambda: os.rename("dir", "real"),
        lambda: os.symlink("/tmp/outside", "dir"),
        lambda: os.unlink("dir") if os.path.islink("dir") else shutil.rmtree("dir"),
    ):
        try:
            step()
        except OSError:
            pass
"""


async def run(manager: SandboxManager, tool: str, **tool_input: Any) -> ToolResult:
    return await run_tool(manager, SID, tool, tool_input, timeout_s=60, limits=LIMITS)


async def test_openat2_is_available_in_a_sandbox(manager: SandboxManager, runtime: DockerRuntime) -> None:
    """Docker's default seccomp profile lets openat2 through, so the race test below runs it."""
    info = await manager.provision(SID, LIMITS)
    channel = await DaemonChannel.open(runtime, info.sandbox_id, user=manager.user, workdir=manager.workdir)
    try:
        assert channel.hello["openat2"] is True
        assert channel.hello["quota_bytes"] == 0  # this manager sets no quota
    finally:
        await channel.close()


async def test_a_directory_swapped_for_a_symlink_never_escapes(manager: SandboxManager) -> None:
    setup = await run(
        manager,
        "bash",
        command=(
            f"mkdir -p /tmp/outside /workspace/real && echo {SECRET} > /tmp/outside/f.txt && "
            "touch /tmp/outside/only-outside.txt && "
            "echo inside > /workspace/real/f.txt && "
            "cat > /tmp/swapper.py <<'EOF'\n" + SWAPPER + "EOF\n"
            "python3 /tmp/swapper.py >/dev/null 2>&1 & echo $! > /tmp/swapper.pid"
        ),
    )
    assert not setup.is_error, setup.plain_text
    reads = ok = 0
    escapes: list[str] = []
    deadline = time.monotonic() + RACE_S
    try:
        while time.monotonic() < deadline:
            results = await asyncio.gather(
                run(manager, "read", file_path="dir/f.txt"),
                run(manager, "read", file_path="/workspace/dir/f.txt"),
                run(manager, "write", file_path="dir/f.txt", content="inside\n"),
                run(manager, "edit", file_path="dir/f.txt", old_string="inside", new_string="inside"),
                run(manager, "grep", pattern="SECRET", path="dir"),
                run(manager, "glob", pattern="dir/*"),
            )
            for result in results[:2]:
                reads += 1
                ok += not result.is_error
            escapes += [
                r.plain_text for r in results if SECRET in r.plain_text or "only-outside" in r.plain_text
            ]
    finally:
        stopped = await run(manager, "bash", command="kill $(cat /tmp/swapper.pid); wait; true")
    assert not stopped.is_error, stopped.plain_text
    print(f"in a sandbox: {reads} reads ({ok} succeeded) against the swapper, {len(escapes)} escaped")
    assert escapes == []
    outside = await run(manager, "bash", command="ls -A /tmp/outside; cat /tmp/outside/f.txt")
    assert outside.plain_text == f"f.txt\nonly-outside.txt\n{SECRET}"  # nothing written or created outside


async def test_workspace_quota(make_manager: ManagerFactory) -> None:
    manager = await make_manager(workspace_quota_bytes=1024 * 1024)
    assert not (await run(manager, "write", file_path="a.txt", content="a" * 600_000)).is_error
    assert not (await run(manager, "write", file_path="c.txt", content="c" * 100_000)).is_error
    refused = await run(manager, "write", file_path="b.txt", content="b" * 600_000)
    assert refused.is_error and "would exceed its size quota" in refused.plain_text
    # bash is not stopped, but a call that leaves the workspace over the quota is an error ...
    over = await run(manager, "bash", command="head -c 2000000 /dev/zero > big && echo done")
    assert over.is_error and over.plain_text.startswith("done\n[the workspace is over its size quota")
    edit = await run(manager, "edit", file_path="c.txt", old_string="c" * 100_000, new_string="c" * 200_000)
    assert edit.is_error and "would exceed its size quota" in edit.plain_text
    # ... until files are removed.
    assert (await run(manager, "bash", command="rm big")).is_error is False
    assert not (await run(manager, "write", file_path="b.txt", content="b" * 300_000)).is_error
    listing = await run(manager, "bash", command="ls")
    assert listing.plain_text == "a.txt\nb.txt\nc.txt"  # the refused write created nothing
