"""Shared pieces for running the edge's real ``Dialer`` + ``Link`` against real in-process control
planes, without sandboxes: a fake request handler, a dialer with a quick test ``ConnectionConfig``,
a running link, a poller, and the ``cp`` / ``api`` / ``no_ambient_proxy`` fixtures.

The fixtures are plain (none is autouse) and apply only where a module imports them; a module that
wants the proxy variables cleared for all its tests says so with
``pytestmark = pytest.mark.usefixtures("no_ambient_proxy")``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from control_plane.config import ControlPlaneConfig
from control_plane.server import ControlPlane
from edge_agent.config import ConnectionConfig
from edge_agent.connection import Dialer, Link, RequestHandler
from edge_agent.connection.dialer import Endpoint
from edge_agent.identity import Identity
from outpost_wire.errors import ErrorCode
from outpost_wire.frames import PROTOCOL_VERSION, Execute, Failure, Hello, Outcome, Request
from outpost_wire.results import ToolResult
from outpost_wire.session import SessionConfig

PROXY_VARS = ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "no_proxy", "NO_PROXY", "all_proxy")


@pytest.fixture
def no_ambient_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests' own proxy settings only: none from the environment running them."""
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)


def control_plane_config(tmp_path: Path, **config: Any) -> ControlPlaneConfig:
    """A control plane on loopback (port 0) keeping its data in ``tmp_path / "cp"`` (control planes
    configured so share one store, CA and admin key), with quick heartbeats and drain; ``config``
    adds to or overrides these settings (e.g. ``http_tls=True``)."""
    settings: dict[str, Any] = {
        "data_dir": tmp_path / "cp",
        "http_port": 0,
        "tunnel_port": 0,
        "heartbeat_interval_s": 0.5,
        "heartbeat_timeout_s": 3.0,
        "drain_grace_s": 0.5,
    }
    return ControlPlaneConfig(**(settings | config))


@contextlib.asynccontextmanager
async def running_control_plane(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **config: Any
) -> AsyncIterator[ControlPlane]:
    """A control plane from ``control_plane_config(tmp_path, **config)``, running."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "unused")
    async with ControlPlane(control_plane_config(tmp_path, **config)) as control_plane:
        yield control_plane


@pytest.fixture(name="cp")
async def cp_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[ControlPlane]:
    """``running_control_plane`` over plain HTTP."""
    async with running_control_plane(tmp_path, monkeypatch) as control_plane:
        yield control_plane


def api_client(cp: ControlPlane, **kwargs: Any) -> httpx.AsyncClient:
    """An admin API client for ``cp`` (``kwargs`` go to ``httpx.AsyncClient``, e.g. ``verify``)."""
    headers = {"authorization": f"Bearer {cp.admin_key()}"}
    return httpx.AsyncClient(base_url=cp.http_url, headers=headers, timeout=30, **kwargs)


async def connected_edges(cp: ControlPlane) -> list[str]:
    """The ids of the edges connected to ``cp`` (its admin API)."""
    async with api_client(cp) as api:
        r = await api.get("/v1/connected_edges")
    assert r.status_code == 200, r.text
    return [e["edge_id"] for e in r.json()["data"]]


@pytest.fixture(name="api")
async def api_fixture(cp: ControlPlane) -> AsyncIterator[httpx.AsyncClient]:
    async with api_client(cp) as client:
        yield client


class FakeHandler:
    """Answers every Execute with a text result naming the tool, once ``release`` is set (it is
    from the start: clear it to hold calls; ``started`` is set when one arrives)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.release.set()
        self.started = asyncio.Event()

    async def handle(self, request: Request) -> Outcome:
        self.started.set()
        await self.release.wait()
        if isinstance(request.op, Execute):
            return ToolResult.text(f"fake {request.op.tool} ran")
        return Failure(ErrorCode.INVALID_REQUEST, "fake handler: only Execute")

    def cancel(self, request_id: str) -> bool:
        return False


def make_dialer(
    identity: Identity,
    state_dir: Path,
    transport: str = "grpc",
    *,
    tunnel_address: str | None = None,
    control_plane_url: str | None = None,
    more_endpoints: Sequence[Endpoint] = (),
    backoff_initial_s: float = 0.05,
    backoff_max_s: float = 0.2,
    connect_timeout_s: float = 5.0,
) -> Dialer:
    """A dialer with quick heartbeats, to the identity's own addresses unless given others."""
    return Dialer(
        identity=identity,
        config=ConnectionConfig(
            transport=transport,  # type: ignore[arg-type]
            heartbeat_interval_s=0.5,
            heartbeat_timeout_s=3.0,
            backoff_initial_s=backoff_initial_s,
            backoff_max_s=backoff_max_s,
            connect_timeout_s=connect_timeout_s,
            auto_grpc_connect_timeout_s=1.0,  # used by transport="auto" only
        ),
        tunnel_address=identity.tunnel_address if tunnel_address is None else tunnel_address,
        control_plane_url=identity.control_plane_url if control_plane_url is None else control_plane_url,
        more_endpoints=more_endpoints,
        state_dir=state_dir,
        max_frame_bytes=SessionConfig().max_frame_bytes,
    )


@contextlib.asynccontextmanager
async def running_link(
    identity: Identity,
    dialer: Dialer,
    handler: RequestHandler | None = None,
    *,
    sandbox_capacity: int = 2,
    sandboxes_in_use: Callable[[], int] | None = None,
) -> AsyncIterator[Link]:
    """The edge's link, running in a task (with a ``FakeHandler`` unless given a handler); drained
    and cancelled at exit. A control plane's drain moves it to the dialer's next address, if any.
    ``sandboxes_in_use``: what its heartbeats report (default: 0)."""

    def hello() -> Hello:
        return Hello(
            edge_id=identity.edge_id,
            software_version="test",
            protocol_version=PROTOCOL_VERSION,
            capabilities=("tool:bash",),
            policy_digest="sha256:test",
            sandbox_capacity=sandbox_capacity,
            sandboxes_in_use=0,
            environment_id=identity.environment_id,
        )

    config = dialer._config
    link = Link(
        connect=dialer.connect,
        hello=hello,
        handler=FakeHandler() if handler is None else handler,
        config=config,
        on_peer_drain=dialer.rotate,
        sandboxes_in_use=sandboxes_in_use,
        session_config=SessionConfig(
            heartbeat_interval_s=config.heartbeat_interval_s, heartbeat_timeout_s=config.heartbeat_timeout_s
        ),
    )
    task = asyncio.create_task(link.run())
    try:
        yield link
    finally:
        await link.drain(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
