"""How dreams run: their claims, their model requests, how much of their input they read."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["DreamsConfig"]


class DreamsConfig(BaseModel):
    """The dream scheduler every control-plane process runs (:mod:`control_plane.dreams.background`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    claim_ttl_s: float = Field(
        30.0,
        gt=0,
        description="How long a process's claim on a running dream lasts unless renewed (every third "
        "of it). A dream whose process died is resumed by another process after this long.",
    )
    scan_interval_s: float = Field(
        5.0,
        gt=0,
        description="How often each process looks for pending dreams and dreams whose claim expired.",
    )
    max_concurrent: int = Field(4, ge=1, le=100, description="Dreams one process runs at once.")
    max_tokens: int = Field(16_384, ge=256, description="`max_tokens` of a dream's model request.")
    model_attempts: int = Field(
        3, ge=1, le=20, description="Model requests a dream tries before it fails on retryable errors."
    )
    model_backoff_s: float = Field(
        2.0, ge=0, description="The wait before retrying a dream's failed model request (doubled each time)."
    )
    max_events_per_session: int = Field(
        2000,
        ge=10,
        description="The most recent transcript events read from each input session (older ones are "
        "left out before the digest is trimmed to the model's context budget).",
    )
