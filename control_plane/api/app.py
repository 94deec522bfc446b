"""The HTTP API (ASGI): ``create_app`` wires the routers to the services they use.

Middleware, outermost first: the ``request-id`` header, then the API-key gate (a 401 from the
headers alone, before any body is read), then the body-size limit (413 before a route reads an
oversized body). Every HTTP path needs an API key but liveness, readiness and enrollment
(:data:`control_plane.api.auth.PUBLIC_PATHS`), and ``/metrics`` when ``ApiConfig.metrics_public``.
The request id and the caller's API key id are bound to the log context for everything logged
while the request is served. A path no route serves answers a 404 that names the feature Outpost
does not serve (:mod:`control_plane.api.unrouted`). What each key may do: :mod:`control_plane.api.caller`.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from fastapi import APIRouter, Depends, FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from control_plane.agents import AgentService
from control_plane.api.agents import agents_router
from control_plane.api.api_keys import api_keys_router
from control_plane.api.auth import KEY_CACHE_TTL_S, PUBLIC_PATHS, ApiKeyAuth, ApiKeyCache, ApiKeyGate
from control_plane.api.body_limit import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_CONTENT_BODY_BYTES,
    BodyLimitMiddleware,
)
from control_plane.api.caller import require_admin_key, unscoped_writes
from control_plane.api.deployments import deployments_router
from control_plane.api.dreams import dreams_router
from control_plane.api.enroll_routes import enroll_router, operator_router
from control_plane.api.environments import environments_router
from control_plane.api.errors import install_error_handlers
from control_plane.api.file_routes import files_router
from control_plane.api.fleet import FleetView
from control_plane.api.health import ReadinessCheck, health_router
from control_plane.api.memory_stores import memory_stores_router
from control_plane.api.metrics import metrics_router
from control_plane.api.multipart import MULTIPART_OVERHEAD_BYTES
from control_plane.api.operations import operations_router
from control_plane.api.session_events import events_router
from control_plane.api.session_resources import session_resources_router
from control_plane.api.sessions import sessions_router
from control_plane.api.skill_routes import skills_router
from control_plane.api.skill_upload import SKILL_PART_OVERHEAD_BYTES
from control_plane.api.streaming import StreamSlots
from control_plane.api.threads import threads_router
from control_plane.api.tunnels import tunnels_router
from control_plane.api.unrouted import UnroutedPaths
from control_plane.api.vaults import vaults_router
from control_plane.api.webhook_endpoints import webhook_endpoints_router
from control_plane.api.work_queue import work_queue_router
from control_plane.api.worker_credentials import WorkerCredentials
from control_plane.blobs import BlobStore
from control_plane.bus import EventBus
from control_plane.deployments import DeploymentService, no_listener
from control_plane.dreams import DreamService, DreamWaker, NullDreamWaker
from control_plane.enroll import EnrollmentService
from control_plane.environments import EnvironmentService
from control_plane.files import DEFAULT_MAX_FILE_BYTES, FileService
from control_plane.keys import ApiKeyService
from control_plane.mcp_tunnels import DEFAULT_BASE_DOMAIN, TunnelService
from control_plane.memory import MemoryService
from control_plane.metering import ControlPlaneMetrics
from control_plane.outbound import OutboundGuard
from control_plane.sandboxes import SandboxGateway, SandboxService
from control_plane.session_runner import SessionRunner
from control_plane.sessions.repository_tokens import RepositoryTokens
from control_plane.sessions.service import SessionService
from control_plane.sessions.usage import ModelPrice
from control_plane.skills import SkillLimits, SkillService
from control_plane.store.base import Store
from control_plane.tunnel import WS_TUNNEL_PATH, EdgeRegistry, WsTunnelEndpoint
from control_plane.vault.components import Vault
from control_plane.webhooks import (
    DeploymentRunWebhooks,
    EndpointSecrets,
    EndpointService,
    SessionLifecycleWebhooks,
    WebhookConfig,
    WebhookOutbox,
)
from control_plane.work import EnvironmentKeys, WorkQueue, WorkQueueConfig
from control_plane.work.service import DEFAULT_LEASE_TTL_S
from outpost_wire.logfmt import log_context
from outpost_wire.version import SOFTWARE_VERSION

__all__ = [
    "ApiConfig",
    "ApiServices",
    "NullRunner",
    "RequestIdMiddleware",
    "create_app",
    "deployment_service",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ApiConfig:
    """Limits and timings of the HTTP API."""

    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES  # larger request bodies get a 413
    max_content_body_bytes: int = DEFAULT_MAX_CONTENT_BODY_BYTES  # the same, for routes with content
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES  # an uploaded file's cap (413 past it)
    skill_limits: SkillLimits = field(default_factory=SkillLimits)  # a skill upload's caps
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S  # a body that stops arriving this long: 408
    stream_ping_interval_s: float = 15.0  # keep-alive frames on idle event streams
    stream_max_per_key: int = 200  # open event streams per API key (429 past it)
    stream_max_total: int = 2000  # open event streams in all (503 past it)
    metrics_public: bool = False  # serve /metrics without an API key
    key_cache_ttl_s: float = KEY_CACHE_TTL_S  # how long a key record read from the store is trusted
    work_lease_ttl_s: int = DEFAULT_LEASE_TTL_S  # a work item's lease (worker-run environments)


class NullRunner:
    """A :class:`SessionRunner` for an API without a harness: input is recorded, nothing runs."""

    async def wake(self, session_id: str) -> None:
        log.debug("no harness attached; session %s stays as it is", session_id)

    async def session_ended(self, session_id: str) -> None:
        log.debug("no harness attached; nothing to stop for session %s", session_id)


@dataclass(frozen=True)
class ApiServices:
    store: Store
    enrollment: EnrollmentService
    registry: EdgeRegistry
    gateway: SandboxGateway  # the sandbox routes call through it (the metered gateway, served)
    clock: Callable[[], datetime]
    tunnel_address: str | None
    bus: EventBus = field(default_factory=EventBus)
    runner: SessionRunner = field(default_factory=NullRunner)
    config: ApiConfig = field(default_factory=ApiConfig)
    vault: Vault | None = None  # None: the /v1/vaults routes answer 503
    blobs: BlobStore | None = None  # uploaded files' bytes; None: the /v1/files routes answer 503
    metrics: ControlPlaneMetrics | None = None  # None: no /metrics route
    tunnel_ws: WsTunnelEndpoint | None = None  # the WebSocket tunnel; None: not served
    control_plane_id: str = ""  # this process, as edge listings name the holder of a tunnel
    readiness: Mapping[str, ReadinessCheck] = field(default_factory=dict)  # /readyz's checks
    outbound: OutboundGuard = field(default_factory=OutboundGuard)  # checks URLs the API stores
    model_prices: Mapping[str, ModelPrice] | None = None  # sessions' list prices (None: the defaults)
    tunnel_base_domain: str = DEFAULT_BASE_DOMAIN  # MCP tunnels' domains are made under it
    dreams: DreamWaker = field(default_factory=NullDreamWaker)  # runs dreams (None-like: they wait)
    webhooks: WebhookOutbox | None = None  # None: no session.created/archived/deleted webhooks
    webhook_config: WebhookConfig = field(default_factory=WebhookConfig)


class RequestIdMiddleware:
    """ASGI middleware: a ``request-id`` for every HTTP request, in the response's headers, the
    request's state (``request.state.request_id``) and the log context while it is served.

    Pure ASGI (it wraps ``send``), not ``@app.middleware("http")``: Starlette's
    ``BaseHTTPMiddleware`` runs the app in a task of its own and relays every body chunk through
    a memory stream, which cost a fifth of a turn's CPU on event streams."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = "req_" + secrets.token_hex(12)
        scope.setdefault("state", {})["request_id"] = rid
        header = (b"request-id", rid.encode())

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() != b"request-id"]
                message = {**message, "headers": [*headers, header]}
            await send(message)

        with log_context(request_id=rid):
            await self.app(scope, receive, send_with_id)


