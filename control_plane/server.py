"""``ControlPlane``: the control plane process, composed from its parts.

    store (SQLite) ──┬─► EnrollmentService (CA) ──► HTTP API (FastAPI + uvicorn)
                     │                          ├─► tunnel server (gRPC, mTLS) ──► EdgeRegistry
                     │                          └─► WebSocket tunnel (HTTP port, /v1/tunnel/ws, PoP) ─┘
                     └──────────────────────────────────────────────────────────► EdgeGateway

``async with ControlPlane(config) as cp`` starts everything on the configured ports (0 = pick a
free one; read ``cp.http_url`` and ``cp.tunnel_address`` back). Leaving the context drains the
edges (they reconnect elsewhere) and closes everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import uvicorn

from control_plane.admin_key import ADMIN_KEY_FILE, ensure_admin_key
from control_plane.api.app import ApiConfig, ApiServices, create_app, deployment_service
from control_plane.blobs import FilesystemBlobStore
from control_plane.bus import EventBus
from control_plane.config import ControlPlaneConfig
from control_plane.deployments import DeploymentScheduler
from control_plane.dreams import DreamScheduler
from control_plane.edge_counts import count_edges
from control_plane.enroll import CertificateAuthority, EnrollmentService
from control_plane.enroll.http_tls import HttpTls, prepare_http_tls
from control_plane.enroll.nonces import SharedNonces
from control_plane.environments.networking import egress_of
from control_plane.errors import ListenFailed, NotFound
from control_plane.files import FileService
from control_plane.harness import AnthropicModelClient, Harness
from control_plane.harness.memory_writeback import contents_reader
from control_plane.http_limits import http_protocol
from control_plane.log_follower import LogFollower
from control_plane.mcp import Credentials, McpRouter, no_credentials
from control_plane.mcp_tunnels import TunnelService
from control_plane.metering import ControlPlaneMetrics, MeteredGateway, MeteredModelClient
from control_plane.model_api_key import model_api_key
from control_plane.outbound import OutboundGuard
from control_plane.retention import Pruner
from control_plane.sessions.memory_resources import memory_mounts
from control_plane.sessions.repository_tokens import RepositoryTokens, list_session_resources, to_wire
from control_plane.sessions.session_content import content_mounts, open_blob
from control_plane.sessions.thread_views import sandbox_owner
from control_plane.skills import SkillLimits
from control_plane.store import open_store
from control_plane.store.base import EdgeRecord, Store
from control_plane.tunnel import (
    EdgeGateway,
    EdgePresence,
    EdgeRegistry,
    GatewayConfig,
    GrpcTunnelServer,
    WsTunnelEndpoint,
)
from control_plane.tunnel.recheck import EdgeRecheck
from control_plane.vault import CapabilitySigner, FileKek, Keyring, Vault
from control_plane.webhooks import (
    EndpointSecrets,
    RefreshFailedWebhooks,
    SessionWebhookFeed,
    WebhookDeliverer,
    WebhookOutbox,
)
from outpost_wire.admission import refusal_message
from outpost_wire.channel import grpc_message_limit
from outpost_wire.errors import ErrorCode
from outpost_wire.frames import BlobMount, Provision
from outpost_wire.pop import audience_for
from outpost_wire.session import SessionConfig
from outpost_wire.version import SOFTWARE_VERSION

__all__ = ["ADMIN_KEY_FILE", "VAULT_CAPABILITY_KEY_FILE", "ControlPlane"]

log = logging.getLogger(__name__)

VAULT_CAPABILITY_KEY_FILE = "vault-capability.key"  # the broker's HMAC key (not the KEK)
BLOBS_DIR = "blobs"  # uploaded files' bytes (control_plane.blobs)
_SPEC_TTL_S = 2.0
#: How often the server certificates are checked: ours is re-issued when less than 30 days of it
#: are left, an operator's is reloaded from its files (a certbot renewal, say); no restart needed.
SERVER_CERT_CHECK_S = 6 * 3600.0
_WS_PING_INTERVAL_S = 25.0  # below the common 60 s idle timeout of proxies and load balancers
_WS_PING_TIMEOUT_S = 20.0


def _utcnow() -> datetime:
    return datetime.now(UTC)


class ControlPlane:
    def __init__(self, config: ControlPlaneConfig) -> None:
        self.config = config
        self.id = "cp_" + secrets.token_hex(6)
        self.store: Store | None = None
        self.ca: CertificateAuthority | None = None
        self.enrollment: EnrollmentService | None = None
        self.metrics = ControlPlaneMetrics(self.id)
        self.registry = EdgeRegistry(on_edge_ready=self.metrics.edge_ready)
        self.metrics.bind(edges=self.registry)
        # The gateway itself: the composition drains it and gives it the store's placements.
        self.gateway = EdgeGateway(
            self.registry,
            GatewayConfig(reconnect_grace_s=config.reconnect_grace_s, edge_wait_s=config.edge_wait_s),
            sandbox_spec=self._sandbox_spec,
            on_move=self.metrics.sandbox_moved,
            blob_source=self._open_blob,
        )
        # What the harness, the MCP router and the API's sandbox routes call: the same, measured.
        self.tool_gateway = MeteredGateway(self.gateway, self.metrics)
        self._specs: dict[str, tuple[float, Provision]] = {}
        self.tunnel: GrpcTunnelServer | None = None
        self.presence: EdgePresence | None = None
        self.bus = EventBus()
        self.follower: LogFollower | None = None  # appends by other processes reach streams here
        self.pruner: Pruner | None = None
        self.scheduler: DeploymentScheduler | None = None
        self.webhooks: WebhookOutbox | None = None  # webhooks: the outbox others emit() into
        self.webhook_deliverer: WebhookDeliverer | None = None
        self.webhook_feed: SessionWebhookFeed | None = None  # session.* webhooks from the log
        # Uploaded files' bytes, beside the rest of the data (shared by replicas: docs/scale-out.md).
        self.blobs = FilesystemBlobStore(config.data_dir / BLOBS_DIR)
        self.model: AnthropicModelClient | None = None
        self.harness: Harness | None = None
        self.dreams: DreamScheduler | None = None  # runs dreams (docs/dreams.md)
        self.mcp: McpRouter | None = None  # the harness's route to agents' MCP servers
        self.tunnels: TunnelService | None = None  # MCP tunnels, which the MCP router reads
        self.vault: Vault | None = None  # vault: credentials for MCP servers the control plane calls
        self._vault_http: httpx.AsyncClient | None = None  # vault: OAuth token endpoints
        # Every URL dialled for a user (token endpoints, MCP servers) is checked by this one guard.
        self.outbound = OutboundGuard(config.outbound_allow_networks)
        self._http: uvicorn.Server | None = None
        self._http_task: asyncio.Task[None] | None = None
        self._http_socket: socket.socket | None = None
        self.http_url = ""
        self.tunnel_address = ""
        self._closed = False
        self._server_cert_pem = b""
        self._cert_refresher: asyncio.Task[None] | None = None
        self._recheck: asyncio.Task[None] | None = None

    async def __aenter__(self) -> ControlPlane:
        try:
            await self.start()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def start(self) -> None:
        cfg = self.config
        cfg.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.store = open_store(cfg.effective_store_url, options=cfg.store_options)
        self.gateway.placements = self.store  # a session goes back to its sandbox's edge, anywhere
        self.gateway.memory_contents = contents_reader(self.store)  # memory stores, to sandboxes
        self.ca = CertificateAuthority.load_or_create(cfg.data_dir / "ca")
        self.enrollment = EnrollmentService(self.store, self.ca, clock=_utcnow)
        self.enrollment.add_revocation_listener(self._on_revoked)
        await self._ensure_admin_key()
        # -- vault: KEK from its key file (the default one is created 0600 at first start; a
        # configured one must exist), the broker's capability key beside the data --
        kek_load = FileKek.load if cfg.vault_key_file else FileKek.load_or_create
        self._vault_http = self.outbound.http_client(timeout_s=15.0)
        keyring = Keyring(kek_load(cfg.effective_vault_key_file))
        self.vault = Vault.create(
            self.store,
            keyring,
            CapabilitySigner.load_or_create(cfg.data_dir / VAULT_CAPABILITY_KEY_FILE),
            self._vault_http,
            _utcnow,
            outbound=self.outbound,
        )

        session_config = SessionConfig(
            max_frame_bytes=cfg.max_frame_bytes,
            heartbeat_interval_s=cfg.heartbeat_interval_s,
            heartbeat_timeout_s=cfg.heartbeat_timeout_s,
            max_reassembly_bytes=cfg.max_reassembly_bytes,
        )
        key_pem, cert_pem = self.ca.issue_server_cert(list(cfg.tls_hostnames), list(cfg.tls_ips))
        self._server_cert_pem = cert_pem
        self.tunnel = GrpcTunnelServer(
            registry=self.registry,
            authenticate=self._authenticate,
            server_key_pem=key_pem,
            server_cert_pem=cert_pem,
            ca_cert_pem=self.ca.ca_cert_pem,
            session_config=session_config,
            control_plane_id=self.id,
            software_version=SOFTWARE_VERSION,
            host=cfg.tunnel_host,
            port=cfg.tunnel_port,
        )
        port = await self.tunnel.start()
        self.tunnel_address = cfg.public_tunnel_address or f"{cfg.tunnel_host}:{port}"
        # Other processes on the store learn which edges' tunnels this one holds (placement).
        self.presence = EdgePresence(self.store, self.registry, self.id)
        await self.presence.start()
        self.follower = LogFollower(self.store, self.bus)
        await self.follower.start()
        await asyncio.to_thread(self.blobs.remove_stale)  # what uploads cut short by a crash left
        files = FileService(self.store, self.blobs, _utcnow, max_file_bytes=cfg.max_file_bytes)
        # retention: archived sessions, spent tokens, expired files
        self.pruner = Pruner(self.store, cfg.retention, files=files)
        await self.pruner.start()
        await self._start_webhooks(EndpointSecrets(keyring))

        api_key = model_api_key(cfg, os.environ)  # model_api_key_file, else $ANTHROPIC_API_KEY
        if not api_key:
            log.warning("no model API key is set: a model endpoint that needs one will refuse every request")
            api_key = "unset"
        base_url = cfg.model_base_url or os.environ.get("ANTHROPIC_BASE_URL")
        self.model = AnthropicModelClient(base_url=base_url, api_key=api_key)
        self.tunnels = TunnelService(
            self.store, self.vault.service.keyring, _utcnow, base_domain=cfg.tunnel_base_domain
        )
        self.mcp = self._mcp_router(self._vault_credentials)
        metered_model = MeteredModelClient(self.model, self.metrics)
        self.harness = Harness(
            self.store,
            self.tool_gateway,
            self.bus,
            metered_model,
            cfg.harness,
            mcp=self.mcp,
            placement=self._runs_here,
            resend_spec=self.gateway.resend_spec,
        )
        harness = self.harness
        self.metrics.bind(active_sessions=lambda: len(harness.active_sessions()))
        await self.harness.start()
        budget = cfg.harness.model_copy(update={"max_tokens": cfg.dreams.max_tokens}).context_budget
        self.dreams = DreamScheduler(self.store, metered_model, cfg.dreams, budget_tokens=budget)
        await self.dreams.start()

        app = create_app(
            services := ApiServices(
                store=self.store,
                enrollment=self.enrollment,
                registry=self.registry,
                gateway=self.tool_gateway,
                clock=_utcnow,
                tunnel_address=self.tunnel_address,
                bus=self.bus,
                runner=self.harness,
                vault=self.vault,
                blobs=self.blobs,
                outbound=self.outbound,
                model_prices=cfg.harness.model_prices,
                tunnel_base_domain=cfg.tunnel_base_domain,
                dreams=self.dreams,
                webhooks=self.webhooks,
                webhook_config=cfg.webhooks,
                config=ApiConfig(
                    max_body_bytes=cfg.http_max_body_bytes,
                    max_content_body_bytes=cfg.http_max_content_body_bytes,
                    max_file_bytes=cfg.max_file_bytes,
                    skill_limits=SkillLimits(
                        max_files=cfg.skill_max_files,
                        max_file_bytes=cfg.skill_max_file_bytes,
                        max_total_bytes=cfg.skill_max_bytes,
                    ),
                    body_timeout_s=cfg.http_body_timeout_s,
                    metrics_public=cfg.metrics_public,
                    key_cache_ttl_s=cfg.api_key_cache_ttl_s,
                    work_lease_ttl_s=cfg.work_lease_ttl_s,
                    stream_ping_interval_s=cfg.stream_ping_interval_s,
                    stream_max_per_key=cfg.stream_max_per_key,
                    stream_max_total=cfg.stream_max_total,
                ),
                metrics=self.metrics,
                control_plane_id=self.id,
                tunnel_ws=WsTunnelEndpoint(  # the same tunnel over WebSocket on this port
                    registry=self.registry,
                    authenticate=self._authenticate,
                    audience=audience_for(self.ca.ca_cert_pem),
                    session_config=session_config,
                    control_plane_id=self.id,
                    software_version=SOFTWARE_VERSION,
                    nonces=SharedNonces(self.store),  # a token works once on any process
                ),
                readiness={
                    "store": self._store_ready,
                    "tunnel": self._tunnel_ready,
                    "harness": self._harness_ready,
                },
            )
        )
        # deployments: scheduled runs (each tick once, whichever process fires it)
        self.scheduler = DeploymentScheduler(deployment_service(services), cfg.deployments)
        await self.scheduler.start()
        # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on connections of such sockets, and
        # without it every keep-alive response waited ~40 ms between its header and body writes.
        family = socket.AF_INET6 if ":" in cfg.http_host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((cfg.http_host, cfg.http_port))
        except OSError as exc:
            sock.close()
            raise ListenFailed("API", f"{cfg.http_host}:{cfg.http_port}", exc.strerror or str(exc)) from None
        self._http_socket = sock
        http_port = sock.getsockname()[1]
        self._http = uvicorn.Server(
            uvicorn.Config(
                app,
                log_config=None,
                access_log=False,
                lifespan="off",
                timeout_graceful_shutdown=5,
                # WebSocket tunnel: the same message cap as gRPC's, and our own ping cadence.
                ws_max_size=grpc_message_limit(cfg.max_frame_bytes),
                ws_ping_interval=_WS_PING_INTERVAL_S,
                ws_ping_timeout=_WS_PING_TIMEOUT_S,
                # Limits (docs/security.md): connections, slow request heads, idle keep-alives.
                http=http_protocol(cfg.http_header_timeout_s),  # httptools where installed
                limit_concurrency=cfg.http_limit_concurrency,
                timeout_keep_alive=cfg.http_timeout_keep_alive_s,
                **self._http_tls_options(),  # http_tls: TLS, client certificates optional
            )
        )
        self._http_task = asyncio.create_task(self._http.serve(sockets=[sock]), name="http")
        while not self._http.started:
            if self._http_task.done():
                self._http_task.result()
                raise RuntimeError("HTTP server exited during start-up")
            await asyncio.sleep(0.01)
        host = f"[{cfg.http_host}]" if ":" in cfg.http_host else cfg.http_host
        self.http_url = f"{'https' if cfg.http_tls else 'http'}://{host}:{http_port}"
        self._cert_refresher = asyncio.create_task(self._refresh_certificates_loop(), name="server-certs")
        recheck = EdgeRecheck(
            self.registry, self.store, interval_s=cfg.edge_recheck_interval_s, clock=_utcnow
        )
        self._recheck = asyncio.create_task(recheck.run(), name="edge-recheck")
        log.info(
            "control plane %s: API %s, tunnel %s, data %s",
            self.id,
            self.http_url,
            self.tunnel_address,
            cfg.data_dir,
        )

    async def refresh_server_certificates(self) -> bool:
        """Re-issue the tunnel's (and the HTTPS port's) server certificate if it has less than 30
        days left or its names changed, and serve the new one from the next handshake on; reload an
        operator's HTTPS certificate from its files. Connections already up keep theirs. Returns
        whether our certificate changed."""
        cfg = self.config
        assert self.ca is not None and self.tunnel is not None
        ca = self.ca
        key_pem, cert_pem = await asyncio.to_thread(
            ca.issue_server_cert, list(cfg.tls_hostnames), list(cfg.tls_ips)
        )
        changed = cert_pem != self._server_cert_pem
        if changed:
            self.tunnel.update_certificate(key_pem, cert_pem)
            self._server_cert_pem = cert_pem
            log.info("server certificate re-issued; new handshakes get the new one")
        context = self._http.config.ssl if self._http is not None else None
        if cfg.http_tls and context is not None and (changed or cfg.http_tls_cert_file is not None):
            tls = await asyncio.to_thread(self._prepare_http_tls)
            context.load_cert_chain(str(tls.cert_file), str(tls.key_file))
        return changed

    async def _refresh_certificates_loop(self) -> None:
        while True:
            await asyncio.sleep(SERVER_CERT_CHECK_S)
            try:
                await self.refresh_server_certificates()
            except Exception as exc:  # keep serving the current ones; try again at the next check
                log.warning("could not refresh the server certificates: %s", exc)

    def _prepare_http_tls(self) -> HttpTls:
        cfg = self.config
        assert self.ca is not None
        return prepare_http_tls(
            self.ca,
            cfg.data_dir,
            hostnames=list(cfg.tls_hostnames),
            ips=list(cfg.tls_ips),
            cert_file=cfg.http_tls_cert_file,
            key_file=cfg.http_tls_key_file,
        )

    def _http_tls_options(self) -> dict[str, Any]:
        """uvicorn's TLS arguments for the HTTP port (``http_tls``; none without it)."""
        cfg = self.config
        if not cfg.http_tls:
            return {}
        return self._prepare_http_tls().uvicorn_options()

    def _mcp_router(self, credentials: Credentials = no_credentials) -> McpRouter:
        """The harness's MCP router: ``edge://`` servers through the edge gateway, others called
        by the control plane itself with the headers ``credentials(session_id, url)`` gives (the
        seam for the vault's broker; no headers by default)."""
        return McpRouter(
            self.tool_gateway, credentials=credentials, outbound=self.outbound, tunnels=self.tunnels
        )

    async def _vault_credentials(self, session_id: str, url: str) -> dict[str, str]:
        """Headers for an MCP server the control plane calls itself, from the session's vaults:
        the broker issues and redeems a capability bound to the session's current lease epoch
        (the harness holding the lease is the caller), and the plaintext goes only into the
        request headers."""
        if self.vault is None or self.store is None:
            return {}
        lease = await self.store.get_lease(session_id)
        if lease is None:
            return {}
        return await self.vault.broker.mcp_headers(session_id, lease.epoch, url)

    # -- readiness (/readyz) -------------------------------------------------------------------
    async def _store_ready(self) -> str | None:
        if self.store is None:
            return "not open"
        await self.store.ping()
        return None

    async def _tunnel_ready(self) -> str | None:
        if self.tunnel is None or not self.tunnel.listening:
            return "not listening"
        if self.registry.draining:
            return "draining: this control plane is shutting down"
        return None

    async def _harness_ready(self) -> str | None:
        return None if self.harness is not None and self.harness.running else "stopped"

    async def _ensure_admin_key(self) -> None:
        """On first start, make an admin API key and leave it in a 0600 file in the data dir; never
        a second one beside a usable one (see :mod:`control_plane.admin_key`)."""
        assert self.store is not None
        await ensure_admin_key(self.store, self.config.data_dir, _utcnow())

    @property
    def admin_key_path(self) -> Path:
        return self.config.data_dir / ADMIN_KEY_FILE

    def admin_key(self) -> str:
        return self.admin_key_path.read_text().strip()

    async def _authenticate(self, der: bytes) -> EdgeRecord:
        assert self.enrollment is not None
        return await self.enrollment.authenticate_peer(der)

    async def _sandbox_spec(self, session_id: str, environment_id: str) -> Provision:
        """The sandbox a session asks its edge for: its environment's networking, and its git
        repositories with their tokens (opened here only, for this request; see
        ``control_plane.sessions.repository_tokens``)."""
        spec = await self._environment_spec(environment_id)
        assert self.store is not None
        session_id = sandbox_owner(session_id)  # a subagent thread's own sandbox: its session's resources
        everything = await list_session_resources(self.store, session_id)
        spec = replace(spec, memory_mounts=memory_mounts(everything))
        spec = replace(spec, blob_mounts=await content_mounts(self.store, session_id, everything))
        resources = [r for r in everything if r.body.get("type") not in ("memory_store", "file")]
        if not resources:
            return spec
        tokens = self._repository_tokens()
        if tokens is None:
            repositories = tuple(to_wire(res) for res in resources)
        else:
            repositories = await tokens.spec_repositories(resources)
        return replace(spec, repositories=repositories)

    async def _open_blob(self, session_id: str, mount: BlobMount) -> AsyncIterator[bytes]:
        """A file's or skill's bytes, for the gateway to push to the session's edge."""
        assert self.store is not None
        return await open_blob(self.store, self.blobs, sandbox_owner(session_id), mount)

    def _repository_tokens(self) -> RepositoryTokens | None:
        return RepositoryTokens(self.vault.service.keyring) if self.vault is not None else None

    async def _environment_spec(self, environment_id: str) -> Provision:
        """The sandbox an environment asks its edges for (its networking). Cached for a couple of
        seconds: it is read on every tool call."""
        now = time.monotonic()
        cached = self._specs.get(environment_id)
        if cached is not None and now - cached[0] < _SPEC_TTL_S:
            return cached[1]
        assert self.store is not None
        try:
            env = await self.store.get_resource("environment", environment_id)
        except NotFound:
            return Provision()
        spec = Provision(egress=egress_of(env.body.get("config")))
        self._specs[environment_id] = (now, spec)
        return spec

    async def _runs_here(self, session_id: str, environment_id: str) -> bool:
        """Whether this process should run the session (``harness.follow_tunnels``: the brain
        follows the hands' tunnel). It should if it holds the tunnel of the edge with the session's
        sandbox; it should not if another live process holds that tunnel; otherwise (no sandbox
        yet, or its edge is connected nowhere) if it holds a tunnel to any edge of the environment,
        or no edge of the environment is connected anywhere (nothing to follow: any process may run
        it, and tells the session that it has no edge)."""
        assert self.store is not None
        edge_id = await self.store.get_sandbox_edge(session_id)
        if edge_id is not None:
            if self.registry.get(edge_id) is not None:
                return True
            holder = await self.store.edge_holder(edge_id, _utcnow())
            if holder is not None and holder != self.id:
                return False
        if self.registry.for_environment(environment_id):
            return True
        counts = await count_edges(self.store, _utcnow(), environment_id=environment_id)
        return counts[environment_id].connected == 0

    def _on_revoked(self, edge_id: str) -> None:
        if self.registry.disconnect(edge_id, ErrorCode.UNAUTHENTICATED, refusal_message("revoked")):
            log.warning("edge %s revoked: its tunnel was cut", edge_id)

    async def _start_webhooks(self, endpoint_secrets: EndpointSecrets) -> None:
        """The outbox (always: the API and others emit into it); the deliverer and the session feed
        when ``webhooks.enabled`` (several processes may run them: docs/webhooks.md)."""
        assert self.store is not None
        cfg = self.config.webhooks
        # Endpoints cached for a second: every append asks (changes through this API forget it).
        self.webhooks = WebhookOutbox(self.store, _utcnow, cfg, endpoints_ttl_s=1.0)
        if not cfg.enabled:
            return
        self.webhook_deliverer = WebhookDeliverer(
            self.store, endpoint_secrets, self.outbound, _utcnow, cfg, holder=self.id
        )
        self.webhooks.wake = self.webhook_deliverer.wake
        await self.webhook_deliverer.start()
        self.webhook_feed = SessionWebhookFeed(self.store, self.webhooks)
        await self.webhook_feed.start()
        if self.vault is not None:
            self.vault.refresher.on_refresh_failed = RefreshFailedWebhooks(self.store, self.webhooks)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._cert_refresher is not None:
            self._cert_refresher.cancel()
        if self._recheck is not None:
            self._recheck.cancel()
        if self.scheduler is not None:  # no new scheduled runs while draining
            await self.scheduler.close()
        # Drain: no new calls to edges, edges told to move (they leave once their tunnel closes,
        # after the calls in flight answered); sessions stop at their next call to an edge and
        # their leases are released for the process the edges move to.
        self.gateway.start_draining()
        if self.tunnel is not None:
            self.tunnel.announce_drain(self.config.drain_grace_s)
        if self.harness is not None:
            await self.harness.close(grace_s=self.config.drain_grace_s)
        if self.dreams is not None:
            await self.dreams.close()  # claims given back: another process resumes them
        if self.tunnel is not None:
            await self.tunnel.stop(self.config.drain_grace_s)
        if self.presence is not None:
            await self.presence.close()
        if self.follower is not None:
            await self.follower.close()
        if self.pruner is not None:
            await self.pruner.close()
        for webhook_part in (self.webhook_feed, self.webhook_deliverer):
            if webhook_part is not None:
                await webhook_part.close()
        if self._http is not None and self._http_task is not None:
            self._http.should_exit = True
            with contextlib.suppress(Exception):
                await self._http_task
        if self._http_socket is not None:
            self._http_socket.close()
        if self.model is not None:
            await self.model.close()
        if self.mcp is not None:
            await self.mcp.close()
        if self._vault_http is not None:  # vault
            await self._vault_http.aclose()
        if self.store is not None:
            await self.store.close()
