"""``EdgeAgent``: the edge daemon, composed from its parts.

    config + identity ─► DockerRuntime ─► SandboxManager ─┐
                         GitService ──────┘ (clones, relay)│
                         ResultJournal ───────────────────┼─► Dispatcher ─► Link ─► control plane
                         Policy ──────────────────────────┘

The link dials out, and a renewal task (:mod:`edge_agent.renew`) renews the edge's client
certificate before it expires; the next connection presents the new one. The only listener is
the optional observability endpoint (:mod:`edge_agent.observe`: ``/metrics``, ``/healthz``,
``/readyz``, ``/status``, loopback by default). Lifecycle: ``async with EdgeAgent(config) as agent`` starts
everything (reconciling the containers it owns first, so nothing leaks across a ``kill -9``);
:meth:`EdgeAgent.drain` finishes in-flight calls within the grace period; leaving the
context closes everything, idempotently.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from datetime import timedelta
from functools import partial
from types import TracebackType
from typing import Any

from edge_agent.config import EdgeConfig
from edge_agent.connection import Dialer, Link, Transport
from edge_agent.dispatch import Dispatcher
from edge_agent.errors import EdgeRefused
from edge_agent.git import EdgeCredentials, GitService, RelayRoutes, load_or_create_key
from edge_agent.identity import Identity
from edge_agent.journal import ResultJournal
from edge_agent.mcp import McpCatalog, McpHub
from edge_agent.mcp.secrets import read_tunnel_tokens
from edge_agent.observe import EdgeMetrics, ObserveServer
from edge_agent.policy import Policy
from edge_agent.renew import CertificateRenewer, RenewalSchedule, renew_certificate, renewal_urls, spread_for
from edge_agent.sandbox import DockerRuntime, SandboxManager
from edge_agent.sandbox.content_mounts import ContentMounts
from edge_agent.sandbox.memory_mounts import MemoryMounts
from edge_agent.status import status_document
from outpost_wire import sdnotify
from outpost_wire.frames import PROTOCOL_VERSION, Hello
from outpost_wire.session import SessionConfig
from outpost_wire.version import SOFTWARE_VERSION

__all__ = ["TOOLS", "EdgeAgent"]

log = logging.getLogger(__name__)

#: The watchdog keeps being petted this long without a tunnel (a control plane restarting or under
#: maintenance), so that an outage on the far side does not make every edge restart.
WATCHDOG_TUNNEL_GRACE_MIN_S = 300.0

TOOLS = ("bash", "read", "write", "edit", "glob", "grep")
_JOURNAL_PRUNE_INTERVAL_S = 3600.0
_MCP_START_WAIT_S = 5.0  # how long start-up waits for MCP servers before dialling out
GIT_RELAY_KEY_FILE = "git-relay.key"  # in state_dir: the key of the sandboxes' relay tokens
GIT_SCRATCH_DIR = "git-scratch"  # in state_dir: clones on their way into a workspace
MEMORY_DIR = "memory"  # in state_dir: sessions' memory stores, bind-mounted into their sandboxes
CONTENT_DIR = "content"  # in state_dir: the files and skills cache, and sessions' mounts of them


class EdgeAgent:
    def __init__(self, config: EdgeConfig, *, identity: Identity | None = None) -> None:
        self.config = config
        self.policy: Policy = config.load_policy()
        self.identity = identity or Identity.load(config.state_dir)
        cp = config.control_plane
        # gRPC, WebSocket or auto; through the configured or environment proxy (the doctor dials
        # through the very same routes: Dialer.for_config)
        self.dialer = Dialer.for_config(
            config, self.identity, max_frame_bytes=SessionConfig().max_frame_bytes
        )
        first = self.dialer.routes(0)
        self.tunnel_address = first[0].target if first else ""
        self.runtime: DockerRuntime | None = None
        self.manager: SandboxManager | None = None
        self.journal: ResultJournal | None = None
        self.link: Link | None = None
        self.mcp: McpHub | None = None
        self._tunnel_tokens: tuple[str, ...] = ()  # MCP tunnel connector tokens (secrets)
        self.metrics = EdgeMetrics(
            edge_id=self.identity.edge_id,
            tools=TOOLS,
            mcp_servers=[server.name for server in config.mcp_servers],
        )
        self.metrics.bind(certificate_not_after=lambda: self.identity.not_after.timestamp())
        ident = config.identity
        self.renewer = CertificateRenewer(
            self.identity,
            schedule=RenewalSchedule(
                renew_before=timedelta(days=ident.renew_before_days),
                check_interval_s=ident.renew_check_interval_s,
                retry_initial_s=ident.renew_retry_initial_s,
                retry_max_s=ident.renew_retry_max_s,
                spread=spread_for(self.identity.edge_id),
            ),
            urls=renewal_urls([a.url for a in cp.addresses] or [cp.url], self.identity),
            renew=partial(renew_certificate, proxy_url=config.connection.proxy_url),
            on_renewed=self._use_identity,
            on_attempt=self.metrics.certificate_renewal,
        )
        self.observe: ObserveServer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._link_task: asyncio.Task[None] | None = None
        self._closed = False
        self.notifier = sdnotify.Notifier.from_environ(os.environ)  # systemd Type=notify, if any

    @property
    def edge_id(self) -> str:
        return self.identity.edge_id

    def status(self) -> dict[str, Any]:
        """The ``/status`` document (:mod:`edge_agent.status`)."""
        return status_document(
            identity=self.identity,
            name=self.config.name,
            link=self.link,
            dialer=self.dialer,
            sandboxes_live=self.manager.in_use() if self.manager is not None else 0,
            sandbox_capacity=self.policy.max_sandboxes,
        )

    async def __aenter__(self) -> EdgeAgent:
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
        # a bad token file stops the start here, before anything runs
        self._tunnel_tokens = await asyncio.to_thread(read_tunnel_tokens, cfg.tunnel_token_files)
        self.journal = ResultJournal(cfg.state_dir / "journal.db", cfg.results.retention_s)
        await self.journal.__aenter__()
        self.runtime = DockerRuntime(base_url=cfg.sandbox.docker_url)
        self.git = await self._git_service()
        self.manager = SandboxManager(
            self.runtime,
            edge_id=self.edge_id,
            idle_pause_s=cfg.sandbox.idle_pause_s,
            max_sandboxes=self.policy.max_sandboxes,
            default_limits=self.policy.resolve(),
            name_prefix=cfg.sandbox.name_prefix,
            git=self.git,
            on_provisioned=self.metrics.sandbox_provisioned,
            workspace_quota_bytes=self.policy.limits.max_workspace_mb * 1024 * 1024,
            warm_pool_size=cfg.sandbox.warm_pool_size,
            memory=MemoryMounts(cfg.state_dir / MEMORY_DIR),
            content=ContentMounts(cfg.state_dir / CONTENT_DIR, cfg.sandbox.content_cache_bytes),
        )
        await self.manager.start()
        if cfg.mcp_servers:
            self.mcp = McpHub(cfg.mcp_servers, self.policy.mcp, on_change=self._catalog_changed)
            await self.mcp.start(wait_s=_MCP_START_WAIT_S)
        dispatcher = Dispatcher(
            self.manager,
            self.policy,
            self.journal,
            mcp=self.mcp,
            memory=self.manager.memory,
            content=self.manager.content,
        )
        self.link = Link(
            connect=self._connect,
            hello=self._hello,
            handler=self.metrics.instrument(dispatcher),
            config=cfg.connection,
            on_peer_drain=self.dialer.rotate,
            sandboxes_in_use=lambda: self.manager.in_use() if self.manager else 0,
            session_config=SessionConfig(
                heartbeat_interval_s=cfg.connection.heartbeat_interval_s,
                heartbeat_timeout_s=cfg.connection.heartbeat_timeout_s,
            ),
        )
        self.metrics.bind(link=self.link, manager=self.manager, capacity=self.policy.max_sandboxes)
        await self._start_observe()
        self._link_task = asyncio.create_task(self.link.run(), name="edge-link")
        self._tasks.append(self._link_task)
        self._tasks.append(asyncio.create_task(self._prune_journal(), name="edge-journal-prune"))
        self._tasks.append(asyncio.create_task(self.renewer.run(), name="edge-certificate-renewal"))
        c = cfg.connection  # the watchdog tolerates reconnects and a control plane's maintenance,
        # not a link stuck down for good (a restart is then worth a try)
        supervise = sdnotify.supervise(
            self.notifier,
            self.link.connected,
            interval_s=sdnotify.watchdog_interval_s(os.environ),
            grace_s=max(
                WATCHDOG_TUNNEL_GRACE_MIN_S,
                2 * (c.backoff_max_s + c.connect_timeout_s) + c.heartbeat_timeout_s,
            ),
        )
        self._tasks.append(asyncio.create_task(supervise, name="edge-sdnotify"))
        log.info(
            "edge %s (%s) started: tunnel %s, policy %s, up to %d sandboxes, warm pool of %d",
            self.edge_id,
            cfg.name,
            self.tunnel_address,
            self.policy.digest(),
            self.policy.max_sandboxes,
            min(cfg.sandbox.warm_pool_size, self.policy.max_sandboxes),
        )

    async def _start_observe(self) -> None:
        if self.config.observability.listen is None:
            return
        host, port = self.config.observability.address
        server = ObserveServer(
            host, port, registry=self.metrics.registry, readiness=self.metrics.readiness, status=self.status
        )
        try:
            await server.start()
        except OSError as exc:
            log.error(
                "observability endpoint not started: cannot listen on %s: %s "
                "(change observability.listen, or set it to null)",
                self.config.observability.listen,
                exc.strerror or exc,
            )
            return
        self.observe = server

    async def _git_service(self) -> GitService:
        """Clones and the relay; the edge's git credentials are checked here (a bad secret file
        stops the start with a message naming it)."""
        cfg = self.config
        credentials = EdgeCredentials(cfg.git.credentials)
        await asyncio.to_thread(credentials.check)
        cfg.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        key = await asyncio.to_thread(load_or_create_key, cfg.state_dir / GIT_RELAY_KEY_FILE)
        return GitService(
            cfg.git,
            scratch_dir=cfg.state_dir / GIT_SCRATCH_DIR,
            routes=RelayRoutes(key),
            credentials=credentials,
            policy=self.policy.repositories,
        )

    def _use_identity(self, identity: Identity) -> None:
        """A renewed certificate: the next connection (gRPC or WebSocket) presents it; the tunnel
        that is up stays up."""
        self.identity = identity
        self.dialer.set_identity(identity)

    async def _connect(self) -> Transport:
        return await self.dialer.connect()

    def _catalog_json(self) -> tuple[str, str]:
        if self.mcp is None:
            return "", ""
        catalog = self.mcp.catalog()
        return catalog.digest, json.dumps(catalog.to_dict(), separators=(",", ":"))

    def _catalog_changed(self, _catalog: McpCatalog) -> None:
        if self.link is not None:
            digest, text = self._catalog_json()
            self.link.send_catalog(digest, text)

    def _hello(self) -> Hello:
        digest, catalog = self._catalog_json()
        return Hello(
            edge_id=self.edge_id,
            software_version=SOFTWARE_VERSION,
            protocol_version=PROTOCOL_VERSION,
            capabilities=(
                "provision",
                "destroy",
                "egress",
                "git",
                *(("mcp",) if self.mcp is not None else ()),
                *(f"tool:{t}" for t in TOOLS),
            ),
            policy_digest=self.policy.digest(),
            sandbox_capacity=self.policy.max_sandboxes,
            sandboxes_in_use=self.manager.in_use() if self.manager else 0,
            environment_id=self.identity.environment_id,
            mcp_catalog_digest=digest,
            mcp_catalog_json=catalog,
            tunnel_tokens=self._tunnel_tokens,
        )

    async def _prune_journal(self) -> None:
        assert self.journal is not None
        while True:
            removed = await self.journal.prune()
            if removed:
                log.info("pruned %d finished tool-call records past retention", removed)
            await asyncio.sleep(_JOURNAL_PRUNE_INTERVAL_S)

    async def wait_connected(self, timeout_s: float) -> bool:
        assert self.link is not None
        try:
            await asyncio.wait_for(self.link.connected.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def drain(self) -> None:
        """Finish in-flight calls within the configured grace period and stop the link."""
        self.notifier.stopping()
        if self.link is not None:
            log.info(
                "draining: up to %.0f s for %d call(s) in flight",
                self.config.connection.drain_grace_s,
                self.link.in_flight,
            )
            await self.link.drain(self.config.connection.drain_grace_s)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.link is not None:
            await self.link.drain(0)
        if self.observe is not None:
            await self.observe.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.mcp is not None:
            await self.mcp.close()
        if self.manager is not None:
            await self.manager.close()
        if self.git is not None:
            await self.git.close()
        if self.runtime is not None:
            await self.runtime.close()
        if self.journal is not None:
            await self.journal.close()

    async def run_until_signalled(self) -> None:
        """Serve until SIGTERM or SIGINT, then drain and return. Raises :class:`EdgeRefused`
        when the control plane refuses this edge for good (revoked, unknown): the link has
        stopped, and the process should exit (code 3) rather than be restarted."""
        assert self._link_task is not None, "start() first"
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        signalled = asyncio.create_task(stop.wait(), name="edge-wait-signal")
        try:
            await asyncio.wait({signalled, self._link_task}, return_when=asyncio.FIRST_COMPLETED)
            if stop.is_set():
                log.info("signal received; draining")
                await self.drain()
            elif self._link_task.done() and not self._link_task.cancelled():
                self._link_task.result()  # the link failed (a bug): let the process say so and exit
        finally:
            signalled.cancel()
            for sig in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(Exception):
                    loop.remove_signal_handler(sig)
        if self.link is not None and self.link.refusal is not None:
            raise EdgeRefused(self.link.refusal)
