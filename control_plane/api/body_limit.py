"""ASGI middleware that refuses request bodies over a size limit without reading them whole.

A declared ``Content-Length`` over the limit is answered at once; a body without one (chunked) is
counted as it streams in and refused the moment it passes the limit. Either way the answer is
``413`` with error type ``request_too_large`` and nothing of the body is handed to a route past
the limit. (The server discards the unread rest of the body, so the client still reads the 413.)
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from control_plane.api.errors import error_body

__all__ = ["DEFAULT_MAX_BODY_BYTES", "BodyLimitMiddleware"]

DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024


class _BodyTooLarge(Exception):
    """Raised into the route when the streamed body passes the limit."""


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        if max_body_bytes < 1:
            raise ValueError("max_body_bytes must be positive")
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_body_bytes
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await self._reject(send)
            return

        received = 0
        started = False
        rejected = False

        async def limited_receive() -> Message:
            nonlocal received, rejected, started
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    if not started:
                        rejected = started = True
                        await self._reject(send)
                    raise _BodyTooLarge
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if rejected:
                return  # we answered already; drop whatever the route makes of the error
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except Exception:
            if not rejected:
                raise

    async def _reject(self, send: Send) -> None:
        message = f"request body is larger than the limit of {self.max_body_bytes} bytes"
        body = json.dumps(error_body("request_too_large", message)).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
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