def _session_service(services: ApiServices, agents: AgentService, work: WorkQueue) -> SessionService:
    tokens = RepositoryTokens(services.vault.service.keyring) if services.vault is not None else None
    return SessionService(
        services.store,
        services.bus,
        services.runner,
        services.clock,
        tokens=tokens,
        outbound=services.outbound,
        agents=agents,
        prices=services.model_prices,
        files=_file_service(services),  # outcomes: file rubrics
        hooks=SessionLifecycleWebhooks(services.store, services.webhooks) if services.webhooks else None,
        work=work,  # worker-run environments: a session's input queues a work item
    )


def _work_queue(services: ApiServices) -> WorkQueue:
    config = WorkQueueConfig(lease_ttl_s=services.config.work_lease_ttl_s)
    return WorkQueue(services.store, services.clock, config)


def deployment_service(services: ApiServices, sessions: SessionService | None = None) -> DeploymentService:
    """The deployments' service on the API's parts (the API's routes and the scheduler use one each)."""
    agents = AgentService(services.store, services.clock, outbound=services.outbound)
    sessions = sessions or _session_service(services, agents, _work_queue(services))
    on_run = DeploymentRunWebhooks(services.store, services.webhooks) if services.webhooks else no_listener
    return DeploymentService(
        services.store, sessions, agents, services.clock, prices=services.model_prices, on_run=on_run
    )


