"""What a path no route serves answers: a 404 ``not_found_error`` that names the feature.

The official SDK knows more of the Managed Agents API than Outpost serves. A call to a part Outpost
does not serve (``GET /v1/organizations/me``) gets, instead of a bare "Not Found"::

    404 {"type": "error", "error": {"type": "not_found_error",
         "message": "/v1/organizations/me is not supported by Outpost yet (organization administration)",
         "details": {"error_code": "unsupported_path"}}}

The feature is the most specific entry of :data:`FEATURES` (the SDK's resource prefixes) the path
falls under; any other path gets a generic message with the same ``error_code``. A route's path
with a method it does not take stays a 405 (:mod:`control_plane.api.errors`). The API-key gate runs
first: without a valid key, an unknown path is a 401 like any other.
"""

from __future__ import annotations

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from control_plane.api.errors import error_body

__all__ = ["FEATURES", "UNSUPPORTED_PATH", "UnroutedPaths", "unsupported_message"]

UNSUPPORTED_PATH = "unsupported_path"  # details.error_code of the 404 for a path no route serves

#: The SDK's resource prefixes Outpost does not serve (yet), each with the feature's name.
#: ``{}`` stands for one path segment (an id); a path matches the entry whose segments start it.
FEATURES: tuple[tuple[str, str], ...] = (
    ("/v1/messages", "the Messages API (send model calls to the model endpoint)"),
    ("/v1/models", "the models listing"),
    ("/v1/webhooks", "webhooks; Outpost manages endpoints at /v1/outpost/webhook_endpoints"),
    ("/v1/organizations", "organization administration"),
)

_MAX_PATH_CHARS = 200  # the path as the message repeats it


def _segments(path: str) -> list[str]:
    return path.strip("/").split("/")


# Most specific first: more segments win over fewer.
_TABLE = sorted(((_segments(p), p, name) for p, name in FEATURES), key=lambda e: -len(e[0]))


def _feature(path: str) -> str | None:
    parts = _segments(path)
    for template, _, name in _TABLE:
        if len(parts) >= len(template) and all(
            (t == "{}" and bool(p)) or t == p for t, p in zip(template, parts, strict=False)
        ):
            return name
    return None


def unsupported_message(path: str) -> str:
    """The 404's message for ``path``, which no route serves."""
    shown = path if len(path) <= _MAX_PATH_CHARS else path[:_MAX_PATH_CHARS] + "…"
    feature = _feature(path)
    if feature is not None:
        return f"{shown} is not supported by Outpost yet ({feature})"
    return f"{shown} is not a path of the API Outpost serves"


class UnroutedPaths:
    """The router's ``default``: what answers when no route matched the path. HTTP gets the typed
    404; other scopes (a WebSocket to an unknown path) go to ``fallback`` (Starlette's own)."""

    def __init__(self, fallback: ASGIApp) -> None:
        self._fallback = fallback

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._fallback(scope, receive, send)
            return
        body = error_body("not_found_error", unsupported_message(scope["path"]))
        body["error"]["details"] = {"error_code": UNSUPPORTED_PATH}
        await JSONResponse(body, status_code=404)(scope, receive, send)
