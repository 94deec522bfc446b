"""A local Messages API server, so tests, benchmarks and the offline demo run the real SDK without Claude.

::

    async with LocalModelServer(Script(["Hello!"]), ttft_s=0.2) as server:
        client = anthropic.AsyncAnthropic(base_url=server.base_url, api_key="test")
        async with client.messages.stream(model="m", max_tokens=100, messages=[...]) as stream:
            message = await stream.get_final_message()
        assert server.request_count == 1

``POST /v1/messages`` answers streaming (SSE) and non-streaming requests in the real API's shapes
(:mod:`scripted_model.wire`). Each request that passes the checks below gets the next turn from the
source, a :class:`~scripted_model.script.Script` or a responder callable. In order:

1. the request is recorded (:attr:`LocalModelServer.requests`, and the JSONL request log when set), with
   the ``x-api-key`` and ``authorization`` header values redacted;
2. authentication: a non-empty ``x-api-key`` or ``Authorization: Bearer`` key (any key, or exactly
   ``api_key`` when one is configured), else 401 ``authentication_error``;
3. error injection (:meth:`LocalModelServer.inject_errors`): the next N requests fail with the given
   status, either as an HTTP error or, with ``mid_stream=True``, as an ``error`` event after the first
   content delta of an HTTP 200 stream;
4. validation, else 400 ``invalid_request_error``; a script with no turns left also answers 400.

A request with the ``compaction`` parameter (``{"type": "summarize"}``) is answered by the server
itself, without taking a turn: one ``compaction`` block whose ``content`` is a deterministic summary
(:func:`scripted_model.wire.compaction_summary`), ``stop_reason: "compaction"``.

A request with ``context_management`` has its edits applied before the turn is taken
(:mod:`scripted_model.context_edits`: ``clear_tool_uses_20250919``, deterministically): the
source sees, and ``usage`` counts, the edited request; the response reports
``context_management.applied_edits`` (in ``message_delta`` when streaming).

``POST /v1/messages/count_tokens`` answers ``{"input_tokens": n}`` with the same deterministic count
the messages' ``usage`` reports (a quarter of the JSON size of system, messages and tools; after
the request's ``context_management`` edits, with ``context_management.original_input_tokens``); its
requests are recorded apart (:attr:`LocalModelServer.count_requests`).

Timing: ``message_start`` (and the first ``content_block_start``) are sent at once, as the real API does;
``ttft_s`` is slept before the first ``content_block_delta`` and ``chunk_delay_s`` before each later one.
A non-streaming response is sent after the same total delay.

The server runs on the caller's event loop. Blocking that loop (``time.sleep``, ``subprocess.run``) stalls
the model too: tests that drive another process while the model serves must await.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import inspect
import json
import logging
import math
import os
import socket
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from scripted_model import wire
from scripted_model.context_edits import apply_context_management
from scripted_model.script import LocalModelError, Responder, Script, ScriptExhausted, Turn

__all__ = ["InjectedError", "LocalModelServer", "RecordedRequest"]

logger = logging.getLogger(__name__)

_SECRET_HEADERS = frozenset({"x-api-key", "authorization", "proxy-authorization"})
_REDACTED = "[redacted]"


@dataclass(frozen=True)
class RecordedRequest:
    """One request received on ``POST /v1/messages``.

    ``received_at`` is ``time.monotonic()`` at arrival; ``headers`` are lower-cased, with the values of
    ``x-api-key`` and ``authorization`` replaced by ``[redacted]``; ``body`` is the parsed JSON, or None
    when the body was not JSON.
    """

    received_at: float
    headers: Mapping[str, str]
    body: Any

    @property
    def stream(self) -> bool:
        """Whether the request asked for a streaming response."""
        return isinstance(self.body, Mapping) and self.body.get("stream") is True

    @property
    def messages(self) -> list[Any]:
        """The request's ``messages`` (empty when absent)."""
        if isinstance(self.body, Mapping) and isinstance(self.body.get("messages"), list):
            return list(self.body["messages"])
        return []

    def to_json(self) -> dict[str, Any]:
        """The JSONL request-log record."""
        return {"received_at": self.received_at, "headers": dict(self.headers), "body": self.body}


