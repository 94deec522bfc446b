"""Usage and budget through the official SDK: a real control plane (SQLite, the real harness), the
local scripted Messages server, and ``anthropic`` with strict response validation.

A session with a budget of one cent runs its first turn (nothing spent yet), then its next turn
stops with ``budget_reached`` without calling the model; raising the budget lets the following
turn run. The session parses strictly, its ``stats.active_seconds`` grew while it ran and stays put
while it is idle, and its ``usage`` (and the ``session.usage`` events) are cumulative.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic.types.beta.beta_managed_agents_session_usage_event import (
    BetaManagedAgentsSessionUsageEvent,
)

from control_plane.harness import HarnessConfig
from control_plane.server import ControlPlane
from control_plane.sessions.usage import ModelPrice
from scripted_model import LocalModelServer, Turn
from tests.support import eventually
from tests.support.api_app import assert_complete
from tests.support.edge_link import control_plane_config
from tests.support.edge_link import no_ambient_proxy as no_ambient_proxy

pytestmark = pytest.mark.usefixtures("no_ambient_proxy")

MODEL = "claude-budget-test"
# A cent per input token: the first request alone spends far more than the one-cent budget.
PRICES = {
    MODEL: ModelPrice(
        input_usd_per_mtok=10_000,
        output_usd_per_mtok=10_000,
        cache_write_usd_per_mtok=10_000,
        cache_read_usd_per_mtok=10_000,
    )
}


@asynccontextmanager
async def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[ControlPlane, Any]]:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "unused")
    async with LocalModelServer(lambda request: Turn.text("Done.")) as model:
        harness = HarnessConfig(model_prices=PRICES)  # the shipped defaults otherwise
        settings = control_plane_config(tmp_path, model_base_url=model.base_url, harness=harness)
        async with ControlPlane(settings) as cp:
            yield cp, model


def sdk(cp: ControlPlane) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        base_url=cp.http_url, api_key=cp.admin_key(), max_retries=0, _strict_response_validation=True
    )


async def say(client: anthropic.AsyncAnthropic, session_id: str, text: str) -> None:
    await client.beta.sessions.events.send(
        session_id, events=[{"type": "user.message", "content": [{"type": "text", "text": text}]}]
    )


async def stops(client: anthropic.AsyncAnthropic, session_id: str, count: int) -> list[str]:
    """The stop reasons of the session's idles, once there are ``count``."""
    found: list[str] = []

    async def done() -> bool:
        events = [e async for e in client.beta.sessions.events.list(session_id)]
        found[:] = [e.stop_reason.type for e in events if e.type == "session.status_idle"]
        return len(found) >= count

    await eventually(done, 30.0, f"{count} idle(s) of {session_id}")
    return found


async def test_a_budget_stops_the_session_and_active_time_grows_only_while_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with stack(tmp_path, monkeypatch) as (cp, model), sdk(cp) as client:
        environment = await client.beta.environments.create(name="pool")
        agent = await client.beta.agents.create(name="writer", model=MODEL)
        session = await client.beta.sessions.create(
            agent=agent.id,
            environment_id=environment.id,
            budget={"type": "limit", "max_list_cost": {"amount": "1", "currency": "USD"}},
        )
        assert session.budget is not None and session.budget.max_list_cost.amount == "1"

        await say(client, session.id, "First.")
        assert await stops(client, session.id, 1) == ["end_turn"]
        first = await client.beta.sessions.retrieve(session.id)
        assert_complete(first)
        assert first.stats.active_seconds is not None and first.stats.active_seconds > 0
        assert first.usage.active_seconds == first.stats.active_seconds
        assert first.usage.input_tokens and first.usage.list_cost is not None
        assert int(first.usage.list_cost.amount) >= 1

        # Idle now: a short wait (no timing claim, only that idle time is not metered) changes nothing.
        await asyncio.sleep(0.3)
        again = await client.beta.sessions.retrieve(session.id)
        assert again.stats.active_seconds == first.stats.active_seconds

        await say(client, session.id, "Second.")
        assert await stops(client, session.id, 2) == ["end_turn", "budget_reached"]
        assert len(model.requests) == 1  # the model was not called for the second turn

        with pytest.raises(anthropic.BadRequestError, match="not above") as lowered:
            await client.beta.sessions.update(
                session.id, budget={"type": "limit", "max_list_cost": {"amount": "1", "currency": "USD"}}
            )
        assert lowered.value.body["error"]["details"]["error_code"] == "budget_not_raised"  # type: ignore[index]
        raised = {"type": "limit", "max_list_cost": {"amount": "1000000", "currency": "USD"}}
        await client.beta.sessions.update(session.id, budget=raised)  # type: ignore[arg-type]

        await say(client, session.id, "Third.")
        assert await stops(client, session.id, 3) == ["end_turn", "budget_reached", "end_turn"]
        assert len(model.requests) == 2
        last = await client.beta.sessions.retrieve(session.id)
        assert_complete(last)
        assert last.usage.input_tokens is not None and first.usage.input_tokens is not None
        assert last.usage.input_tokens > first.usage.input_tokens  # cumulative
        assert (
            last.stats.active_seconds is not None and last.stats.active_seconds >= first.stats.active_seconds
        )

        events = [e async for e in client.beta.sessions.events.list(session.id)]
        usages = [e for e in events if isinstance(e, BetaManagedAgentsSessionUsageEvent)]
        assert len(usages) == 2
        assert usages[-1].usage.input_tokens == last.usage.input_tokens
        assert usages[-1].usage.cache_creation is not None
        assert usages[-1].budget is not None and usages[-1].budget.max_list_cost.amount == "1000000"
        updated = [e for e in events if e.type == "session.updated"]
        assert [e.budget.max_list_cost.amount for e in updated if e.budget] == ["1000000"]
