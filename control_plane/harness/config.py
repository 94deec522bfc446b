"""``HarnessConfig``: every knob of the harness, explicit, validated, units in names."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from control_plane.harness.context_window import default_context_windows, window_for
from control_plane.sessions.usage import ModelPrice, default_model_prices, price_for

__all__ = ["HarnessConfig"]


class HarnessConfig(BaseModel):
    """How the harness runs sessions. Passed down explicitly; there are no module globals.

    Provisioning modes (the benchmark compares them):

    * ``speculative_provision`` (default): when a turn starts on a session that has no sandbox
      yet, ``provision`` is fired in the background *in parallel* with the first model call and
      never awaited; a failure is only logged (the first ``execute`` provisions lazily anyway).
    * ``eager_provision``: ``provision`` is awaited *before* the first model call, as a design
      that couples brain and hands would do. Wins over ``speculative_provision``.
    * neither: the sandbox is made by the first ``execute`` only.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    lease_ttl_s: float = Field(
        30.0,
        gt=0,
        description="A harness's lease on a session, renewed every third of this while held; once it expires "
        "another harness may take the session over.",
    )
    lease_scan_interval_s: float = Field(
        5.0,
        gt=0,
        description="How often to look for expired leases (sessions of a harness that died) and wake them.",
    )
    lease_busy_retry_s: float = Field(
        0.5,
        gt=0,
        description="How often a woken session retries a lease that another harness holds.",
    )
    model_attempts: int = Field(
        3,
        ge=1,
        description="Model requests per failure streak: the first try plus retries (3 = 2 retries).",
    )
    model_backoff_initial_s: float = Field(
        1.0,
        ge=0,
        description="Backoff before the first model retry, doubled for each next one, capped at "
        "`model_backoff_max_s`.",
    )
    model_backoff_max_s: float = Field(30.0, ge=0, description="The cap of the model retries' backoff.")
    max_tokens: int = Field(8192, ge=1, description="`max_tokens` of each model request.")
    speculative_provision: bool = Field(
        True,
        description="When a turn starts on a session without a sandbox, provision one in parallel with the "
        "first model call.",
    )
    eager_provision: bool = Field(
        False,
        description="Provision before the first model call instead (wins over `speculative_provision`); with "
        "neither, the first tool call provisions.",
    )
    tool_timeout_s: float | None = Field(
        None,
        gt=0,
        description="Deadline of one tool call; `null`: bash's `timeout_ms`, else the gateway's default.",
    )
    mcp_tool_timeout_s: float | None = Field(
        None,
        gt=0,
        description="Deadline of one MCP tool call; `null`: the MCP router's default.",
    )
    follow_tunnels: bool = Field(
        False,
        description="Several control-plane processes on one store: run a session only in a process that "
        "holds a tunnel to an edge of its environment (the brain follows the hands).",
    )
    tunnel_lost_release_s: float = Field(
        30.0,
        ge=0,
        description="With `follow_tunnels`: let a session's lease go when its process has had no such tunnel "
        "for this long.",
    )
    error_retry_s: float = Field(
        5.0,
        gt=0,
        description="After an unexpected harness error on a session, wake it again after this long.",
    )
    model_prices: dict[str, ModelPrice] = Field(
        default_factory=default_model_prices,
        description="List prices per model id (USD per million tokens) that sessions' `usage.list_cost` and "
        "`budget` are priced with; a dated id (`...-20251001`) falls back to its undated row. Setting it "
        "replaces the shipped table. A session whose model has no row takes no budget "
        "(`model_not_budgetable`).",
    )

    # -- context beyond the window (control_plane/harness/context_window.py, compaction.py) --------
    context_windows: dict[str, int] = Field(
        default_factory=default_context_windows,
        description="Context windows per model id (tokens). A request's budget is its model's window minus "
        "`max_tokens` minus `context_margin_tokens`; past it the harness compacts. A dated id falls back to "
        "its undated row. Setting it replaces the shipped table.",
    )
    context_window_default_tokens: int = Field(
        100_000,
        ge=1,
        description="The context window assumed for a model not in `context_windows` (conservative).",
    )
    context_margin_tokens: int = Field(
        4096,
        ge=0,
        description="Tokens kept free below the window besides `max_tokens` (the estimate's error).",
    )
    compaction_api_models: tuple[str, ...] = Field(
        (),
        description="Models whose endpoint implements the Messages API's `compaction` request parameter "
        "(beta `compact-2026-09-04`): they compact with it; other models get an ordinary summarization "
        "request. A dated id falls back to its undated entry.",
    )
    count_tokens: bool = Field(
        True,
        description="Near the budget, count a request exactly with `POST /v1/messages/count_tokens` "
        "(skipped once the endpoint answers 404); otherwise the estimate calibrated from the last reply's "
        "usage decides.",
    )
    clear_tool_uses: bool = Field(
        True,
        description="Before compacting, clear the content of old tool results in the request (the log keeps "
        "them whole): the harness does it, or the server for `context_edit_models`.",
    )
    clear_tool_uses_trigger_share: float = Field(
        0.8,
        gt=0,
        le=1,
        description="Old tool results are cleared when a request's estimate is over this share of the "
        "budget.",
    )
    clear_tool_uses_keep: int = Field(
        3,
        ge=0,
        description="The most recent tool results never cleared (besides those the model has not seen yet).",
    )
    clear_tool_uses_at_least_share: float = Field(
        0.05,
        gt=0,
        le=1,
        description="Clearing frees whole batches of this share of the budget, so the cached prompt prefix "
        "changes rarely; the server's `clear_at_least` (it clears nothing when it cannot free one).",
    )
    context_edit_models: tuple[str, ...] = Field(
        (),
        description="Models whose endpoint implements the Messages API's `context_management` edit "
        "`clear_tool_uses_20250919` (beta `context-management-2025-06-27`): their requests carry it and the "
        "server clears old tool results; for other models the harness clears them. A dated id falls back "
        "to its undated entry.",
    )
    compaction_max_in_a_row: int = Field(
        3,
        ge=1,
        description="Compactions in a row without a model reply before the turn stops with "
        "`compaction_limit_reached_error`.",
    )

    @model_validator(mode="after")
    def _check_backoff(self) -> HarnessConfig:
        if self.model_backoff_max_s < self.model_backoff_initial_s:
            raise ValueError("model_backoff_max_s must be at least model_backoff_initial_s")
        return self

    def price_of(self, model: str) -> ModelPrice | None:
        """The list price of ``model`` (``None``: not in ``model_prices``)."""
        return price_for(self.model_prices, model)

    def context_budget(self, model: str) -> int:
        """The most input tokens a request of ``model`` may hold (at least 1)."""
        window = window_for(self.context_windows, model) or self.context_window_default_tokens
        return max(1, window - self.max_tokens - self.context_margin_tokens)

    def compaction_api(self, model: str) -> bool:
        """Whether ``model``'s endpoint takes the ``compaction`` request parameter."""
        return window_for(dict.fromkeys(self.compaction_api_models, 1), model) is not None

    def context_edits(self, model: str) -> bool:
        """Whether ``model``'s endpoint clears old tool results itself (``context_management``)."""
        return window_for(dict.fromkeys(self.context_edit_models, 1), model) is not None

    def backoff_s(self, retry: int) -> float:
        """The wait before retry number ``retry`` (1-based) of a failed model request."""
        if retry < 1:
            return 0.0
        return float(min(self.model_backoff_initial_s * 2 ** (retry - 1), self.model_backoff_max_s))
