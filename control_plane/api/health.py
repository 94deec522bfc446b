"""Liveness and readiness of the control plane, on its HTTP API port (no API key for either).

    GET /healthz   200 {"status": "ok"} while the process serves HTTP at all
    GET /readyz    200 {"status": "ready", "checks": {"store": "ok", ...}} when every check
                   passes; 503 {"status": "not ready", "checks": {"store": "failed: ...", ...}}
                   naming the check that failed otherwise

A check is an async callable returning ``None`` when all is well, or one line saying what is wrong.
The checks run concurrently, each within ``timeout_s`` (a store that hangs fails its check rather
than the probe). :class:`~control_plane.server.ControlPlane` passes three: ``store`` (reachable),
``tunnel`` (the gRPC tunnel listening, not draining) and ``harness`` (running).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping

from fastapi import APIRouter
from fastapi.responses import JSONResponse

__all__ = ["ReadinessCheck", "health_router"]

#: ``None`` when ready, else one line saying what is wrong.
ReadinessCheck = Callable[[], Awaitable[str | None]]

_DEFAULT_TIMEOUT_S = 2.0


async def _run(check: ReadinessCheck, timeout_s: float) -> str:
    try:
        problem = await asyncio.wait_for(check(), timeout_s)
    except TimeoutError:
        return f"failed: no answer within {timeout_s:g} s"
    except Exception as exc:
        return f"failed: {exc}" if str(exc) else f"failed: {type(exc).__name__}"
    return "ok" if problem is None else f"failed: {problem}"


def health_router(
    checks: Mapping[str, ReadinessCheck], *, timeout_s: float = _DEFAULT_TIMEOUT_S
) -> APIRouter:
    """``GET /healthz`` and ``GET /readyz`` over ``checks`` (name -> check)."""
    router = APIRouter()
    names = list(checks)

    @router.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @router.get("/readyz", include_in_schema=False)
    async def readyz() -> JSONResponse:
        results = await asyncio.gather(*(_run(checks[name], timeout_s) for name in names))
        report = dict(zip(names, results, strict=True))
        ready = all(result == "ok" for result in results)
        return JSONResponse(
            {"status": "ready" if ready else "not ready", "checks": report},
            status_code=200 if ready else 503,
            headers={"cache-control": "no-store"},
        )

    return router
