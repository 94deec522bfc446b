"""What the two daemons' metrics share, on ``prometheus_client``.

Each daemon makes its own registry with :func:`daemon_registry` (never the library's global
``REGISTRY``, so several daemons in one process, as in the tests, do not collide) and serves it
with :func:`exposition`::

    registry = daemon_registry("outpost_edge_build")   # + process_*, python_*, outpost_edge_build_info
    calls = Counter("outpost_edge_tool_calls", "...", ("tool", "outcome"), registry=registry)
    body, content_type = exposition(registry, request_accept_header)

Every registry carries the process's own series (``process_cpu_seconds_total``,
``process_resident_memory_bytes``, ``process_open_fds``, ...; Linux only), Python's
(``python_info``, ``python_gc_*``) and ``<build_info>_info{version}`` (always 1).
"""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_PLAIN_0_0_4,
    CollectorRegistry,
    GCCollector,
    Info,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.exposition import choose_encoder

from outpost_wire.version import SOFTWARE_VERSION

__all__ = ["CONTENT_TYPE", "DEFAULT_BUCKETS", "daemon_registry", "exposition"]

#: The ``Content-Type`` of the classic text format, what a scraper gets unless it asks for OpenMetrics.
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

#: Latency buckets in seconds, from 5 ms to 10 min (tool calls and model requests are slow).
DEFAULT_BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
)


def daemon_registry(build_info: str) -> CollectorRegistry:
    """A new registry with the process and Python series, and ``{build_info}_info{version}`` (1)."""
    registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    Info(build_info, "This program's software version.", registry=registry).info(
        {"version": SOFTWARE_VERSION}
    )
    return registry


def exposition(registry: CollectorRegistry, accept: str | None = None) -> tuple[bytes, str]:
    """``(body, content type)`` of a scrape: the text format, or OpenMetrics when ``accept`` asks."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type
