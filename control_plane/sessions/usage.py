"""A session's usage, list cost, budget and active time: all derived from its log (pure).

* **Tokens.** Each ``span.model_request_end`` carries the request's ``model_usage``; the
  cumulative totals ride on the ``session.usage`` snapshot appended with it, in the SDK's shape
  (:func:`usage_snapshot`): ``input_tokens``, ``output_tokens``, ``cache_read_input_tokens``,
  ``cache_creation`` (Outpost sets only 5-minute cache breakpoints, so every cache write is counted
  as ``ephemeral_5m_input_tokens``) and ``list_cost`` when the model has a price.
* **List cost.** Priced from a table of list prices per model (:class:`ModelPrice`, USD per
  million tokens; :data:`DEFAULT_MODEL_PRICES`, configurable as ``harness.model_prices``), exactly
  (``Decimal``), reported in cents rounded to the nearest one. A dated model id
  (``claude-…-20251001``) falls back to its undated row. Only model tokens are priced: the runtime
  is the operator's own hardware.
* **Budget.** ``{"type": "limit", "max_list_cost": {"amount": "<cents>", "currency": "USD"}}``
  (:class:`Budget`). It is reached when the list cost so far is at or above ``max_list_cost``, or
  when the session's model has no price (the budget cannot measure it).
* **Active time.** The time spent in ``running``: from each ``session.status_running`` to the next
  other status event (``idle``, ``rescheduling``, ``terminated``), the span still open counted up
  to ``now``, in whole milliseconds (:func:`active_ms`). Idle time and a retry's backoff
  (``rescheduling``) never count. Nothing is counted apart from the log, so a crash loses nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from control_plane.errors import BudgetRefused, InvalidRequest

__all__ = [
    "DEFAULT_MODEL_PRICES",
    "TOKEN_KEYS",
    "Budget",
    "ModelPrice",
    "active_ms",
    "check_budgetable",
    "default_model_prices",
    "list_cost_cents",
    "money_json",
    "parse_budget",
    "price_for",
    "token_totals",
    "usage_json",
    "usage_snapshot",
]

#: The per-request token counts of ``span.model_request_end`` ``model_usage``.
TOKEN_KEYS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
_MTOK = Decimal(1_000_000)
_CENTS = Decimal(100)
_AMOUNT = re.compile(r"[1-9][0-9]{0,17}")
_DATED = re.compile(r"^(?P<base>.+)-\d{8}$")
_RUNNING = "session.status_running"
_MS = timedelta(milliseconds=1)


class ModelPrice(BaseModel):
    """List prices of one model, in USD per million tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_usd_per_mtok: float = Field(ge=0, description="Input tokens (not cached).")
    output_usd_per_mtok: float = Field(ge=0, description="Output tokens.")
    cache_write_usd_per_mtok: float = Field(
        ge=0, description="Prompt-cache writes (the 5-minute rate: Outpost sets only 5-minute breakpoints)."
    )
    cache_read_usd_per_mtok: float = Field(ge=0, description="Prompt-cache reads (hits and refreshes).")


def _price(input_usd: str, cache_write: str, cache_read: str, output_usd: str) -> ModelPrice:
    return ModelPrice(
        input_usd_per_mtok=float(input_usd),
        output_usd_per_mtok=float(output_usd),
        cache_write_usd_per_mtok=float(cache_write),
        cache_read_usd_per_mtok=float(cache_read),
    )


#: Anthropic's published list prices (platform.claude.com, "Pricing"), USD per million tokens:
#: input, 5-minute cache write, cache read, output. Operators should check them against the
#: current price list; docs/configuration.md lists them (a test keeps the two equal).
DEFAULT_MODEL_PRICES: Mapping[str, ModelPrice] = {
    "claude-fable-5-1": _price("10", "12.50", "0.25", "50"),
    "claude-mythos-5-1": _price("10", "12.50", "0.25", "50"),
    "claude-fable-5": _price("10", "12.50", "1", "50"),
    "claude-mythos-5": _price("10", "12.50", "1", "50"),
    "claude-opus-5-5": _price("4", "5", "0.20", "20"),
    "claude-opus-5": _price("5", "6.25", "0.50", "25"),
    "claude-opus-4-8": _price("5", "6.25", "0.50", "25"),
    "claude-opus-4-7": _price("5", "6.25", "0.50", "25"),
    "claude-opus-4-6": _price("5", "6.25", "0.50", "25"),
    "claude-opus-4-5": _price("5", "6.25", "0.50", "25"),
    "claude-sonnet-5-5": _price("2", "2.50", "0.20", "10"),
    "claude-sonnet-5": _price("2", "2.50", "0.20", "10"),
    "claude-sonnet-4-6": _price("3", "3.75", "0.30", "15"),
    "claude-sonnet-4-5": _price("3", "3.75", "0.30", "15"),
    "claude-haiku-4-5": _price("1", "1.25", "0.10", "5"),
}


def default_model_prices() -> dict[str, ModelPrice]:
    return dict(DEFAULT_MODEL_PRICES)


def price_for(prices: Mapping[str, ModelPrice], model: str) -> ModelPrice | None:
    """The price of ``model``: its own row, else (a dated id) its undated row, else ``None``."""
    found = prices.get(model)
    if found is None and (dated := _DATED.match(model)) is not None:
        found = prices.get(dated["base"])
    return found


