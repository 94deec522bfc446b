"""``Dialer``: the link's ``connect()`` callable. Resolves the proxy, picks the transport
(:mod:`edge_agent.connection.selection`) and opens it.

In ``auto`` mode, while no transport is remembered, gRPC is tried first with a short connect
timeout (``auto_grpc_connect_timeout_s``), then WebSocket; the one that connects is remembered in
the state directory. A refusal of the edge's identity ends the attempt at once: the other
transport would be refused too.

Several control-plane addresses (``Endpoint``): the first one dialled is chosen from the edge's
id (:func:`first_endpoint`; stable across restarts, different from edge to edge) so that a fleet
of edges spreads over the control-plane replicas instead of all crowding the first address
(``control_plane.address_order: in_order`` keeps the first). ``connect`` starts at the current one
and tries each in turn, keeping the one that connected; ``rotate`` moves on to the next (the link calls it
when the control plane it was connected to drained) and says whether to dial it at once: not when
there is no other address, nor when that one drained this edge within ``drain_memory_s`` too (every
address is draining: the link then backs off instead of hopping between them in a loop).

:meth:`Dialer.for_config` is the one place that turns an edge's config and identity into
endpoints, and each endpoint's transports into :class:`Route` objects (target and proxy, from
``connection.proxy_url`` or ``https_proxy`` / ``NO_PROXY``): the daemon's link and
``outpost-edge doctor`` dial through the same routes.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from edge_agent.connection.grpc_transport import connect_grpc
from edge_agent.connection.proxy import ProxyConfig, resolve_proxy_source
from edge_agent.connection.selection import TransportKind, TransportSelector, load_choice, save_choice
from edge_agent.connection.transport import Transport, TransportError
from edge_agent.connection.ws_transport import connect_ws, tunnel_ws_url
from edge_agent.errors import ConfigError
from edge_agent.identity import Identity

if TYPE_CHECKING:  # config imports the MCP package, which uses this package's backoff
    from edge_agent.config import ConnectionConfig, EdgeConfig

__all__ = ["Dialer", "Endpoint", "Route", "endpoint_routes", "endpoints_for", "first_endpoint"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One control-plane process: its gRPC tunnel address and/or its HTTP(S) URL."""

    tunnel_address: str | None
    control_plane_url: str | None


def endpoints_for(config: EdgeConfig, identity: Identity | None) -> list[Endpoint]:
    """The control-plane endpoints of ``config``: ``control_plane.addresses`` in order, or else
    ``control_plane.tunnel_address`` / ``url``, each falling back to what enrollment stored in the
    identity. Raises ConfigError when that leaves nothing to dial."""
    cp = config.control_plane
    if cp.addresses:
        return [Endpoint(a.tunnel_address, a.url) for a in cp.addresses]
    endpoint = Endpoint(
        cp.tunnel_address or (identity.tunnel_address if identity else None),
        cp.url or (identity.control_plane_url if identity else None),
    )
    if not endpoint.tunnel_address and not endpoint.control_plane_url:
        raise ConfigError(
            "no control plane configured: set control_plane.url (and tunnel_address) in the config, "
            "or register this edge (outpost-edge register)"
        )
    if not endpoint.tunnel_address and config.connection.transport == "grpc":
        raise ConfigError("no tunnel address: set control_plane.tunnel_address in the config")
    return [endpoint]


