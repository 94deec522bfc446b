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

The stream is read as plain server-sent events (``messages.with_streaming_response``) and the
message is built from their JSON as the SDK's ``MessageStream`` builds it, without a model object
per event: the SDK's typed stream cost most of a turn's CPU. The SDK still sends the request,
raises its status errors and retries (when ``max_retries`` is set); an ``error`` event in the
stream becomes the SDK's status error, as its own stream raises it.
"""

from __future__ import annotations

import importlib
import itertools
import json
import logging
import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import anthropic
import jiter

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

#: Connections to the model endpoint, open and idle alike (one per concurrent model request).
DEFAULT_MAX_CONNECTIONS = 1000
#: Connection pools the connections are spread over (see :class:`AnthropicModelClient`).
DEFAULT_POOL_SHARDS = 32


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
    ``ANTHROPIC_API_KEY``). The key is never logged.

    Connections: up to ``max_connections`` to the model endpoint, all kept alive when idle (the
    SDK's default keeps 100 of 1,000, so past 100 concurrent sessions a request would often open a
    new one), spread over ``pool_shards`` pools taken in turn: the HTTP pool checks each of its
    idle connections whenever a request starts or ends, which over one pool of a thousand cost
    more than the rest of the request."""

    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        max_retries: int = 0,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        pool_shards: int = DEFAULT_POOL_SHARDS,
        client: anthropic.AsyncAnthropic | None = None,
    ) -> None:
        if max_connections < 1 or pool_shards < 1:
            raise ValueError("max_connections and pool_shards must be at least 1")
        if client is not None:
            self._clients = [client]
        else:
            per_shard = -(-max_connections // pool_shards)
            http = _sdk_http_library()
            # One TLS context for every pool (making one loads the CA bundle: tens of ms each).
            tls = http.create_ssl_context()
            self._clients = [
                _sdk_client(base_url, api_key, timeout_s, max_retries, per_shard, tls)
                for _ in range(pool_shards)
            ]
        self._next = itertools.cycle(self._clients)

    async def stream(
        self, request: Mapping[str, Any], on_event: Callable[[StreamEvent], None]
    ) -> dict[str, Any]:
        try:
            client = next(self._next)
            async with client.messages.with_streaming_response.create(**request, stream=True) as response:
                http_response = response.http_response
                message = _MessageAccumulator(on_event)
                async for event, data in _sse_events(http_response.aiter_lines()):
                    if event == "error":
                        raise _stream_error(client, data, http_response)
                    message.add(event, data)
                result = message.result()
        except ModelError:
            raise
        except Exception as exc:
            raise map_anthropic_error(exc) from exc
        return result

    async def close(self) -> None:
        for client in self._clients:
            await client.close()


def _sdk_http_library() -> Any:
    """The HTTP library the SDK is built on (``httpx``, or its fork ``httpx2`` in newer SDKs)."""
    return importlib.import_module(type(anthropic.DEFAULT_CONNECTION_LIMITS).__module__.partition(".")[0])


_KEEPALIVE_EXPIRY_S = 4.0


def _sdk_client(
    base_url: str | None,
    api_key: str | None,
    timeout_s: float,
    max_retries: int,
    max_connections: int,
    tls: ssl.SSLContext,
) -> anthropic.AsyncAnthropic:
    # Idle connections are closed by the client before a server's usual 5 s keep-alive
    # (uvicorn's default, many proxies') would close them: reusing one just as the server closes
    # it fails the request with a connection error (seen in bursts at 1,000 sessions).
    limits = _sdk_http_library().Limits(
        max_connections=max_connections,
        max_keepalive_connections=max_connections,
        keepalive_expiry=_KEEPALIVE_EXPIRY_S,
    )
    options: dict[str, Any] = {
        "timeout": timeout_s,
        "max_retries": max_retries,
        "http_client": anthropic.DefaultAsyncHttpxClient(limits=limits, timeout=timeout_s, verify=tls),
    }
    if base_url is not None:
        options["base_url"] = base_url
    if api_key is not None:
        options["api_key"] = api_key
    try:
        return anthropic.AsyncAnthropic(**options)
    except anthropic.AnthropicError as exc:
        raise ModelTerminalError(REQUEST_FAILED, f"cannot create the model client: {exc}") from None


def _stream_error(client: anthropic.AsyncAnthropic, data: str, http_response: Any) -> Exception:
    """An ``error`` event in the stream: the SDK's own status error for it (as its stream raises),
    so that :func:`map_anthropic_error` maps it as before."""
    body: object = data
    try:
        body = json.loads(data)
        message = f"{body}"
    except ValueError:
        message = data or f"Error code: {http_response.status_code}"
    return client._make_status_error(message, body=body, response=http_response)


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


async def _sse_events(lines: AsyncIterator[str]) -> AsyncIterator[tuple[str, str]]:
    """``(event, data)`` of each server-sent event with a name and data (the Messages stream
    names every event); comments, ``id`` and ``retry`` fields are skipped."""
    event = ""
    data: list[str] = []
    async for line in lines:
        if not line:
            if event and data:
                yield event, "\n".join(data)
            event, data = "", []
            continue
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
    if event and data:
        yield event, "\n".join(data)


#: Content blocks whose ``input`` is streamed as JSON text (``input_json_delta``).
_TOOL_INPUT_BLOCKS = frozenset({"tool_use", "server_tool_use"})


class _MessageAccumulator:
    """The assistant message built from the stream's events, as the SDK's ``MessageStream``
    builds it (``accumulate_event``), from plain JSON: no model object per event. Block starts and
    text deltas go to ``on_event`` as they arrive."""

    def __init__(self, on_event: Callable[[StreamEvent], None]) -> None:
        self._on_event = on_event
        self._message: dict[str, Any] | None = None
        self._content: list[dict[str, Any]] = []
        self._json: dict[int, str] = {}  # tool input JSON text so far, by block index

    def add(self, event: str, data: str) -> None:
        if event == "ping":
            return
        payload = json.loads(data)
        if self._message is None:
            if event != "message_start":
                raise ModelRetryableError(UNKNOWN, f'unexpected event order: {event} before "message_start"')
            self._message = payload["message"]
            self._content = self._message.setdefault("content", [])
            return
        if event == "content_block_delta":
            delta = payload["delta"]
            kind = delta.get("type")
            index = payload["index"]
            block = self._content[index]
            if kind == "text_delta":
                self._on_event(TextDelta(index, delta["text"]))
                if block.get("type") == "text":
                    block["text"] = block.get("text", "") + delta["text"]
            elif kind == "input_json_delta":
                if block.get("type") in _TOOL_INPUT_BLOCKS:
                    self._json[index] = self._json.get(index, "") + delta.get("partial_json", "")
            elif kind == "citations_delta":
                if block.get("type") == "text":
                    if block.get("citations"):
                        block["citations"].append(delta["citation"])
                    else:
                        block["citations"] = [delta["citation"]]
            elif kind == "thinking_delta":
                if block.get("type") == "thinking":
                    block["thinking"] = block.get("thinking", "") + delta["thinking"]
            elif kind == "signature_delta" and block.get("type") == "thinking":
                block["signature"] = delta["signature"]
        elif event == "content_block_start":
            block = payload["content_block"]
            self._content.append(block)
            self._on_event(BlockStart(payload["index"], block["type"]))
        elif event == "message_delta":
            self._message_delta(payload)

    def _message_delta(self, payload: dict[str, Any]) -> None:
        assert self._message is not None
        message = self._message
        delta = payload.get("delta") or {}
        message["stop_reason"] = delta.get("stop_reason")
        message["stop_sequence"] = delta.get("stop_sequence")
        message["stop_details"] = delta.get("stop_details")
        if delta.get("container") is not None:
            message["container"] = delta["container"]
        usage = payload.get("usage") or {}
        totals = message.setdefault("usage", {})
        totals["output_tokens"] = usage.get("output_tokens")
        # Cumulative totals that overwrite; an optional one left out keeps message_start's value.
        for name in (
            "input_tokens",
            "cache_creation_input_tokens",
            "cache_read_input_tokens",
            "server_tool_use",
            "output_tokens_details",
        ):
            if usage.get(name) is not None:
                totals[name] = usage[name]

    def result(self) -> dict[str, Any]:
        """The message as the SDK's ``model_dump(mode="json", exclude_none=True)`` gives it."""
        if self._message is None:
            raise ModelRetryableError(UNKNOWN, "the model's stream ended before its message_start event")
        for index, text in self._json.items():
            if text:
                try:
                    self._content[index]["input"] = jiter.from_json(text.encode(), partial_mode=True)
                except ValueError as exc:
                    raise ValueError(
                        f"Unable to parse tool parameter JSON from model. Please retry your request or "
                        f"adjust your prompt. Error: {exc}. JSON: {text}"
                    ) from exc
        return _without_none(self._message)


def _without_none(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` without ``None`` fields, at every level but inside a block's ``input`` (a tool's
    arguments are kept exactly as the model wrote them), as ``exclude_none`` of the SDK's models."""
    out: dict[str, Any] = {}
    for key, item in value.items():
        if item is None:
            continue
        if isinstance(item, dict) and key != "input":
            out[key] = _without_none(item)
        elif isinstance(item, list):
            out[key] = [_without_none(x) if isinstance(x, dict) else x for x in item]
        else:
            out[key] = item
    return out
