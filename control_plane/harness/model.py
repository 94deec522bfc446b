"""The model seam: a :class:`ModelClient` protocol and its Messages-API implementation.

The harness streams one Messages request at a time through :meth:`ModelClient.stream`, which
reports content-block starts and text deltas as they arrive (so they can be fanned out as
``event_start`` / ``event_delta`` frames) and returns the complete assistant message as JSON.

:class:`AnthropicModelClient` speaks the Messages API's wire format (``POST /v1/messages`` with
``stream: true``, server-sent events) over ``aiohttp``, and builds the message from the events'
JSON exactly as the official SDK's ``MessageStream`` builds it (a test holds the two equal on the
same bytes). It does not go through the SDK: the SDK's request machinery, ``httpx`` and a model
object per event cost about 2 ms of CPU per request, over four times what this costs
(``bench/bench_turn_cpu.py``). Errors are mapped here, once, as the SDK's status errors would
be::

    ControlPlaneError (control_plane.errors)
    └── ModelError              .error_type (the session.error type), .retryable
        ├── ModelRetryableError overloaded (529), rate limited (429), 5xx, 408/409, connection/timeout,
        │                       an ``error`` event in the stream, anything unexpected
        └── ModelTerminalError  every other 4xx (bad request, authentication, permission ...)

There are no retries here: the harness retries with backoff and records each failure in the
session log (``session.error`` with ``retry_status``). Like the SDK, the client honours
``HTTPS_PROXY`` / ``NO_PROXY`` and verifies TLS against the system's CA store (``SSL_CERT_FILE``
overrides it).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
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
    "error_for_status",
]

log = logging.getLogger(__name__)

OVERLOADED = "model_overloaded_error"
RATE_LIMITED = "model_rate_limited_error"
REQUEST_FAILED = "model_request_failed_error"
UNKNOWN = "unknown_error"
BILLING = "billing_error"

#: Connections to the model endpoint, open and idle alike (one per concurrent model request).
DEFAULT_MAX_CONNECTIONS = 1000
DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
#: Idle connections are closed before a server's usual 5 s keep-alive (uvicorn's default, many
#: proxies') would close them: reusing one just as the server closes it fails the request.
_KEEPALIVE_S = 4.0
#: The most of an error response's body read to explain it.
_ERROR_BODY_BYTES = 64 * 1024
#: The most of it kept in the error's message (and so in the session's ``session.error``).
_ERROR_MESSAGE_CHARS = 2000


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
    """:class:`ModelClient` for a Messages-API endpoint (Anthropic's, or any compatible server).

    ``base_url`` / ``api_key`` default to ``$ANTHROPIC_BASE_URL`` (else Anthropic's) and
    ``$ANTHROPIC_API_KEY`` (else ``$ANTHROPIC_AUTH_TOKEN``, sent as a bearer token), as the SDK
    looks them up. The key is never logged. ``timeout_s`` bounds connecting and each wait for the
    next bytes of a response (a stream may run longer, as long as it keeps talking). Up to
    ``max_connections`` connections, idle ones kept for 4 s."""

    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        base = base_url or os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL
        self._url = base.rstrip("/") + "/v1/messages"
        self._count_url = self._url + "/count_tokens"
        self._can_count = True  # False once the endpoint answered 404 to count_tokens
        self._headers = {
            "anthropic-version": API_VERSION,
            "content-type": "application/json",
            "accept": "text/event-stream",
            "user-agent": "outpost-control",
        }
        key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY")
        token = os.environ.get("ANTHROPIC_AUTH_TOKEN")
        if key:
            self._headers["x-api-key"] = key
        elif token:
            self._headers["authorization"] = f"Bearer {token}"
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout_s, sock_read=timeout_s)
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    def _client(self) -> aiohttp.ClientSession:
        if self._closed:
            # Shutting down: another process (or this one, restarted) retries the request.
            raise ModelRetryableError(REQUEST_FAILED, "the model client is closed")
        if self._session is None:  # made in the running loop, at first use
            connector = aiohttp.TCPConnector(
                limit=self._max_connections,
                limit_per_host=0,
                keepalive_timeout=_KEEPALIVE_S,
                ssl=ssl.create_default_context(),
            )
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=self._timeout, trust_env=True, auto_decompress=True
            )
        return self._session

    async def stream(
        self, request: Mapping[str, Any], on_event: Callable[[StreamEvent], None]
    ) -> dict[str, Any]:
        body = json.dumps({**request, "stream": True}, ensure_ascii=False).encode()
        headers = _with_betas(self._headers, request)
        try:
            async with self._client().post(
                self._url, data=body, headers=headers, allow_redirects=False
            ) as response:
                if response.status != 200:
                    text = await response.content.read(_ERROR_BODY_BYTES)
                    raise error_for_status(response.status, text)
                message = _MessageAccumulator(on_event)
                async for event, data in _sse_events(response.content.iter_any()):
                    if event == "error":
                        raise error_for_status(response.status, data)
                    message.add(event, data)
                return message.result()
        except ModelError:
            raise
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise ModelRetryableError(REQUEST_FAILED, f"cannot reach the model: {_describe(exc)}") from exc
        except ValueError as exc:  # a malformed stream
            raise ModelRetryableError(UNKNOWN, f"the model's stream could not be read: {exc}") from exc

    async def count_tokens(self, request: Mapping[str, Any]) -> int | None:
        """``POST /v1/messages/count_tokens`` for ``request`` (without ``max_tokens``): its input
        tokens; ``None`` when the endpoint does not count (404, remembered). Raises :class:`ModelError`."""
        if not self._can_count:
            return None
        fields = {k: v for k, v in request.items() if k not in ("max_tokens", "stream")}
        body = json.dumps(fields, ensure_ascii=False).encode()
        headers = {**_with_betas(self._headers, request), "accept": "application/json"}
        try:
            async with self._client().post(
                self._count_url, data=body, headers=headers, allow_redirects=False
            ) as response:
                text = await response.content.read(_ERROR_BODY_BYTES)
                if response.status == 404:
                    self._can_count = False
                    return None
                if response.status != 200:
                    raise error_for_status(response.status, text)
                tokens = json.loads(text).get("input_tokens")
                return tokens if isinstance(tokens, int) else None
        except ModelError:
            raise
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError, AttributeError) as exc:
            raise ModelRetryableError(REQUEST_FAILED, f"cannot count tokens: {_describe(exc)}") from exc

    async def close(self) -> None:
        self._closed = True
        session, self._session = self._session, None
        if session is not None:
            await session.close()


#: The beta a request with the ``compaction`` parameter needs.
COMPACTION_BETA = "compact-2026-09-04"
#: The beta a request with the ``context_management`` parameter needs.
CONTEXT_MANAGEMENT_BETA = "context-management-2025-06-27"


def _with_betas(headers: Mapping[str, str], request: Mapping[str, Any]) -> Mapping[str, str]:
    """``headers``, plus ``anthropic-beta`` for the betas ``request`` uses: the ``compaction``
    parameter, or a ``compaction`` block (sent first, where the harness puts it); the
    ``context_management`` parameter."""
    messages = request.get("messages") or [{}]
    first = messages[0].get("content") if isinstance(messages[0], Mapping) else None
    block = first[0] if isinstance(first, list) and first else None
    betas = []
    if "compaction" in request or (isinstance(block, Mapping) and block.get("type") == "compaction"):
        betas.append(COMPACTION_BETA)
    if "context_management" in request:
        betas.append(CONTEXT_MANAGEMENT_BETA)
    return {**headers, "anthropic-beta": ",".join(betas)} if betas else headers


def _describe(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def error_for_status(status: int, body: bytes | str) -> ModelError:
    """The :class:`ModelError` for an error response (``status``) or an ``error`` event of a
    stream (``status`` 200), as :mod:`anthropic` would classify its status error."""
    kind: str | None = None
    message = body.decode(errors="replace") if isinstance(body, bytes) else body
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    if isinstance(parsed, Mapping):
        error = parsed.get("error")
        if isinstance(error, Mapping):
            kind = error.get("type") if isinstance(error.get("type"), str) else None
            if isinstance(error.get("message"), str):
                message = error["message"]
    message = message.strip()[:_ERROR_MESSAGE_CHARS] or f"HTTP {status}"
    if kind == "overloaded_error" or status == 529:
        return ModelRetryableError(OVERLOADED, f"model overloaded: {message}")
    if kind == "rate_limit_error" or status == 429:
        return ModelRetryableError(RATE_LIMITED, f"model rate limited: {message}")
    if kind in ("api_error", "timeout_error") or status >= 500 or status < 400 or status in (408, 409):
        return ModelRetryableError(REQUEST_FAILED, f"model request failed ({status}): {message}")
    if kind == "billing_error" or status == 402:
        return ModelTerminalError(BILLING, f"model request refused ({status}): {message}")
    return ModelTerminalError(REQUEST_FAILED, f"model request refused ({status}): {message}")


async def _sse_events(chunks: AsyncIterator[bytes]) -> AsyncIterator[tuple[str, bytes]]:
    """``(event, data)`` of each server-sent event with a name and data (the Messages stream
    names every event); comments, ``id`` and ``retry`` fields are skipped. Lines end in ``\\n``
    or ``\\r\\n``; an event may span chunks, a chunk may hold many events."""
    event = ""
    data: list[bytes] = []
    buffer = b""
    ended = False
    while not ended:
        chunk = await anext(chunks, None)
        if chunk is None:
            ended, lines, buffer = True, [buffer, b""], b""
        else:
            buffer += chunk
            if b"\n" not in chunk:
                continue
            *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if event and data:
                    yield event, b"\n".join(data)
                event, data = "", []
                continue
            name, _, value = line.partition(b":")
            if value.startswith(b" "):
                value = value[1:]
            if name == b"data":
                data.append(value)
            elif name == b"event":
                event = value.decode()


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

    def add(self, event: str, data: str | bytes) -> None:
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
        if payload.get("context_management") is not None:  # the server's context edits
            message["context_management"] = payload["context_management"]
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
