"""The operator's sandbox service without HTTP or edges: what a key limited to environments may
drive, the answer at once when no edge of the environment is connected here, and the call passed
to the gateway as the harness would make it."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from control_plane.environments.commands import Viewer
from control_plane.errors import EdgeUnavailable, NotFound
from control_plane.sandboxes import ExecCall, SandboxService
from control_plane.store import MemoryStore
from control_plane.tunnel import EdgeRegistry
from outpost_wire.results import ToolResult

T0 = datetime(2026, 5, 1, tzinfo=UTC)
EVERYONE = Viewer()


class RecordingGateway:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, dict[str, Any], str, float | None]] = []
        self.destroyed: list[tuple[str, str]] = []

    async def execute(
        self,
        session_id: str,
        environment_id: str,
        tool: str,
        tool_input: Mapping[str, Any],
        *,
        idempotency_key: str,
        timeout_s: float | None = None,
    ) -> ToolResult:
        self.calls.append((session_id, environment_id, tool, dict(tool_input), idempotency_key, timeout_s))
        return ToolResult.text("ok")

    async def destroy(self, session_id: str, environment_id: str) -> bool:
        self.destroyed.append((session_id, environment_id))
        return True

    def edge_for_session(self, session_id: str) -> str | None:
        return "edge_1"


class OneEdgeHere(EdgeRegistry):
    """A registry that reports one connection for every environment (no tunnel needed)."""

    def for_environment(self, environment_id: str) -> list[Any]:  # type: ignore[override]
        return [object()]


async def stack(registry: EdgeRegistry | None = None) -> tuple[SandboxService, RecordingGateway, MemoryStore]:
    store = MemoryStore()
    for env in ("env_a", "env_b"):
        await store.create_resource("environment", env, {"name": env}, T0)
    await store.create_resource("session", "sesn_b", {"environment_id": "env_b"}, T0)
    gateway = RecordingGateway()
    return SandboxService(store, registry or OneEdgeHere(), gateway, lambda: T0), gateway, store


async def test_a_call_by_hand_goes_to_the_gateway_with_a_new_key() -> None:
    service, gateway, _ = await stack()
    result, edge = await service.execute(ExecCall("env_a", "s1", "bash", {"command": "true"}), EVERYONE)
    assert result.is_error is False and edge == "edge_1"
    [(session, env, tool, tool_input, key, timeout)] = gateway.calls
    assert (session, env, tool, tool_input, timeout) == ("s1", "env_a", "bash", {"command": "true"}, None)
    assert key.startswith("opx_")
    await service.execute(ExecCall("env_a", "s1", "read", {}, idempotency_key="mine", timeout_s=5), EVERYONE)
    assert gateway.calls[-1][4:] == ("mine", 5)


async def test_a_limited_key_drives_only_its_environments() -> None:
    service, gateway, _ = await stack()
    only_a = Viewer(frozenset({"env_a"}))
    with pytest.raises(NotFound, match="env_b"):
        await service.execute(ExecCall("env_b", "s1", "bash", {}), only_a)
    with pytest.raises(NotFound, match="sesn_b"):  # a session of another environment, by its id
        await service.destroy("env_a", "sesn_b", only_a)
    await service.execute(ExecCall("env_a", "my-box", "bash", {}), only_a)  # a name of its own
    assert await service.destroy("env_a", "my-box", only_a) is True
    assert gateway.destroyed == [("my-box", "env_a")] and len(gateway.calls) == 1


async def test_no_edge_here_is_an_answer_at_once() -> None:
    service, gateway, _ = await stack(EdgeRegistry())
    with pytest.raises(EdgeUnavailable) as unavailable:
        await service.execute(ExecCall("env_a", "s1", "bash", {}), EVERYONE)
    assert unavailable.value.environment_id == "env_a" and "env_a" in str(unavailable.value)
    with pytest.raises(NotFound):  # an unknown environment is not found, edge or none
        await service.execute(ExecCall("env_zz", "s1", "bash", {}), EVERYONE)
    assert gateway.calls == [] and service.connected_edges(EVERYONE) == []
