"""``McpConfig``: the knobs of the control plane's MCP client, explicit, units in names."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["McpConfig"]


@dataclass(frozen=True, slots=True)
class McpConfig:
    #: Opening a session to a direct server: HTTP connect plus the MCP handshake.
    connect_timeout_s: float = 10.0
    #: Listing one server's tools (opening the session included), before a model call.
    list_timeout_s: float = 10.0
    #: A tool call without a deadline of its own.
    default_call_timeout_s: float = 120.0
    #: How long a direct server's tool list is reused.
    tools_ttl_s: float = 15.0
    #: A pooled session unused this long is closed.
    idle_timeout_s: float = 300.0
    #: At most this many pooled sessions; the least recently used goes first.
    max_sessions: int = 64
    #: Direct calls remembered by idempotency key (a repeated key gets the first call's outcome).
    recent_calls: int = 1024

    def __post_init__(self) -> None:
        for name in (
            "connect_timeout_s",
            "list_timeout_s",
            "default_call_timeout_s",
            "tools_ttl_s",
            "idle_timeout_s",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.max_sessions < 1 or self.recent_calls < 0:
            raise ValueError("max_sessions must be at least 1 and recent_calls not negative")
