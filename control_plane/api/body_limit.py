"""ASGI middleware that refuses request bodies over a size limit without reading them whole.

A declared ``Content-Length`` over the limit is answered at once; a body without one (chunked) is
counted as it streams in and refused the moment it passes the limit. Either way the answer is
``413`` with error type ``request_too_large`` and nothing of the body is handed to a route past
the limit. (Up to 1 MiB more of the body is read and dropped first — :func:`drain_some` — so that a client
still sending it reads the 413 rather than a reset connection.)

Limits are per route: small by default (``max_body_bytes``), larger only for the routes whose
bodies carry content (``content_max_body_bytes``: a session's events and a new session's initial
events, which may hold images and documents, and ``exec``), and largest for uploads
(``upload_max_body_bytes``: ``POST /v1/files``, the file cap plus the multipart framing; the
route itself counts the file's bytes against the cap as they stream in). A body that stops
arriving for ``body_timeout_s`` is answered ``408`` (``timeout_error``): a client cannot hold a
request open by trickling it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from control_plane.api.errors import error_body

__all__ = [
    "DEFAULT_BODY_TIMEOUT_S",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_CONTENT_BODY_BYTES",
    "BodyLimitMiddleware",
    "drain_some",
    "is_content_route",
    "is_upload_route",
]

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
DEFAULT_MAX_CONTENT_BODY_BYTES = 32 * 1024 * 1024  # the Messages API's own request limit
DEFAULT_BODY_TIMEOUT_S = 30.0


def is_content_route(method: str, path: str) -> bool:
    """Routes whose bodies carry content: a session's events and a new session's initial events
    (images, documents), and a tool call by hand (``write`` of a file)."""
    if method != "POST":
        return False
    if path in ("/v1/sessions", "/v1/sandboxes/exec"):
        return True
    return path.startswith("/v1/sessions/") and path.endswith("/events")


def is_upload_route(method: str, path: str) -> bool:
    """Routes whose bodies are uploads (multipart) whose routes count the bytes against their own
    caps: a file (streamed to disk) and a skill's files (``/v1/skills``, ``.../versions``)."""
    if method != "POST":
        return False
    if path in ("/v1/files", "/v1/skills"):
        return True
    return path.startswith("/v1/skills/") and path.endswith("/versions") and path.count("/") == 4


class _BodyTooLarge(Exception):
    """Raised into the route when the streamed body passes the limit."""


class _BodyTimeout(Exception):
    """Raised into the route when the body stops arriving."""


class BodyLimitMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        *,
        content_max_body_bytes: int | None = None,
        upload_max_body_bytes: int | None = None,
        body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
        is_content: Callable[[str, str], bool] = is_content_route,
        is_upload: Callable[[str, str], bool] = is_upload_route,
    ) -> None:
        limits = (max_body_bytes, content_max_body_bytes, upload_max_body_bytes)
        if any(limit is not None and limit < 1 for limit in limits):
            raise ValueError("body limits must be positive")
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.content_max_body_bytes = content_max_body_bytes or max_body_bytes
        self.upload_max_body_bytes = upload_max_body_bytes or max_body_bytes
        self.body_timeout_s = body_timeout_s
        self._is_content = is_content
        self._is_upload = is_upload

    def _limit(self, method: str, path: str) -> int:
        if self._is_upload(method, path):
            return self.upload_max_body_bytes
        if self._is_content(method, path):
            return self.content_max_body_bytes
        return self.max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self._limit(scope.get("method", ""), scope.get("path", ""))
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await self._reject(send, limit)
            return

        received = 0
        started = False
        rejected = False
        body_done = False

        async def limited_receive() -> Message:
            nonlocal received, rejected, started, body_done
            if body_done:  # only the body is timed: later waits (for a disconnect) may be long
                return await receive()
            try:
                async with asyncio.timeout(self.body_timeout_s):
                    message = await receive()
            except TimeoutError:
                if not started:
                    rejected = started = True
                    await _answer(send, 408, "timeout_error", "the request body stopped arriving")
                raise _BodyTimeout from None
            if message["type"] == "http.request":
                body_done = not message.get("more_body", False)
                received += len(message.get("body", b""))
                if received > limit:
                    # answered below, once the route has unwound (and removed what it began)
                    rejected = rejected or not started
                    raise _BodyTooLarge
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if rejected:
                return  # the 408 or 413 is ours; drop whatever the route makes of the error
            if message["type"] == "http.response.start":
                started = True
                if message.get("status") == 413 and not body_done:  # the route's own cap (uploads)
                    await drain_some(receive)
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except Exception:
            if not rejected:
                raise
        if rejected and not started:
            started = True
            if not body_done:
                await drain_some(receive)
            await self._reject(send, limit)

    async def _reject(self, send: Send, limit: int) -> None:
        message = f"request body is larger than the limit of {limit} bytes"
        await _answer(send, 413, "request_too_large", message)


_DRAIN_BYTES = 1 << 20
_DRAIN_S = 1.0


async def drain_some(receive: Receive) -> None:
    """Read and drop up to 1 MiB more of a refused request's body, for at most a second, before
    the refusal is sent (a 413 here, the API-key gate's 403 for a read_only key). An HTTP/1.1
    client still sending its body when the server closes the connection may see a reset instead
    of the answer (the SDK reported a connection error, not the 403, for a read_only key's
    upload). Only for a caller already authenticated: an unauthenticated body is never read. A
    larger or slower rest is cut off as before."""
    drained = 0
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(_DRAIN_S):
            while drained <= _DRAIN_BYTES:
                message = await receive()
                if message["type"] != "http.request":
                    return
                drained += len(message.get("body", b""))
                if not message.get("more_body", False):
                    return


async def _answer(send: Send, status: int, error_type: str, message: str) -> None:
    body = json.dumps(error_body(error_type, message)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