@dataclass(frozen=True)
class InjectedError:
    """An error a request will get instead of its turn (see :meth:`LocalModelServer.inject_errors`)."""

    status: int = 529
    error_type: str | None = None
    message: str | None = None
    mid_stream: bool = False
    retry_after_s: float | None = None
    should_retry: bool | None = None

    @property
    def resolved_error_type(self) -> str:
        """The ``error.type`` sent: the given one, else the real API's type for the status."""
        return self.error_type or wire.error_type_for_status(self.status)


class _EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves the process's signal handlers alone (it runs inside a host program)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class LocalModelServer:
    """The local Messages API server: an async context manager serving on ``host`` and ``port``.

    ``port=0`` (the default) binds an ephemeral port; read :attr:`base_url` or :attr:`port` once started.
    ``script`` is a :class:`Script` (turns in order) or a responder ``(request_json) -> Turn`` (may be
    async). See the module docstring for the order of checks and the timing knobs.
    """

    def __init__(
        self,
        script: Script | Responder,
        *,
        ttft_s: float = 0.0,
        chunk_delay_s: float = 0.0,
        host: str = "127.0.0.1",
        port: int = 0,
        require_key: bool = True,
        api_key: str | None = None,
        request_log_path: str | os.PathLike[str] | None = None,
        words_per_chunk: int = 3,
        json_chunk_chars: int = 16,
        ping: bool = True,
        startup_timeout_s: float = 10.0,
        shutdown_timeout_s: float = 5.0,
        keep_alive_s: int = 5,
    ) -> None:
        if ttft_s < 0 or chunk_delay_s < 0:
            raise ValueError("ttft_s and chunk_delay_s must not be negative")
        if words_per_chunk < 1 or json_chunk_chars < 1:
            raise ValueError("words_per_chunk and json_chunk_chars must be at least 1")
        self._source = script
        self._ttft_s = ttft_s
        self._chunk_delay_s = chunk_delay_s
        self._host = host
        self._requested_port = port
        self._require_key = require_key or api_key is not None
        self._api_key = api_key
        self._request_log_path = Path(request_log_path) if request_log_path is not None else None
        self._words_per_chunk = words_per_chunk
        self._json_chunk_chars = json_chunk_chars
        self._ping = ping
        self._startup_timeout_s = startup_timeout_s
        self._shutdown_timeout_s = shutdown_timeout_s
        self._keep_alive_s = keep_alive_s  # an idle kept-alive connection is closed after this
        self._requests: list[RecordedRequest] = []
        self._count_requests: list[RecordedRequest] = []
        self._injected: deque[InjectedError] = deque()
        self._server: _EmbeddedServer | None = None
        self._task: asyncio.Task[None] | None = None
        self._port: int | None = None
        self._app = Starlette(
            routes=[
                Route("/v1/messages", self._messages, methods=["POST"]),
                Route("/v1/messages/count_tokens", self._count_tokens, methods=["POST"]),
                Route("/{path:path}", self._not_found, methods=["GET", "POST", "PUT", "PATCH", "DELETE"]),
            ]
        )

    # -- lifecycle --------------------------------------------------------------------------------------

    async def __aenter__(self) -> LocalModelServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Bind the socket and serve; returns once uvicorn reports it has started."""
        if self._task is not None:
            raise LocalModelError("the local model server was started already")
        sock = _bind(self._host, self._requested_port)
        config = uvicorn.Config(
            self._app,
            log_config=None,  # the entry point configures logging, not this library
            lifespan="off",
            ws="none",
            timeout_graceful_shutdown=math.ceil(self._shutdown_timeout_s),
            timeout_keep_alive=self._keep_alive_s,
        )
        # Set after construction: passing access_log=False would clear the process-wide
        # "uvicorn.access" logger's handlers, which another server in this process may use.
        config.access_log = False
        server = _EmbeddedServer(config)
        task = asyncio.create_task(server.serve(sockets=[sock]), name="local-model-server")
        self._server, self._task = server, task
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._startup_timeout_s
        while not server.started:
            if task.done() or loop.time() > deadline:
                await self.close()
                sock.close()
                raise LocalModelError("the local model server did not start")
            await asyncio.sleep(0.001)
        self._port = int(sock.getsockname()[1])
        logger.info("local model server listening on %s", self.base_url)

    async def close(self) -> None:
        """Stop accepting requests, let in-flight responses finish (up to the shutdown timeout), stop.

        Idempotent.
        """
        task, server = self._task, self._server
        self._task = None
        if task is None or server is None:
            return
        server.should_exit = True
        try:
            await task
        except Exception:
            logger.exception("local model server stopped with an error")

    # -- what tests read and steer ----------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound port (once started)."""
        if self._port is None:
            raise LocalModelError("the local model server is not started")
        return self._port

    @property
    def base_url(self) -> str:
        """``http://host:port``, to pass as the SDK's ``base_url``."""
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}"

    @property
    def app(self) -> Starlette:
        """The ASGI app (usable without a socket, e.g. with ``httpx.ASGITransport``)."""
        return self._app

    @property
    def script(self) -> Script | Responder:
        """The source of turns."""
        return self._source

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received on ``POST /v1/messages``, oldest first (a copy)."""
        return list(self._requests)

    @property
    def count_requests(self) -> list[RecordedRequest]:
        """Every request received on ``POST /v1/messages/count_tokens``, oldest first (a copy)."""
        return list(self._count_requests)

    @property
    def request_count(self) -> int:
        """How many requests were received on ``POST /v1/messages`` (including rejected ones)."""
        return len(self._requests)

    @property
    def pending_errors(self) -> int:
        """How many injected errors are still waiting for a request."""
        return len(self._injected)

    def inject_errors(
        self,
        status: int = 529,
        count: int = 1,
        *,
        error_type: str | None = None,
        message: str | None = None,
        mid_stream: bool = False,
        retry_after_s: float | None = None,
        should_retry: bool | None = None,
    ) -> None:
        """Make the next ``count`` authenticated requests fail with ``status`` in the real error shape.

        ``error_type`` defaults to the API's type for the status (529 ``overloaded_error``, 500
        ``api_error``, 429 ``rate_limit_error``, ...). ``retry_after_s`` sends ``retry-after-ms`` and
        ``retry-after`` headers (the SDK then waits that long instead of backing off), ``should_retry``
        sends ``x-should-retry``. With ``mid_stream=True`` a streaming request gets HTTP 200,
        ``message_start``, the first content block's start and first delta, then an ``error`` event (the
        SDK raises ``APIStatusError``); a :class:`Script` turn is not consumed by such a request.
        """
        if count < 1:
            raise ValueError("count must be at least 1")
        if not 400 <= status <= 599:
            raise ValueError("status must be an HTTP error status (400-599)")
        error = InjectedError(status, error_type, message, mid_stream, retry_after_s, should_retry)
        self._injected.extend([error] * count)

    def clear_injected_errors(self) -> None:
        """Drop the injected errors that no request has taken yet."""
        self._injected.clear()

    # -- HTTP -------------------------------------------------------------------------------------------

    async def _messages(self, request: Request) -> Response:
        received_at = time.monotonic()
        raw = await request.body()
        body = _parse_json(raw)
        record = RecordedRequest(received_at, _redact(request.headers), body)
        self._requests.append(record)
        if self._request_log_path is not None:
            await asyncio.to_thread(_append_jsonl, self._request_log_path, record.to_json())
        request_id = wire.new_request_id()
        logger.debug("request %s #%d stream=%s", request_id, len(self._requests), record.stream)

        denied = self._authenticate(request.headers)
        if denied is not None:
            return _error_response(401, "authentication_error", denied, request_id=request_id)

        injected = self._injected.popleft() if self._injected else None
        if injected is not None and not (injected.mid_stream and record.stream):
            return _injected_response(injected, request_id=request_id)

        problem = wire.validate_request(body)
        if problem is not None:
            return _error_response(400, "invalid_request_error", problem, request_id=request_id)

        compaction = body.get("compaction")
        if compaction is not None:
            return self._compaction_response(record, body, compaction, request_id)
        managed: dict[str, Any] | None = None
        if body.get("context_management") is not None:
            edited = apply_context_management(body)
            if isinstance(edited, str):
                return _error_response(400, "invalid_request_error", edited, request_id=request_id)
            body, applied = edited
            managed = {"applied_edits": applied}
        try:
            turn = await self._next_turn(body, consume=injected is None)
        except ScriptExhausted as exc:
            logger.warning("request %s: %s", request_id, exc)
            return _error_response(400, "invalid_request_error", str(exc), request_id=request_id)
        except Exception as exc:
            logger.exception("request %s: the responder failed", request_id)
            return _error_response(
                500,
                "api_error",
                f"local model responder failed: {type(exc).__name__}: {exc}",
                request_id=request_id,
                headers={"x-should-retry": "false"},
            )

        message = wire.message_json(
            wire.render_content(turn),
            message_id=wire.new_message_id(),
            model=body["model"],
            stop_reason=turn.resolved_stop_reason,
            stop_sequence=turn.stop_sequence,
            input_tokens=wire.count_input_tokens(body),
            context_management=managed,
        )
        events = wire.stream_events(
            message,
            words_per_chunk=self._words_per_chunk,
            json_chunk_chars=self._json_chunk_chars,
            ping=self._ping,
        )
        if not record.stream:
            deltas = sum(1 for e in events if e.event == "content_block_delta")
            delay_s = self._ttft_s + self._chunk_delay_s * max(0, deltas - 1)
            if delay_s > 0:
                await asyncio.sleep(delay_s)
            return JSONResponse(message, headers={"request-id": request_id})
        if injected is not None:
            events = wire.cut_with_error(
                events, injected.resolved_error_type, injected.message, request_id=request_id
            )
        return StreamingResponse(
            self._paced(events),
            media_type="text/event-stream",
            headers={"request-id": request_id, "cache-control": "no-cache"},
        )

    def _compaction_response(
        self, record: RecordedRequest, body: Mapping[str, Any], compaction: Any, request_id: str
    ) -> Response:
        """The answer to a compaction request: one ``compaction`` block (no turn is taken)."""
        if not isinstance(compaction, Mapping) or compaction.get("type") != "summarize":
            problem = "compaction.type: Input should be 'summarize'"
            return _error_response(400, "invalid_request_error", problem, request_id=request_id)
        if body.get("context_management") is not None:
            problem = "compaction cannot be combined with context_management"
            return _error_response(400, "invalid_request_error", problem, request_id=request_id)
        summary = wire.compaction_summary(body["messages"])
        block = {"type": "compaction", "content": summary, "signature": wire.signature_for(summary)}
        message = wire.message_json(
            [block],
            message_id=wire.new_message_id(),
            model=body["model"],
            stop_reason="compaction",
            stop_sequence=None,
            input_tokens=wire.count_input_tokens(body),
        )
        if not record.stream:
            return JSONResponse(message, headers={"request-id": request_id})
        events = wire.stream_events(message, ping=self._ping)
        return StreamingResponse(
            self._paced(events),
            media_type="text/event-stream",
            headers={"request-id": request_id, "cache-control": "no-cache"},
        )

    async def _count_tokens(self, request: Request) -> Response:
        body = _parse_json(await request.body())
        self._count_requests.append(RecordedRequest(time.monotonic(), _redact(request.headers), body))
        request_id = wire.new_request_id()
        denied = self._authenticate(request.headers)
        if denied is not None:
            return _error_response(401, "authentication_error", denied, request_id=request_id)
        problem = wire.validate_request({"max_tokens": 1, **body} if isinstance(body, Mapping) else body)
        if problem is not None:
            return _error_response(400, "invalid_request_error", problem, request_id=request_id)
        answer: dict[str, Any] = {"input_tokens": wire.count_input_tokens(body)}
        if body.get("context_management") is not None:  # counted after the edits
            edited = apply_context_management({"max_tokens": 1, **body})
            if isinstance(edited, str):
                return _error_response(400, "invalid_request_error", edited, request_id=request_id)
            answer = {
                "input_tokens": wire.count_input_tokens(edited[0]),
                "context_management": {"original_input_tokens": answer["input_tokens"]},
            }
        return JSONResponse(answer, headers={"request-id": request_id})

    async def _not_found(self, request: Request) -> Response:
        return _error_response(
            404, "not_found_error", f"Not found: {request.url.path}", request_id=wire.new_request_id()
        )

    def _authenticate(self, headers: Mapping[str, str]) -> str | None:
        """None when the request may proceed, else the ``authentication_error`` message."""
        if not self._require_key:
            return None
        key = _presented_key(headers)
        if key is None:
            return "x-api-key header is required"
        if self._api_key is not None and not hmac.compare_digest(key.encode(), self._api_key.encode()):
            return "invalid x-api-key"
        return None

    async def _next_turn(self, body: Mapping[str, Any], *, consume: bool) -> Turn:
        source = self._source
        if isinstance(source, Script):
            return source.respond(body) if consume else source.peek(body)
        result = source(body)
        turn = await result if inspect.isawaitable(result) else result
        if not isinstance(turn, Turn):
            raise TypeError(f"the responder returned {type(turn).__name__}, not a Turn")
        return turn

    async def _paced(self, events: Sequence[wire.SseEvent]) -> AsyncIterator[bytes]:
        """Yield the events' bytes, sleeping ``ttft_s`` before the first delta and ``chunk_delay_s`` between.

        A turn without deltas sleeps ``ttft_s`` before its ``message_delta``.
        """
        first = True
        for event in events:
            paced = event.event in ("content_block_delta", "error") or (
                first and event.event == "message_delta"
            )
            if paced:
                delay_s = self._ttft_s if first else self._chunk_delay_s
                first = False
                if delay_s > 0:
                    await asyncio.sleep(delay_s)
            yield event.encode()


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on connections of such sockets, and
    # without it every reply on a kept-alive connection waits ~40 ms for the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _parse_json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None


def _redact(headers: Mapping[str, str]) -> dict[str, str]:
    return {
        name.lower(): (_REDACTED if name.lower() in _SECRET_HEADERS else value)
        for name, value in headers.items()
    }


def _presented_key(headers: Mapping[str, str]) -> str | None:
    key = headers.get("x-api-key", "").strip()
    if key:
        return key
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return None


def _append_jsonl(path: Path, record: Mapping[str, Any]) -> None:
    line = json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
    with path.open("a", encoding="utf-8") as file:
        file.write(line)


def _error_response(
    status: int,
    error_type: str,
    message: str | None,
    *,
    request_id: str,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(
        wire.error_body(error_type, message, request_id=request_id),
        status_code=status,
        headers={"request-id": request_id, **(headers or {})},
    )


def _injected_response(error: InjectedError, *, request_id: str) -> JSONResponse:
    headers: dict[str, str] = {}
    if error.retry_after_s is not None:
        headers["retry-after-ms"] = str(max(0, round(error.retry_after_s * 1000)))
        headers["retry-after"] = str(max(0, math.ceil(error.retry_after_s)))
    if error.should_retry is not None:
        headers["x-should-retry"] = "true" if error.should_retry else "false"
    return _error_response(
        error.status, error.resolved_error_type, error.message, request_id=request_id, headers=headers
    )