def _environment_service(services: ApiServices) -> EnvironmentService:
    registry = services.registry

    def connected_here() -> set[str]:  # counted at once, before presence records them
        return {c.edge_id for c in registry.all_connections() if c.is_open}

    return EnvironmentService(services.store, services.clock, connected_here=connected_here)


def _file_service(services: ApiServices) -> FileService | None:
    if services.blobs is None:
        return None
    max_bytes = services.config.max_file_bytes
    return FileService(services.store, services.blobs, services.clock, max_file_bytes=max_bytes)


def _upload_max_body_bytes(config: ApiConfig) -> int:
    """The body cap of the upload routes: the larger of a file's and a skill's (each route counts
    its own bytes against its own cap as they arrive)."""
    skill = config.skill_limits
    skill_body = (
        skill.max_total_bytes + skill.max_files * SKILL_PART_OVERHEAD_BYTES + MULTIPART_OVERHEAD_BYTES
    )
    return max(config.max_file_bytes + MULTIPART_OVERHEAD_BYTES, skill_body)


def _tunnel_service(services: ApiServices) -> TunnelService | None:
    if services.vault is None:  # the tokens are sealed with the vault's keyring
        return None
    keyring = services.vault.service.keyring
    return TunnelService(services.store, keyring, services.clock, base_domain=services.tunnel_base_domain)


def _skill_service(services: ApiServices) -> SkillService | None:
    if services.blobs is None:
        return None
    return SkillService(services.store, services.blobs, services.clock, limits=services.config.skill_limits)


def _endpoint_service(services: ApiServices) -> EndpointService | None:
    if services.vault is None:
        return None
    return EndpointService(
        services.store,
        EndpointSecrets(services.vault.service.keyring),
        services.clock,
        outbound=services.outbound,
        config=services.webhook_config,
        changed=services.webhooks.forget_endpoints if services.webhooks is not None else None,
    )