def list_cost_cents(tokens: Mapping[str, int], price: ModelPrice) -> Decimal:
    """The exact list cost of ``tokens`` (the :data:`TOKEN_KEYS` counts) in US cents."""
    usd = (
        Decimal(str(price.input_usd_per_mtok)) * tokens.get("input_tokens", 0)
        + Decimal(str(price.output_usd_per_mtok)) * tokens.get("output_tokens", 0)
        + Decimal(str(price.cache_write_usd_per_mtok)) * tokens.get("cache_creation_input_tokens", 0)
        + Decimal(str(price.cache_read_usd_per_mtok)) * tokens.get("cache_read_input_tokens", 0)
    ) / _MTOK
    return usd * _CENTS


def money_json(cents: Decimal | int) -> dict[str, Any]:
    """A ``BetaMonetaryAmount``: whole cents (rounded half up) as a decimal string, in USD."""
    whole = Decimal(cents).quantize(Decimal(1), rounding=ROUND_HALF_UP)
    return {"amount": str(int(whole)), "currency": "USD"}


# -- budget -----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Budget:
    """A spend ceiling: ``max_cents`` of list cost (USD)."""

    max_cents: int

    def to_json(self) -> dict[str, Any]:
        return {"type": "limit", "max_list_cost": money_json(self.max_cents)}

    @classmethod
    def from_json(cls, value: Any) -> Budget | None:
        """A stored budget (already validated), or ``None`` for none or anything unreadable."""
        try:
            return parse_budget(value, "budget") if value is not None else None
        except InvalidRequest:
            return None

    def reached(self, tokens: Mapping[str, int], price: ModelPrice | None) -> bool:
        """The list cost of ``tokens`` is at or above the ceiling, or cannot be measured."""
        return price is None or list_cost_cents(tokens, price) >= self.max_cents


def parse_budget(raw: Any, param: str) -> Budget:
    """A client's budget (``BetaManagedAgentsBudgetLimitParam``) or ``InvalidRequest``."""
    if not isinstance(raw, Mapping) or raw.get("type") != "limit":
        raise InvalidRequest(f"{param}: expected {{'type': 'limit', 'max_list_cost': {{...}}}}", param=param)
    unknown = sorted(set(raw) - {"type", "max_list_cost"})
    if unknown:
        raise InvalidRequest(f"{param}: unknown field(s) {', '.join(unknown)}", param=f"{param}.{unknown[0]}")
    cost = raw.get("max_list_cost")
    where = f"{param}.max_list_cost"
    if not isinstance(cost, Mapping) or set(cost) != {"amount", "currency"}:
        raise InvalidRequest(f"{where}: expected {{'amount': '<cents>', 'currency': 'USD'}}", param=where)
    if cost["currency"] != "USD":
        raise InvalidRequest(f"{where}.currency: only 'USD' is supported", param=f"{where}.currency")
    amount = cost["amount"]
    if not isinstance(amount, str) or _AMOUNT.fullmatch(amount) is None:
        raise InvalidRequest(
            f"{where}.amount: a positive whole number of cents as a string, no leading zeros "
            f"(e.g. '2500' is $25.00), got {amount!r}",
            param=f"{where}.amount",
        )
    return Budget(int(amount))


def check_budgetable(model: str, prices: Mapping[str, ModelPrice], param: str) -> None:
    """``BudgetRefused`` (``model_not_budgetable``) when ``model`` has no list price."""
    if price_for(prices, model) is None:
        raise BudgetRefused(
            "model_not_budgetable",
            f"{param}: model {model!r} has no list price (harness.model_prices), so a budget cannot "
            "measure its cost",
            param=param,
        )


# -- usage ------------------------------------------------------------------------------------------
def token_totals(usage: Mapping[str, Any] | None) -> dict[str, int]:
    """The :data:`TOKEN_KEYS` counts of a ``session.usage`` snapshot (either shape: the SDK's
    ``cache_creation`` breakdown, or the flat ``cache_creation_input_tokens`` of older logs)."""
    usage = usage or {}
    totals = {key: _int(usage.get(key)) for key in TOKEN_KEYS}
    creation = usage.get("cache_creation")
    if "cache_creation_input_tokens" not in usage and isinstance(creation, Mapping):
        totals["cache_creation_input_tokens"] = sum(_int(v) for v in creation.values())
    return totals


def usage_snapshot(tokens: Mapping[str, int], price: ModelPrice | None) -> dict[str, Any]:
    """A ``BetaManagedAgentsSessionUsageSnapshot`` of cumulative ``tokens`` (``list_cost`` only
    when the model has a price)."""
    snapshot: dict[str, Any] = {
        "input_tokens": _int(tokens.get("input_tokens")),
        "output_tokens": _int(tokens.get("output_tokens")),
        "cache_read_input_tokens": _int(tokens.get("cache_read_input_tokens")),
        "cache_creation": {
            "ephemeral_5m_input_tokens": _int(tokens.get("cache_creation_input_tokens")),
            "ephemeral_1h_input_tokens": 0,
        },
    }
    if price is not None:
        snapshot["list_cost"] = money_json(list_cost_cents(tokens, price))
    return snapshot


def usage_json(tokens: Mapping[str, int], price: ModelPrice | None, active: int) -> dict[str, Any]:
    """A session's ``usage`` (``BetaManagedAgentsSessionUsage``); ``active`` in milliseconds."""
    return {**usage_snapshot(tokens, price), "active_seconds": active / 1000}


def active_ms(status_events: Iterable[tuple[str, datetime]], now: datetime) -> int:
    """Milliseconds spent ``running``: ``status_events`` are ``(type, processed_at)`` of the
    session's ``session.status_*`` events in log order; a span still open runs to ``now``."""
    total = 0
    since: datetime | None = None
    for event_type, at in status_events:
        if event_type == _RUNNING:
            if since is None:
                since = at
        elif since is not None:
            total += max(0, (at - since) // _MS)
            since = None
    if since is not None:
        total += max(0, (now - since) // _MS)
    return total


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
