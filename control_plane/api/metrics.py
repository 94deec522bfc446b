"""``GET /metrics``: the control plane's series (:mod:`control_plane.metering`), Prometheus
exposition.

``/metrics`` needs an admin API key (the series span every environment), unless the config says
``metrics_public: true`` (for a scraper on a trusted network; the series carry edge and
environment ids, no secrets).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, Request, Response

from control_plane.metering import ControlPlaneMetrics

__all__ = ["metrics_router"]


def metrics_router(metrics: ControlPlaneMetrics, auth: Callable[..., Any] | None) -> APIRouter:
    """``GET /metrics``; ``auth`` is the API-key dependency, or None for ``metrics_public``."""
    router = APIRouter(dependencies=[Depends(auth)] if auth is not None else [])

    @router.get("/metrics", include_in_schema=False)
    async def get_metrics(request: Request) -> Response:
        body, content_type = metrics.render(request.headers.get("accept"))
        return Response(content=body, headers={"content-type": content_type})

    return router
