"""The dispatcher and repositories: egress ``none`` becomes an allowlist of no hosts (the relay is
behind the proxy), the policy still decides, and a clone failure is a typed Failure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edge_agent.dispatch import Dispatcher
from edge_agent.egress import EgressMode, EgressSpec
from edge_agent.errors import RepositoryAuthenticationFailed
from edge_agent.journal import ResultJournal
from edge_agent.policy import Policy
from edge_agent.sandbox import SandboxLimits, ToolCall
from outpost_wire.errors import ErrorCode
from outpost_wire.frames import Egress, Execute, Failure, Provision, Provisioned, Repository, Request
from outpost_wire.results import ToolResult

REPO = Repository("sesrsc_1", "https://git.internal/a.git", "/workspace/a", token="tok")


class FakeManager:
    def __init__(self, fail: Exception | None = None) -> None:
        self.limits: list[SandboxLimits] = []
        self.fail = fail

    async def provision(self, session_id: str, limits: SandboxLimits) -> Any:
        self.limits.append(limits)
        if self.fail is not None:
            raise self.fail
        return type("Info", (), {"sandbox_id": "c1", "image": limits.image, "reused": False})()

    async def execute(self, call: ToolCall, limits: SandboxLimits) -> ToolResult:
        self.limits.append(limits)
        if self.fail is not None:
            raise self.fail
        return ToolResult.text("ok")


def request(op: Any, n: int) -> Request:
    return Request(f"req_{n}", "sesn_1", f"key_{n}", 0, op)


async def test_repositories_need_the_proxy(tmp_path: Path) -> None:
    manager = FakeManager()
    async with ResultJournal(tmp_path / "j.db", 3600) as journal:
        dispatcher = Dispatcher(manager, Policy(), journal)  # type: ignore[arg-type]
        assert isinstance(await dispatcher.handle(request(Provision(repositories=(REPO,)), 1)), Provisioned)
        assert manager.limits[-1].egress == EgressSpec(EgressMode.ALLOWLIST)
        assert manager.limits[-1].repositories == (REPO,)
        await dispatcher.handle(request(Execute("bash", "{}", sandbox=Provision(repositories=(REPO,))), 2))
        assert manager.limits[-1].repositories == (REPO,)
        # Without repositories, none stays none.
        await dispatcher.handle(request(Provision(), 3))
        assert manager.limits[-1].egress == EgressSpec() and manager.limits[-1].repositories == ()
        # An explicit allowlist is kept as it is.
        wanted = Provision(egress=Egress("allowlist", ()), repositories=(REPO,))
        await dispatcher.handle(request(wanted, 4))
        assert manager.limits[-1].egress == EgressSpec(EgressMode.ALLOWLIST)


async def test_a_policy_without_the_proxy_refuses_them_saying_why(tmp_path: Path) -> None:
    policy = Policy.model_validate({"egress": {"max_mode": "none"}})
    async with ResultJournal(tmp_path / "j.db", 3600) as journal:
        dispatcher = Dispatcher(FakeManager(), policy, journal)  # type: ignore[arg-type]
        denied = await dispatcher.handle(request(Provision(repositories=(REPO,)), 1))
        assert isinstance(denied, Failure) and denied.code is ErrorCode.POLICY_DENIED
        assert "egress.max_mode" in denied.message and "git relay" in denied.message
        assert isinstance(await dispatcher.handle(request(Provision(), 2)), Provisioned)


async def test_clone_failures_are_typed_failures_for_both_operations(tmp_path: Path) -> None:
    manager = FakeManager(RepositoryAuthenticationFailed(REPO.url, "Authentication failed"))
    async with ResultJournal(tmp_path / "j.db", 3600) as journal:
        dispatcher = Dispatcher(manager, Policy(), journal)  # type: ignore[arg-type]
        for outcome in (
            await dispatcher.handle(request(Provision(repositories=(REPO,)), 1)),
            await dispatcher.handle(
                request(Execute("bash", "{}", sandbox=Provision(repositories=(REPO,))), 2)
            ),
        ):
            assert outcome == Failure(
                ErrorCode.REPOSITORY_AUTHENTICATION_FAILED,
                "repository https://git.internal/a.git: Authentication failed",
            )
