"""SandboxManager against the in-memory fake runtime: provision, idle pause and resume, replacement
after a death, reconcile after a crash, warm-pool claims. No Docker; the manager's real channel
talks to the fake's sandboxd over a socket pair. (The same behaviour against Docker:
tests/integration/sandbox/.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from edge_agent.errors import CapacityExhausted
from edge_agent.sandbox import ContainerRuntime, SandboxLimits, SandboxManager, ToolCall
from edge_agent.sandbox.spec import (
    LABEL_CLAIMED,
    LABEL_POOL,
    LABEL_WORKSPACE,
    claim_volume_name,
    volume_name,
)
from outpost_wire.results import ToolResult
from tests.support import eventually
from tests.support.docker_engine import destroy_all_sandboxes
from tests.support.fake_runtime import ContainerState, FakeContainer, FakeEngine
from tests.support.sandbox_calls import run_tool

LIMITS = SandboxLimits(image="outpost-sandbox:1", cpus=1.0, memory_bytes=512 << 20, pids=128)
EDGE = "edge-fake-1"
S = ContainerState

ManagerFactory = Callable[..., Awaitable[SandboxManager]]


@pytest.fixture
async def engine() -> AsyncIterator[FakeEngine]:
    engine = FakeEngine()
    yield engine
    await engine.shutdown()


@pytest.fixture
async def make_manager(engine: FakeEngine) -> AsyncIterator[ManagerFactory]:
    """Started managers on their own connection to the engine; closed at the end."""
    made: list[SandboxManager] = []

    async def make(**kwargs: Any) -> SandboxManager:
        runtime: ContainerRuntime = engine.connect()  # the fake is a ContainerRuntime (mypy checks)
        kwargs.setdefault("edge_id", EDGE)
        kwargs.setdefault("default_limits", LIMITS)
        kwargs.setdefault("idle_pause_s", 3600.0)  # no idle pause unless a test asks for one
        manager = SandboxManager(runtime, **kwargs)
        await manager.start()
        made.append(manager)
        return manager

    yield make
    for manager in made:
        await manager.close()


async def call(manager: SandboxManager, session_id: str, tool: str, **tool_input: Any) -> ToolResult:
    return await run_tool(manager, session_id, tool, tool_input, limits=LIMITS)


async def write(manager: SandboxManager, session_id: str, path: str, content: str) -> None:
    result = await call(manager, session_id, "write", file_path=path, content=content)
    assert not result.is_error, result.plain_text


def pool_members(engine: FakeEngine) -> list[FakeContainer]:
    return [c for c in engine.live() if LABEL_POOL in c.labels]


async def read(manager: SandboxManager, session_id: str, path: str) -> str:
    result = await call(manager, session_id, "read", file_path=path)
    assert not result.is_error, result.plain_text
    return result.plain_text


async def test_provision_makes_one_labelled_container_on_the_session_volume(
    engine: FakeEngine, make_manager: ManagerFactory
) -> None:
    kinds: list[str] = []
    manager = await make_manager(on_provisioned=lambda kind, _s: kinds.append(kind))
    info = await manager.provision("s1", LIMITS)
    assert not info.reused and info.session_id == "s1" and info.image == LIMITS.image
    [container] = engine.live({"outpost.edge_id": EDGE, "outpost.session_id": "s1"})
    assert container.id == info.sandbox_id and container.state is S.RUNNING
    assert container.name.startswith("outpost-sb-s1-")
    assert container.volume == volume_name("outpost", "s1") and container.volume in engine.volumes
    assert kinds == ["cold"] and manager.in_use() == 1

    again = await manager.provision("s1", LIMITS)
    assert again.reused and again.sandbox_id == info.sandbox_id
    # The hot path: a call through the held channel costs no engine call at all.
    before = len(engine.calls)
    await write(manager, "s1", "notes.txt", "hello")
    assert await read(manager, "s1", "/workspace/notes.txt") == "hello"
    assert engine.calls[before:] == []
    assert engine.volumes[container.volume].files == {"notes.txt": "hello"}


async def test_capacity_is_max_sandboxes(make_manager: ManagerFactory) -> None:
    manager = await make_manager(max_sandboxes=1)
    await manager.provision("s1", LIMITS)
    with pytest.raises(CapacityExhausted):
        await manager.provision("s2", LIMITS)
    assert await manager.destroy("s1")
    await manager.provision("s2", LIMITS)  # the slot is free again


async def test_idle_sandbox_is_paused_and_the_next_call_resumes_it(
    engine: FakeEngine, make_manager: ManagerFactory
) -> None:
    kinds: list[str] = []
    # A short idle period so that the pause happens within the test (the loop checks every 20 ms).
    manager = await make_manager(idle_pause_s=0.05, on_provisioned=lambda kind, _s: kinds.append(kind))
    await write(manager, "s1", "f", "kept")
    container = engine.containers[(await manager.provision("s1", LIMITS)).sandbox_id]
    await eventually(lambda: container.state is S.PAUSED, what="the idle sandbox to be paused")

    # A paused container answers nothing: the call only returns because the manager unpauses it.
    assert await read(manager, "s1", "f") == "kept"
    assert container.history[:4] == [S.CREATED, S.RUNNING, S.PAUSED, S.RUNNING]
    assert kinds == ["cold", "resume"]
    assert manager.in_use() == 1 and len(engine.live()) == 1  # the same container, resumed


async def test_a_dead_sandbox_is_replaced_on_the_same_workspace(
    engine: FakeEngine, make_manager: ManagerFactory
) -> None:
    manager = await make_manager()
    await write(manager, "s1", "a.txt", "before")
    old = engine.containers[(await manager.provision("s1", LIMITS)).sandbox_id]
    engine.kill(old.id)

    # A read-only tool is retried once in the replacement.
    assert await read(manager, "s1", "a.txt") == "before"
    info = await manager.provision("s1", LIMITS)
    new = engine.containers[info.sandbox_id]
    assert new.id != old.id and new.state is S.RUNNING
    assert old.state is S.REMOVED and old.history[-2:] == [S.EXITED, S.REMOVED]
    assert new.volume == old.volume
    assert manager.in_use() == 1


async def test_a_sandbox_dying_during_a_call_is_a_tool_error_then_replaced(
    engine: FakeEngine, make_manager: ManagerFactory
) -> None:
    manager = await make_manager()
    first = engine.containers[(await manager.provision("s1", LIMITS)).sandbox_id]
    task = asyncio.ensure_future(call(manager, "s1", "bash", command="sleep 600"))
    await eventually(lambda: first.pending_calls == 1, what="the call to reach the sandbox")
    engine.kill(first.id)
    result = await task
    assert result.is_error and "died during the call" in result.plain_text  # bash is not retried
    assert first.commands == ["sleep 600"]

    info = await manager.provision("s1", LIMITS)
    assert info.sandbox_id != first.id and engine.containers[info.sandbox_id].state is S.RUNNING


async def test_a_failed_resume_replaces_the_sandbox(engine: FakeEngine, make_manager: ManagerFactory) -> None:
    # A short idle period so that the pause happens within the test (the loop checks every 20 ms).
    manager = await make_manager(idle_pause_s=0.05)
    await write(manager, "s1", "f", "kept")
    old = engine.containers[(await manager.provision("s1", LIMITS)).sandbox_id]
    await eventually(lambda: old.state is S.PAUSED, what="the idle sandbox to be paused")
    engine.fail_next("unpause", "the engine refused")
    assert await read(manager, "s1", "f") == "kept"
    assert old.state is S.REMOVED
    assert [c.volume for c in engine.live()] == [old.volume]


async def test_a_restarted_manager_adopts_live_sandboxes_and_cleans_up_the_rest(
    engine: FakeEngine, make_manager: ManagerFactory
) -> None:
    sessions = ("pooled", "live", "frozen", "dead")
    crashed_runtime = engine.connect()
    crashed = SandboxManager(crashed_runtime, edge_id=EDGE, default_limits=LIMITS, warm_pool_size=1)
    await crashed.start()
    await eventually(lambda: crashed.pooled() == 1, what="the warm pool to fill")
    for session in sessions:  # the first one claims the pool's member
        await write(crashed, session, "f", f"{session} before")
    cid = {session: (await crashed.provision(session, LIMITS)).sandbox_id for session in sessions}
    assert cid["pooled"] in {c.id for c in pool_members(engine)}
    await eventually(lambda: crashed.pooled() == 1, what="the warm pool to refill")
    stale = [c for c in pool_members(engine) if c.id not in cid.values()]
    engine.pause(cid["frozen"])  # as if paused when idle
    engine.kill(cid["dead"])
    # The crash: its Docker connection goes first, so closing it leaves everything in place.
    await crashed_runtime.close()
    await crashed.close()
    assert stale and all(c.state is S.PAUSED for c in stale)
    assert engine.containers[cid["live"]].state is S.RUNNING

    manager = await make_manager()  # starting reconciles
    for member in stale:  # never adopted
        assert member.state is S.REMOVED and member.volume not in engine.volumes
    assert engine.containers[cid["dead"]].state is S.REMOVED
    assert engine.containers[cid["frozen"]].state is S.RUNNING  # adopted and unpaused
    assert manager.in_use() == 3
    for session in ("live", "frozen", "pooled"):
        info = await manager.provision(session, LIMITS)
        assert info.reused and info.sandbox_id == cid[session]
        assert await read(manager, session, "f") == f"{session} before"
    # The dead one's session gets a new container on its old workspace.
    assert await read(manager, "dead", "f") == "dead before"
    assert (await manager.provision("dead", LIMITS)).sandbox_id != cid["dead"]

    report = await manager.reconcile()  # nothing left to do
    assert report.reattached == [] and report.removed == [] and report.volumes_removed == []
    for session in ("live", "frozen", "dead", "pooled"):
        assert await manager.destroy(session)
    assert engine.live() == [] and engine.volumes == {}


async def test_a_new_session_claims_a_pool_member(engine: FakeEngine, make_manager: ManagerFactory) -> None:
    kinds: list[str] = []
    manager = await make_manager(warm_pool_size=1, on_provisioned=lambda kind, _s: kinds.append(kind))
    await eventually(lambda: manager.pooled() == 1, what="the warm pool to fill")
    [member] = pool_members(engine)
    assert member.history == [S.CREATED, S.RUNNING, S.PAUSED] and manager.in_use() == 0

    await write(manager, "s1", "f", "claimed")
    assert kinds == ["claim"]
    info = await manager.provision("s1", LIMITS)
    assert info.sandbox_id == member.id and member.state is S.RUNNING and manager.in_use() == 1
    claim = engine.volumes[claim_volume_name("outpost", "s1")]
    assert claim.labels[LABEL_CLAIMED] == member.id and claim.labels[LABEL_WORKSPACE] == member.volume
    assert engine.volumes[member.volume].files == {"f": "claimed"}
    await eventually(lambda: member.name.startswith("outpost-sb-s1-"), what="the rename after the session")
    # The pool refills (after its refill delay) with a new member.
    await eventually(lambda: manager.pooled() == 1, what="the pool to refill")

    assert await manager.destroy("s1")
    assert member.history[-1] is S.REMOVED
    assert member.volume not in engine.volumes and claim.name not in engine.volumes


async def test_destroy_all_sandboxes_leaves_nothing_of_the_edge(
    engine: FakeEngine, make_manager: ManagerFactory
) -> None:
    manager = await make_manager(warm_pool_size=1)
    other = await make_manager(edge_id="edge-fake-2")
    await eventually(lambda: manager.pooled() == 1, what="the warm pool to fill")
    await write(manager, "s1", "f", "x")  # claims the member
    await write(manager, "s2", "f", "x")
    await write(other, "s3", "f", "x")
    await destroy_all_sandboxes(manager)
    assert [c.labels["outpost.session_id"] for c in engine.live()] == ["s3"]  # only the other edge's
    assert list(engine.volumes) == [volume_name("outpost", "s3")]


async def test_one_deadline_the_daemon_is_told_the_tool_timeout_or_what_is_left_before_it(
    engine: FakeEngine, make_manager: ManagerFactory
) -> None:
    manager = await make_manager()
    container = engine.containers[(await manager.provision("s1", LIMITS)).sandbox_id]
    assert not (await call(manager, "s1", "bash", command="true", timeout_ms=2000)).is_error
    assert container.timeouts_ms == [2000]  # far from the deadline: the tool's own timeout
    # A deadline 0.8 s away (a request's): the daemon is told less, to report before the edge gives
    # up; the fake's sleep never answers, so the edge gives up at the deadline with a tool error.
    now = asyncio.get_running_loop().time()
    near = ToolCall.of("s1", "bash", {"command": "sleep 60"}, now=now, deadline=now + 0.8)
    result = await manager.execute(near, LIMITS)
    assert result.is_error and "the sandbox did not answer within" in result.plain_text
    assert 0 < container.timeouts_ms[-1] <= 600  # 0.8 s at most, less the margin (a quarter)


async def test_making_the_sandbox_ready_counts_against_the_deadline(
    engine: FakeEngine, make_manager: ManagerFactory
) -> None:
    manager = await make_manager()
    now = asyncio.get_running_loop().time()
    late = ToolCall.of("s1", "bash", {"command": "echo hi"}, now=now, deadline=now - 0.001)
    result = await manager.execute(late, LIMITS)
    assert result.is_error and "deadline passed while its sandbox was being made ready" in result.plain_text
    assert all(c.commands == [] for c in engine.live())  # the tool did not run
