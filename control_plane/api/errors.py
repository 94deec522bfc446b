"""The API's error bodies, in the shape the official SDK reads.

``{"type": "error", "error": {"type": <error type>, "message": str}}`` with the matching status;
every response (errors included) carries a ``request-id`` header. Control-plane errors are mapped
here, once.

No edge to take a call (:class:`~control_plane.errors.EdgeUnavailable`, e.g. ``exec`` in an
environment none of whose edges is connected) is a 503 ``api_error`` with ``details: {"error_code":
"edge_unavailable", "environment_id": ...}`` (the SDK raises ``ServiceUnavailableError`` with that
``error_code``). The type is from the API's closed set: ``overloaded_error`` means the service is
overloaded (529), which this is not; ``GatewayDraining`` (this process is shutting down, the call
goes to another) stays a 503 ``overloaded_error``. Any other control-plane error with an
``error_code`` (e.g. ``environment_not_found``) carries it as ``details: {"error_code": ...}``.
A memory write whose ``content_sha256`` precondition fails is a 409
``memory_precondition_failed_error``; one onto a path another memory holds is a 409
``memory_path_conflict_error`` whose ``error`` also names ``conflicting_memory_id``.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from control_plane.errors import (
    Conflict,
    ContentTooLarge,
    ControlPlaneError,
    EdgeUnavailable,
    Fenced,
    GatewayDraining,
    InvalidRequest,
    MemoryPathConflict,
    MemoryPreconditionFailed,
    NotConfigured,
    NotFound,
    PermissionDenied,
    SequenceConflict,
    TokenRejected,
)
from outpost_wire.errors import ErrorCode, RemoteError

__all__ = ["EDGE_UNAVAILABLE", "ApiError", "error_body", "install_error_handlers"]

log = logging.getLogger(__name__)

EDGE_UNAVAILABLE = "edge_unavailable"  # details.error_code when no edge could take the call

_STATUS_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "conflict_error",
    413: "request_too_large",
    422: "invalid_request_error",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
}


class ApiError(Exception):
    """Raise from a route to answer with a given status and error type."""

    def __init__(self, status: int, message: str, error_type: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type or _STATUS_TYPES.get(status, "api_error")


def error_body(error_type: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type, "message": message}}


def _json_error(status: int, error_type: str, message: str, error_code: str | None = None) -> JSONResponse:
    body = error_body(error_type, message)
    if error_code is not None:
        body["error"]["details"] = {"error_code": error_code}
    headers = {"x-should-retry": "false"} if status == 409 else None
    return JSONResponse(body, status_code=status, headers=headers)


def _map(exc: Exception) -> tuple[int, str]:
    if isinstance(exc, NotFound):
        return 404, "not_found_error"
    if isinstance(exc, TokenRejected):
        return 401, "authentication_error"
    if isinstance(exc, InvalidRequest):
        return 400, "invalid_request_error"
    if isinstance(exc, PermissionDenied):
        return 403, "permission_error"
    if isinstance(exc, MemoryPreconditionFailed):
        return 409, "memory_precondition_failed_error"
    if isinstance(exc, MemoryPathConflict):
        return 409, "memory_path_conflict_error"
    if isinstance(exc, ContentTooLarge):
        return 413, "request_too_large"
    if isinstance(exc, Conflict | SequenceConflict | Fenced):
        return 409, "conflict_error"
    if isinstance(exc, GatewayDraining | NotConfigured):
        return 503, "overloaded_error"
    if isinstance(exc, EdgeUnavailable):
        return 503, "api_error"
    if isinstance(exc, RemoteError):
        if exc.code is ErrorCode.DEADLINE_EXCEEDED:
            return 504, "timeout_error"
        if exc.code in (ErrorCode.POLICY_DENIED,):
            return 403, "permission_error"
        if exc.code in (ErrorCode.INVALID_REQUEST,):
            return 400, "invalid_request_error"
        return 503, "overloaded_error"
    return 500, "api_error"


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return _json_error(exc.status, exc.error_type, exc.message)

    @app.exception_handler(ControlPlaneError)
    async def _cp_error(_: Request, exc: ControlPlaneError) -> JSONResponse:
        status, error_type = _map(exc)
        if isinstance(exc, EdgeUnavailable) and not isinstance(exc, GatewayDraining):
            body = error_body(error_type, str(exc))
            details: dict[str, Any] = {"error_code": EDGE_UNAVAILABLE}
            if exc.environment_id is not None:
                details["environment_id"] = exc.environment_id
            body["error"]["details"] = details
            return JSONResponse(body, status_code=status)
        if isinstance(exc, MemoryPathConflict):  # the hosted API names the memory in the way
            body = error_body(error_type, str(exc))
            body["error"]["conflicting_memory_id"] = exc.conflicting_memory_id
            return JSONResponse(body, status_code=status, headers={"x-should-retry": "false"})
        return _json_error(status, error_type, str(exc), exc.error_code)

    @app.exception_handler(RemoteError)
    async def _remote_error(_: Request, exc: RemoteError) -> JSONResponse:
        status, error_type = _map(exc)
        return _json_error(status, error_type, exc.message)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        parts = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
            parts.append(f"{loc}: {err.get('msg')}" if loc else str(err.get("msg")))
        return _json_error(400, "invalid_request_error", "; ".join(parts) or "invalid request")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        error_type = _STATUS_TYPES.get(exc.status_code, "api_error")
        message = str(exc.detail)
        if exc.status_code == 405:  # a routed path, another method (its Allow would name one route's)
            message = f"{request.method} is not allowed on {request.url.path[:200]}"
        return _json_error(exc.status_code, error_type, message)

    @app.exception_handler(OverflowError)
    async def _overflow(_: Request, exc: OverflowError) -> JSONResponse:
        # A number past what the store holds (64-bit) that no model bounded: the caller's input.
        return _json_error(400, "invalid_request_error", "a number in the request is out of range")

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return _json_error(500, "api_error", "internal server error")