def first_endpoint(edge_id: str, count: int) -> int:
    """The index of the control-plane address an edge dials first, of ``count``: from a hash of
    its id, so the same edge starts at the same address after a restart and a fleet's edges
    spread evenly over the addresses."""
    if count <= 1:
        return 0
    digest = hashlib.sha256(edge_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count


@dataclass(frozen=True, slots=True)
class Route:
    """How one transport reaches one control-plane endpoint: ``target`` (``host:port`` for gRPC,
    the ``ws(s)://`` URL for WebSocket), its ``host`` and ``port``, the proxy it goes through and
    why (``proxy_source``: ``connection.proxy_url``, ``https_proxy``, ``NO_PROXY matches ...``)."""

    kind: TransportKind
    target: str
    host: str
    port: int
    proxy: ProxyConfig | None
    proxy_source: str


@dataclass(frozen=True, slots=True)
class _Target:
    grpc: Route | None
    ws: Route | None

    @property
    def tunnel_address(self) -> str | None:
        return self.grpc.target if self.grpc else None

    @property
    def ws_url(self) -> str | None:
        return self.ws.target if self.ws else None

    def routes(self, mode: str) -> list[Route]:
        allowed = ((self.grpc, mode != "websocket"), (self.ws, mode != "grpc"))
        return [route for route, ok in allowed if route is not None and ok]


def endpoint_routes(endpoint: Endpoint, config: ConnectionConfig, env: Mapping[str, str]) -> list[Route]:
    """The routes to ``endpoint`` that ``config.transport`` allows, in the order ``auto`` tries
    them (gRPC first). Raises ConfigError for an unusable address or proxy URL."""
    return _target(endpoint, config, env).routes(config.transport)


def _target(endpoint: Endpoint, config: ConnectionConfig, env: Mapping[str, str]) -> _Target:
    try:
        ws_url = tunnel_ws_url(endpoint.control_plane_url) if endpoint.control_plane_url else None
    except TransportError as exc:
        raise ConfigError(str(exc)) from None
    address = endpoint.tunnel_address
    if config.transport == "grpc" and not address:
        raise ConfigError("transport grpc needs a tunnel address: set control_plane.tunnel_address")
    if config.transport == "websocket" and not ws_url:
        raise ConfigError("transport websocket needs the control plane's URL: set control_plane.url")
    return _Target(
        grpc=_route(TransportKind.GRPC, address, config, env) if address else None,
        ws=_route(TransportKind.WEBSOCKET, ws_url, config, env) if ws_url else None,
    )


def _route(kind: TransportKind, target: str, config: ConnectionConfig, env: Mapping[str, str]) -> Route:
    parts = urlsplit(target if "://" in target else f"//{target}")
    default_port = 443 if parts.scheme in ("https", "wss") else 80
    try:
        host, port = parts.hostname or "", parts.port or default_port
    except ValueError:  # a port that is not a number, or out of range
        raise ConfigError(f"invalid control-plane address {target!r}") from None
    if not host:
        raise ConfigError(f"invalid control-plane address {target!r}: no host")
    proxy, source = resolve_proxy_source(host, port, override=config.proxy_url, env=env)
    return Route(kind, target, host, port, proxy, source)


class Dialer:
    def __init__(
        self,
        *,
        identity: Identity,
        config: ConnectionConfig,
        tunnel_address: str | None,
        control_plane_url: str | None,
        state_dir: Path,
        max_frame_bytes: int,
        tls_server_name: str | None = None,
        env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        more_endpoints: Sequence[Endpoint] = (),
        drain_memory_s: float = 30.0,
        monotonic: Callable[[], float] = time.monotonic,
        remember: bool = True,
        first: int = 0,
    ) -> None:
        """The first endpoint is ``tunnel_address`` / ``control_plane_url``; ``more_endpoints``
        follow it. ``first``: the index of the endpoint dialled first (the order after it is the
        list's, wrapping round). ``remember``: keep the transport that worked in ``state_dir``
        (``auto``; the doctor does not). Raises ConfigError when the chosen transport has no
        address or the proxy URL is invalid."""
        self._remember = remember
        self._identity = identity
        self._config = config
        self._state_dir = state_dir
        self._max_frame_bytes = max_frame_bytes
        self._tls_server_name = tls_server_name
        self._clock = clock
        env = os.environ if env is None else env
        self._targets = [
            _target(endpoint, config, env)
            for endpoint in (Endpoint(tunnel_address, control_plane_url), *more_endpoints)
        ]
        if not 0 <= first < len(self._targets):
            raise ValueError(f"first endpoint {first} of {len(self._targets)}")
        self._index = first
        self._drain_memory_s = drain_memory_s
        self._monotonic = monotonic
        self._drained_at: dict[int, float] = {}  # endpoint index -> when it last drained this edge
        remembered = load_choice(state_dir) if config.transport == "auto" else None
        self.selector = TransportSelector(config.transport, remembered)
        #: (transport, connected?) of recent attempts, newest last: for diagnostics and tests.
        self.attempts: collections.deque[tuple[TransportKind, bool]] = collections.deque(maxlen=32)
        self.current: TransportKind | None = None
        #: Where the last successful connect went: a tunnel address (gRPC) or a WebSocket URL.
        self.current_address: str | None = None

    @classmethod
    def for_config(
        cls,
        config: EdgeConfig,
        identity: Identity,
        *,
        max_frame_bytes: int,
        env: Mapping[str, str] | None = None,
        remember: bool = True,
    ) -> Dialer:
        """The dialer of an edge with this config and identity (:func:`endpoints_for`), starting
        at :func:`first_endpoint` of them unless ``control_plane.address_order`` is ``in_order``."""
        endpoints = endpoints_for(config, identity)
        spread = config.control_plane.address_order == "spread"
        return cls(
            identity=identity,
            config=config.connection,
            tunnel_address=endpoints[0].tunnel_address,
            control_plane_url=endpoints[0].control_plane_url,
            more_endpoints=endpoints[1:],
            state_dir=config.state_dir,
            max_frame_bytes=max_frame_bytes,
            tls_server_name=config.control_plane.tls_server_name,
            env=env,
            remember=remember,
            first=first_endpoint(identity.edge_id, len(endpoints)) if spread else 0,
        )

    def routes(self, index: int | None = None) -> list[Route]:
        """The routes of endpoint ``index`` (default: the current one), in the order ``auto``
        tries them (gRPC first), limited to what ``connection.transport`` allows."""
        return self._targets[self._index if index is None else index].routes(self._config.transport)

    @property
    def identity(self) -> Identity:
        """The identity the next connection presents."""
        return self._identity

    def set_identity(self, identity: Identity) -> None:
        """Present ``identity`` (a renewed certificate) from the next connection on; a connection
        that is up stays as it is."""
        if identity.edge_id != self._identity.edge_id:
            raise ValueError(f"identity of edge {identity.edge_id}, not {self._identity.edge_id}")
        self._identity = identity

    @property
    def endpoint_index(self) -> int:
        """Which endpoint the next ``connect`` tries first (0-based)."""
        return self._index

    def rotate(self) -> bool:
        """The current endpoint is draining (going away): try the next one first from now on.
        Returns whether to dial it at once: there is another address, and it did not drain this
        edge itself within ``drain_memory_s``."""
        now = self._monotonic()
        self._drained_at[self._index] = now
        if len(self._targets) == 1:
            return False
        self._index = (self._index + 1) % len(self._targets)
        last = self._drained_at.get(self._index)
        fresh = last is None or now - last >= self._drain_memory_s
        log.info(
            "moving on to control-plane address %d of %d%s",
            self._index + 1,
            len(self._targets),
            "" if fresh else " (it drained this edge recently too: after a backoff)",
        )
        return fresh

    async def connect(self) -> Transport:
        """Open a tunnel transport to the current endpoint, else to the next ones in turn.
        Raises TransportError (the last failure, or a combined one)."""
        errors: list[str] = []
        for step in range(len(self._targets)):
            index = (self._index + step) % len(self._targets)
            try:
                transport = await self._connect_target(self._targets[index])
            except TransportError as exc:
                if exc.unauthenticated or len(self._targets) == 1:
                    raise
                log.info("control-plane address %d failed (%s); trying the next one", index + 1, exc)
                errors.append(f"address {index + 1}: {exc}")
                continue
            self._index = index
            return transport
        raise TransportError("no control-plane address could be reached: " + "; ".join(errors))

    async def _connect_target(self, target: _Target) -> Transport:
        plan = [
            kind for kind in self.selector.plan(self._clock()) if self._available(target, kind)
        ] or self._fallback_plan(target)
        errors: list[str] = []
        for kind in plan:
            try:
                transport = await self._dial(target, kind, probing=len(plan) > 1)
            except TransportError as exc:
                self.attempts.append((kind, False))
                self.selector.failed(kind)
                if exc.unauthenticated or len(plan) == 1:
                    raise
                log.info("%s transport failed (%s); trying the next one", kind.value, exc)
                errors.append(f"{kind.value}: {exc}")
                continue
            self.attempts.append((kind, True))
            self.current = kind
            self.current_address = target.tunnel_address if kind is TransportKind.GRPC else target.ws_url
            changed = self.selector.succeeded(kind, self._clock())
            if changed is not None and self._remember:
                log.info("transport %s works; remembering it", kind.value)
                try:
                    await asyncio.to_thread(save_choice, self._state_dir, changed)
                except OSError as exc:
                    log.warning("could not remember the transport choice: %s", exc)
            return transport
        raise TransportError("no transport could connect: " + "; ".join(errors))

    @staticmethod
    def _available(target: _Target, kind: TransportKind) -> bool:
        return bool(target.tunnel_address if kind is TransportKind.GRPC else target.ws_url)

    def _fallback_plan(self, target: _Target) -> list[TransportKind]:
        return [k for k in (TransportKind.GRPC, TransportKind.WEBSOCKET) if self._available(target, k)]

    async def _dial(self, target: _Target, kind: TransportKind, *, probing: bool) -> Transport:
        cfg = self._config
        ident = self._identity
        if kind is TransportKind.GRPC:
            assert target.grpc is not None
            timeout = min(cfg.connect_timeout_s, cfg.auto_grpc_connect_timeout_s) if probing else None
            return await connect_grpc(
                target.grpc.target,
                ca_pem=ident.ca_pem,
                key_pem=ident.key_pem,
                cert_pem=ident.cert_pem,
                max_frame_bytes=self._max_frame_bytes,
                keepalive_time_s=cfg.keepalive_time_s,
                connect_timeout_s=timeout or cfg.connect_timeout_s,
                tls_server_name=self._tls_server_name,
                proxy=target.grpc.proxy,
            )
        assert target.ws is not None
        return await connect_ws(
            target.ws.target,
            ident,
            max_frame_bytes=self._max_frame_bytes,
            connect_timeout_s=cfg.connect_timeout_s,
            proxy=target.ws.proxy,
            ping_interval_s=cfg.keepalive_time_s,
        )
