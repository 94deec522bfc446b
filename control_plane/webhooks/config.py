"""The ``webhooks`` section of the control plane's configuration (docs/webhooks.md)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["WebhookConfig"]


class WebhookConfig(BaseModel):
    """How webhook deliveries are sent and retried."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(
        True,
        description="Run the webhook deliverer and the session feed in this process (several processes on "
        "one store may; each delivery is sent by one at a time). `false`: endpoints can still be managed, "
        "deliveries wait in the store for a process that sends them.",
    )
    timeout_s: float = Field(
        10.0,
        gt=0,
        le=300,
        description="One delivery attempt's deadline, connect to last byte read; past it the attempt failed.",
    )
    max_attempts: int = Field(
        12,
        ge=1,
        le=50,
        description="Attempts per delivery (the first included); then the delivery is `failed` for good.",
    )
    backoff_base_s: float = Field(
        5.0,
        gt=0,
        description="The wait before the second attempt; it doubles with each attempt (with jitter: "
        "a random 50-100 % of it), up to `backoff_max_s`.",
    )
    backoff_max_s: float = Field(
        3600.0, gt=0, description="The longest wait between two attempts (before jitter)."
    )
    poll_interval_s: float = Field(
        1.0,
        gt=0,
        description="How often the deliverer looks for due deliveries (those written by this process wake "
        "it at once).",
    )
    max_in_flight: int = Field(
        16, ge=1, le=1000, description="Deliveries this process sends at the same time."
    )
    response_bytes: int = Field(
        1024,
        ge=0,
        le=65536,
        description="How much of a receiver's response body is read (kept, cut, as the attempt's error "
        "text); the rest is never read.",
    )
    keep_days: float = Field(
        7.0,
        gt=0,
        description="Delete delivered and failed deliveries this many days after they ended.",
    )
    max_endpoints: int = Field(100, ge=1, le=10_000, description="Webhook endpoints the store may hold.")
    allow_http_loopback: bool = Field(
        False,
        description="Accept `http://` endpoint URLs whose host is a loopback address (development, tests). "
        "Otherwise only `https://` is accepted. The outbound rules still apply: loopback is dialled only "
        "if `outbound_allow_networks` allows it.",
    )
    organization_id: str = Field(
        "org_outpost", min_length=1, description="The `data.organization_id` of every webhook event."
    )
    workspace_id: str = Field(
        "wrkspc_default", min_length=1, description="The `data.workspace_id` of every webhook event."
    )

    @model_validator(mode="after")
    def _backoff_order(self) -> WebhookConfig:
        if self.backoff_max_s < self.backoff_base_s:
            raise ValueError("webhooks.backoff_max_s must be at least backoff_base_s")
        return self