def create_app(services: ApiServices) -> FastAPI:
    app = FastAPI(title="Outpost", version=SOFTWARE_VERSION, docs_url=None, redoc_url=None)
    install_error_handlers(app)
    app.add_middleware(
        BodyLimitMiddleware,
        max_body_bytes=services.config.max_body_bytes,
        content_max_body_bytes=services.config.max_content_body_bytes,
        upload_max_body_bytes=_upload_max_body_bytes(services.config),
        body_timeout_s=services.config.body_timeout_s,
    )
    public = PUBLIC_PATHS | ({"/metrics"} if services.config.metrics_public else set())
    # outside the body limit
    keys = ApiKeyCache(services.store, services.config.key_cache_ttl_s)  # shared with the key routes
    workers = WorkerCredentials(services.store, services.clock)  # environment keys, sessions tokens
    app.add_middleware(
        ApiKeyGate, store=services.store, public=public, clock=services.clock, cache=keys, workers=workers
    )

    app.add_middleware(RequestIdMiddleware)  # outermost

    app.include_router(_authed_routes(services, keys))
    app.include_router(health_router(services.readiness))  # /healthz and /readyz
    # The enrollment token is the credential for enrolling; everything else needs an API key.
    app.include_router(enroll_router(services.enrollment, tunnel_address=services.tunnel_address))
    if services.metrics is not None:
        auth = None if services.config.metrics_public else require_admin_key("reading /metrics")
        app.include_router(metrics_router(services.metrics, auth))
    if services.tunnel_ws is not None:  # edges authenticate with a PoP token, not an API key
        app.router.add_websocket_route(WS_TUNNEL_PATH, services.tunnel_ws.handle)
    app.router.default = UnroutedPaths(app.router.default)  # a typed 404 naming the feature
    return app


def _authed_routes(services: ApiServices, keys: ApiKeyCache) -> APIRouter:
    """Every route that needs an API key, each family's router on its service."""
    authed = APIRouter(dependencies=[Depends(ApiKeyAuth(services.store, services.clock, keys))])
    store, clock = services.store, services.clock
    agents = AgentService(store, clock, outbound=services.outbound)
    work = _work_queue(services)
    sessions = _session_service(services, agents, work)
    # Routes are matched in order, one by one: the ones every turn uses (send events, stream) first.
    streams = StreamSlots(services.config.stream_max_per_key, services.config.stream_max_total)
    ping_s = services.config.stream_ping_interval_s
    authed.include_router(
        events_router(sessions, store, services.bus, clock, ping_interval_s=ping_s, streams=streams)
    )
    authed.include_router(
        threads_router(sessions, store, services.bus, clock, ping_interval_s=ping_s, streams=streams)
    )
    fleet = FleetView(services.registry, store, clock, services.control_plane_id)
    authed.include_router(operator_router(services.enrollment, fleet=fleet, clock=clock))
    authed.include_router(work_queue_router(work, EnvironmentKeys(store, clock), store))
    authed.include_router(environments_router(_environment_service(services)))
    authed.include_router(agents_router(agents), dependencies=[Depends(unscoped_writes("changing agents"))])
    authed.include_router(sessions_router(sessions))
    authed.include_router(session_resources_router(sessions))
    authed.include_router(
        operations_router(SandboxService(store, services.registry, services.gateway, clock))
    )
    authed.include_router(
        vaults_router(services.vault), dependencies=[Depends(unscoped_writes("changing vaults"))]
    )
    authed.include_router(
        files_router(_file_service(services)), dependencies=[Depends(unscoped_writes("changing files"))]
    )
    authed.include_router(
        skills_router(_skill_service(services)), dependencies=[Depends(unscoped_writes("changing skills"))]
    )
    authed.include_router(api_keys_router(ApiKeyService(store, clock, forget=keys.forget)))
    authed.include_router(
        memory_stores_router(MemoryService(store, clock)),
        dependencies=[Depends(unscoped_writes("changing memory stores"))],
    )
    authed.include_router(
        tunnels_router(_tunnel_service(services)), dependencies=[Depends(unscoped_writes("changing tunnels"))]
    )
    authed.include_router(deployments_router(deployment_service(services, sessions)))
    authed.include_router(dreams_router(DreamService(store, clock, services.dreams)))
    authed.include_router(
        webhook_endpoints_router(_endpoint_service(services)),
        dependencies=[Depends(unscoped_writes("changing webhook endpoints"))],
    )
    return authed
