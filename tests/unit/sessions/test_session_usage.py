"""Usage, list cost, budgets and active time, derived from the log (``control_plane.sessions.usage``),
and the budget rules of the session service (on the in-memory store)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from test_session_service import EVERYONE, Stack

from control_plane.agents.configuration import resolve_model
from control_plane.errors import BudgetRefused, InvalidRequest
from control_plane.harness.config import HarnessConfig
from control_plane.sessions.commands import AgentChoice, UpdateSession
from control_plane.sessions.events import new_event_id
from control_plane.sessions.usage import (
    DEFAULT_MODEL_PRICES,
    ModelPrice,
    active_ms,
    list_cost_cents,
    money_json,
    parse_budget,
    price_for,
    token_totals,
)
from control_plane.store.base import NewEvent

T0 = datetime(2026, 4, 1, 12, 0, 0, tzinfo=UTC)
RUN, IDLE = "session.status_running", "session.status_idle"
RESCHEDULED, TERMINATED = "session.status_rescheduled", "session.status_terminated"
LIMIT = {"type": "limit", "max_list_cost": {"amount": "500", "currency": "USD"}}


def at(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


# -- active time ------------------------------------------------------------------------------------
def test_active_time_sums_running_spans_to_the_millisecond() -> None:
    events = [(RUN, at(0)), (IDLE, at(1500)), (RUN, at(60_000)), (IDLE, at(60_250))]
    assert active_ms(events, now=at(10**9)) == 1750  # the idle time between (and after) never counts


def test_a_span_still_open_counts_up_to_now() -> None:
    # A crash mid-span leaves the log "running": the harness resumes it, and the time counts.
    events = [(RUN, at(0)), (IDLE, at(1000)), (RUN, at(5000))]
    assert active_ms(events, now=at(5400)) == 1400
    assert active_ms(events, now=at(9000)) == 5000


def test_idle_rescheduling_and_terminated_end_a_span() -> None:
    events = [(RUN, at(0)), (RESCHEDULED, at(100)), (RUN, at(2100)), (RUN, at(2200)), (TERMINATED, at(2300))]
    # The backoff (rescheduling) does not count; a repeated running does not restart the span.
    assert active_ms(events, now=at(10**6)) == 300
    assert active_ms([], now=at(5)) == 0
    assert active_ms([(IDLE, at(0))], now=at(5)) == 0


# -- prices -----------------------------------------------------------------------------------------
SONNET = ModelPrice(
    input_usd_per_mtok=3, output_usd_per_mtok=15, cache_write_usd_per_mtok=3.75, cache_read_usd_per_mtok=0.3
)


def test_list_cost_is_exact_in_cents() -> None:
    tokens = {
        "input_tokens": 1_000_000,
        "output_tokens": 100_000,
        "cache_creation_input_tokens": 10_000,
        "cache_read_input_tokens": 1_000_000,
    }
    # $3 + $1.50 + $0.0375 + $0.30 = $4.8375
    assert list_cost_cents(tokens, SONNET) == Decimal("483.75")
    assert money_json(Decimal("483.75")) == {"amount": "484", "currency": "USD"}
    assert money_json(Decimal("0.49")) == {"amount": "0", "currency": "USD"}


def test_prices_by_model_id_and_dated_id() -> None:
    assert price_for(DEFAULT_MODEL_PRICES, "claude-haiku-4-5") == price_for(
        DEFAULT_MODEL_PRICES, "claude-haiku-4-5-20251001"
    )
    assert price_for(DEFAULT_MODEL_PRICES, "claude-local-test") is None
    assert HarnessConfig().price_of("claude-sonnet-4-5") == SONNET


def test_the_price_table_in_the_docs_is_the_shipped_one() -> None:
    doc = (Path(__file__).parents[3] / "docs" / "configuration.md").read_text(encoding="utf-8")
    for model, price in DEFAULT_MODEL_PRICES.items():
        cells = [
            price.input_usd_per_mtok,
            price.output_usd_per_mtok,
            price.cache_write_usd_per_mtok,
            price.cache_read_usd_per_mtok,
        ]
        row = f"| `{model}` | " + " | ".join(f"{c:g}" for c in cells) + " |"
        assert row in doc, row


def test_token_totals_read_either_snapshot_shape() -> None:
    new = {
        "input_tokens": 5,
        "cache_creation": {"ephemeral_5m_input_tokens": 2, "ephemeral_1h_input_tokens": 1},
    }
    old = {"input_tokens": 5, "cache_creation_input_tokens": 3}
    assert token_totals(new) == token_totals(old)
    assert token_totals(new)["cache_creation_input_tokens"] == 3
    assert token_totals(None) == dict.fromkeys(token_totals(old), 0)


@pytest.mark.parametrize(
    "raw",
    [
        None,
        {"type": "usd"},
        {"type": "limit"},
        {"type": "limit", "max_list_cost": {"amount": "0", "currency": "USD"}},
        {"type": "limit", "max_list_cost": {"amount": "0100", "currency": "USD"}},
        {"type": "limit", "max_list_cost": {"amount": 100, "currency": "USD"}},
        {"type": "limit", "max_list_cost": {"amount": "100", "currency": "EUR"}},
        {**LIMIT, "extra": 1},
    ],
)
def test_malformed_budgets_are_refused(raw: object) -> None:
    with pytest.raises(InvalidRequest, match="budget"):
        parse_budget(raw, "budget")


# -- the service's rules ------------------------------------------------------------------------------
async def test_a_budget_is_kept_and_shown_and_needs_a_priced_model() -> None:
    stack = Stack()
    view = await stack.create(budget=LIMIT)  # claude-opus-4-8: priced
    assert view.session.body["budget"] == LIMIT
    assert view.usage["list_cost"] == {"amount": "0", "currency": "USD"}
    await stack.agent("agent_x", model=resolve_model("claude-local-test"))
    with pytest.raises(BudgetRefused) as refused:
        await stack.create(agent=AgentChoice("agent_x"), budget=LIMIT)
    assert refused.value.error_code == "model_not_budgetable"


async def test_budget_updates_follow_the_hosted_rules() -> None:
    stack = Stack()
    plain = (await stack.create()).session.id
    with pytest.raises(BudgetRefused) as create_only:
        await stack.service.update(plain, UpdateSession(budget=LIMIT), EVERYONE)
    assert create_only.value.error_code == "budget_create_only"

    session_id = (await stack.create(budget=LIMIT)).session.id
    # 1M input tokens of claude-opus-4-8 ($5/MTok): 500 cents consumed.
    usage = {"usage": {"input_tokens": 1_000_000, "output_tokens": 0}}
    await stack.store.append(session_id, [NewEvent(new_event_id(), "session.usage", usage)], stack.clock())
    for amount in ("400", "500"):
        lower = {"type": "limit", "max_list_cost": {"amount": amount, "currency": "USD"}}
        with pytest.raises(BudgetRefused) as not_raised:
            await stack.service.update(session_id, UpdateSession(budget=lower), EVERYONE)
        assert not_raised.value.error_code == "budget_not_raised"
    raised = {"type": "limit", "max_list_cost": {"amount": "501", "currency": "USD"}}
    view = await stack.service.update(session_id, UpdateSession(budget=raised), EVERYONE)
    assert view.session.body["budget"] == raised
    assert (await stack.store.get_events(session_id))[-1].payload == {"budget": raised}

    await stack.service.update(session_id, UpdateSession(budget=None), EVERYONE)
    assert (await stack.store.get_events(session_id))[-1].payload == {"budget": None}
    with pytest.raises(BudgetRefused, match="removed budget") as readded:
        await stack.service.update(session_id, UpdateSession(budget=raised), EVERYONE)
    assert readded.value.error_code == "budget_create_only"


async def test_the_view_meters_running_time_only() -> None:
    stack = Stack()
    session_id = (await stack.create()).session.id
    assert (await stack.service.get(session_id, EVERYONE)).usage["active_seconds"] == 0
    await stack.store.append(session_id, [NewEvent(new_event_id(), RUN)], stack.clock())
    # The clock advances a second per reading: the open span grows with every read.
    first = (await stack.service.get(session_id, EVERYONE)).usage["active_seconds"]
    second = (await stack.service.get(session_id, EVERYONE)).usage["active_seconds"]
    assert 0 < first < second
    await stack.store.append(session_id, [NewEvent(new_event_id(), IDLE)], stack.clock())
    idle = (await stack.service.get(session_id, EVERYONE)).usage["active_seconds"]
    assert idle == (await stack.service.get(session_id, EVERYONE)).usage["active_seconds"] > second
