"""The model seam: a :class:`ModelClient` protocol and its ``anthropic`` SDK implementation.

The harness streams one Messages request at a time through :meth:`ModelClient.stream`, which
reports content-block starts and text deltas as they arrive (so they can be fanned out as
``event_start`` / ``event_delta`` frames) and returns the complete assistant message as JSON.

Errors of the ``anthropic`` SDK are mapped here, once, to::

    ControlPlaneError (control_plane.errors)
    └── ModelError              .error_type (the session.error type), .retryable
        ├── ModelRetryableError overloaded (529), rate limited (429), 5xx, 408/409, connection/timeout,
        │                       anything unexpected
        └── ModelTerminalError  every other 4xx (bad request, authentication, permission ...),
                                missing credentials

The SDK's own retries are off by default (``max_retries=0``): the harness retries with backoff and
records each failure in the session log (``session.error`` with ``retry_status``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import anthropic

from control_plane.errors import ControlPlaneError

__all__ = [
    "AnthropicModelClient",
    "BlockStart",
    "ModelClient",
    "ModelError",
    "ModelRetryableError",
    "ModelTerminalError",
    "StreamEvent",
    "TextDelta",
    "map_anthropic_error",
]

log = logging.getLogger(__name__)

OVERLOADED = "model_overloaded_error"
RATE_LIMITED = "model_rate_limited_error"
REQUEST_FAILED = "model_request_failed_error"
UNKNOWN = "unknown_error"
BILLING = "billing_error"


class ModelError(ControlPlaneError):
    """A model request failed. ``error_type`` is the ``session.error`` type to report."""

    retryable = False

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message


class ModelRetryableError(ModelError):
    """Worth retrying (overloaded, rate limited, server error, connection trouble)."""

    retryable = True


class ModelTerminalError(ModelError):
    """Retrying cannot help (the request or the credentials are wrong)."""


@dataclass(frozen=True, slots=True)
class BlockStart:
    """A content block started (``type``: ``text``, ``thinking``, ``redacted_thinking``, ``tool_use`` ...)."""

    index: int
    type: str


@dataclass(frozen=True, slots=True)
class TextDelta:
    """More text for the text block at ``index``."""

    index: int
    text: str


StreamEvent = BlockStart | TextDelta


class ModelClient(Protocol):
    """Streams Messages API requests."""

    async def stream(
        self, request: Mapping[str, Any], on_event: Callable[[StreamEvent], None]
    ) -> dict[str, Any]:
        """Send ``request`` (a Messages API body without ``stream``), call ``on_event`` for every
        block start and text delta, and return the complete assistant message as JSON (``id``,
        ``role``, ``content`` with original tool-use ids and thinking signatures, ``stop_reason``,
        ``usage`` ...). Raises :class:`ModelError`. Cancelling the call closes the stream."""
        ...

    async def close(self) -> None:
        """Release connections (idempotent)."""
        ...


class AnthropicModelClient:
    """:class:`ModelClient` on the official SDK (``AsyncAnthropic``).

    ``base_url`` / ``api_key`` default to the SDK's own lookup (``ANTHROPIC_BASE_URL``,
    ``ANTHROPIC_API_KEY``). The key is never logged."""

    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        max_retries: int = 0,
        client: anthropic.AsyncAnthropic | None = None,
    ) -> None:
        if client is None:
            options: dict[str, Any] = {"timeout": timeout_s, "max_retries": max_retries}
            if base_url is not None:
                options["base_url"] = base_url
            if api_key is not None:
                options["api_key"] = api_key
            try:
                client = anthropic.AsyncAnthropic(**options)
            except anthropic.AnthropicError as exc:
                raise ModelTerminalError(REQUEST_FAILED, f"cannot create the model client: {exc}") from None
        self._client = client

    async def stream(
        self, request: Mapping[str, Any], on_event: Callable[[StreamEvent], None]
    ) -> dict[str, Any]:
        try:
            async with self._client.messages.stream(**request) as stream:
                async for event in stream:
                    if event.type == "content_block_start":
                        on_event(BlockStart(event.index, event.content_block.type))
                    elif event.type == "content_block_delta" and event.delta.type == "text_delta":
                        on_event(TextDelta(event.index, event.delta.text))
                message = await stream.get_final_message()
        except ModelError:
            raise
        except Exception as exc:
            raise map_anthropic_error(exc) from exc
        result: dict[str, Any] = message.model_dump(mode="json", exclude_none=True)
        return result

    async def close(self) -> None:
        await self._client.close()


def map_anthropic_error(exc: BaseException) -> ModelError:
    """The one place an SDK exception becomes a :class:`ModelError`."""
    if isinstance(exc, anthropic.APIStatusError):
        message = exc.api_message or str(exc)
        kind = exc.type
        status = exc.status_code
        if kind == "overloaded_error" or status == 529:
            return ModelRetryableError(OVERLOADED, f"model overloaded: {message}")
        if kind == "rate_limit_error" or status == 429:
            return ModelRetryableError(RATE_LIMITED, f"model rate limited: {message}")
        if kind in ("api_error", "timeout_error") or status >= 500 or status < 400 or status in (408, 409):
            return ModelRetryableError(REQUEST_FAILED, f"model request failed ({status}): {message}")
        if kind == "billing_error" or status == 402:
            return ModelTerminalError(BILLING, f"model request refused ({status}): {message}")
        return ModelTerminalError(REQUEST_FAILED, f"model request refused ({status}): {message}")
    if isinstance(exc, anthropic.APIConnectionError):
        return ModelRetryableError(REQUEST_FAILED, f"cannot reach the model: {exc}")
    if isinstance(exc, anthropic.CredentialsError):
        return ModelTerminalError(REQUEST_FAILED, f"model credentials: {exc}")
    log.warning("unexpected error from the model client: %s: %s", type(exc).__name__, exc)
    return ModelRetryableError(UNKNOWN, f"{type(exc).__name__}: {exc}")
