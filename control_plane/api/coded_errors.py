"""Errors that carry a machine-readable ``details.error_code`` next to the error type.

The SDK picks a more specific exception class from ``(status, error.details.error_code)``, e.g.
``(400, "environment_archived")`` → ``BetaEnvironmentArchivedError`` and
``(404, "environment_not_found")`` → ``BetaEnvironmentNotFoundError``. Body::

    {"type": "error", "error": {"type": ..., "message": ..., "details": {"error_code": ...}}}
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from control_plane.api.errors import ApiError, error_body

__all__ = ["CodedApiError", "install_coded_error_handler"]


class CodedApiError(ApiError):
    """An :class:`ApiError` with a ``details.error_code``."""

    def __init__(self, status: int, message: str, error_code: str, error_type: str | None = None) -> None:
        super().__init__(status, message, error_type)
        self.error_code = error_code


def install_coded_error_handler(app: FastAPI) -> None:
    @app.exception_handler(CodedApiError)
    async def _coded(_: Request, exc: CodedApiError) -> JSONResponse:
        body = error_body(exc.error_type, exc.message)
        body["error"]["details"] = {"error_code": exc.error_code}
        headers = {"x-should-retry": "false"} if exc.status == 409 else None
        return JSONResponse(body, status_code=exc.status, headers=headers)
