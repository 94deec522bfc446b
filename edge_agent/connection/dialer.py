"""``Dialer``: the link's ``connect()`` callable. Resolves the proxy, picks the transport
(:mod:`edge_agent.connection.selection`) and opens it.

In ``auto`` mode, while no transport is remembered, gRPC is tried first with a short connect
timeout (``auto_grpc_connect_timeout_s``), then WebSocket; the one that connects is remembered in
the state directory. A refusal of the edge's identity ends the attempt at once: the other
transport would be refused too.

Several control-plane addresses (``Endpoint``): ``connect`` starts at the current one and tries
each in turn, keeping the one that connected; ``rotate`` moves on to the next (the link calls it
when the control plane it was connected to drained) and says whether to dial it at once: not when
there is no other address, nor when that one drained this edge within ``drain_memory_s`` too (every
address is draining: the link then backs off instead of hopping between them in a loop).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from edge_agent.connection.grpc_transport import connect_grpc
from edge_agent.connection.proxy import ProxyConfig, resolve_proxy
from edge_agent.connection.selection import TransportKind, TransportSelector, load_choice, save_choice
from edge_agent.connection.transport import Transport, TransportError
from edge_agent.connection.ws_transport import connect_ws, tunnel_ws_url
from edge_agent.errors import ConfigError
from edge_agent.identity import Identity

if TYPE_CHECKING:  # config imports the MCP package, which uses this package's backoff
    from edge_agent.config import ConnectionConfig

__all__ = ["Dialer", "Endpoint"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One control-plane process: its gRPC tunnel address and/or its HTTP(S) URL."""

    tunnel_address: str | None
    control_plane_url: str | None


@dataclass(frozen=True, slots=True)
class _Target:
    tunnel_address: str | None
    ws_url: str | None
    grpc_proxy: ProxyConfig | None
    ws_proxy: ProxyConfig | None


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
    ) -> None:
        """The first endpoint is ``tunnel_address`` / ``control_plane_url``; ``more_endpoints``
        follow it. Raises ConfigError when the chosen transport has no address or the proxy URL
        is invalid."""
        self._identity = identity
        self._config = config
        self._state_dir = state_dir
        self._max_frame_bytes = max_frame_bytes
        self._tls_server_name = tls_server_name
        self._clock = clock
        env = os.environ if env is None else env
        self._targets = [
            self._target(endpoint, env)
            for endpoint in (Endpoint(tunnel_address, control_plane_url), *more_endpoints)
        ]
        self._index = 0
        self._drain_memory_s = drain_memory_s
        self._monotonic = monotonic
        self._drained_at: dict[int, float] = {}  # endpoint index -> when it last drained this edge
        remembered = load_choice(state_dir) if config.transport == "auto" else None
        self.selector = TransportSelector(config.transport, remembered)
        #: (transport, connected?) of recent attempts, newest last: for diagnostics and tests.
        self.attempts: collections.deque[tuple[TransportKind, bool]] = collections.deque(maxlen=32)
        self.current: TransportKind | None = None

    def _target(self, endpoint: Endpoint, env: Mapping[str, str]) -> _Target:
        try:
            ws_url = tunnel_ws_url(endpoint.control_plane_url) if endpoint.control_plane_url else None
        except TransportError as exc:
            raise ConfigError(str(exc)) from None
        address = endpoint.tunnel_address
        if self._config.transport == "grpc" and not address:
            raise ConfigError("transport grpc needs a tunnel address: set control_plane.tunnel_address")
        if self._config.transport == "websocket" and not ws_url:
            raise ConfigError("transport websocket needs the control plane's URL: set control_plane.url")
        return _Target(
            tunnel_address=address,
            ws_url=ws_url,
            grpc_proxy=self._proxy_for(address, env) if address else None,
            ws_proxy=self._proxy_for(ws_url, env) if ws_url else None,
        )

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

    def _proxy_for(self, target: str, env: Mapping[str, str]) -> ProxyConfig | None:
        parts = urlsplit(target if "://" in target else f"//{target}")
        default_port = 443 if parts.scheme in ("https", "wss") else 80
        host, port = parts.hostname or "", parts.port or default_port
        return resolve_proxy(host, port, override=self._config.proxy_url, env=env)

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
            changed = self.selector.succeeded(kind, self._clock())
            if changed is not None:
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
            assert target.tunnel_address is not None
            timeout = min(cfg.connect_timeout_s, cfg.auto_grpc_connect_timeout_s) if probing else None
            return await connect_grpc(
                target.tunnel_address,
                ca_pem=ident.ca_pem,
                key_pem=ident.key_pem,
                cert_pem=ident.cert_pem,
                max_frame_bytes=self._max_frame_bytes,
                keepalive_time_s=cfg.keepalive_time_s,
                connect_timeout_s=timeout or cfg.connect_timeout_s,
                tls_server_name=self._tls_server_name,
                proxy=target.grpc_proxy,
            )
        assert target.ws_url is not None
        return await connect_ws(
            target.ws_url,
            ident,
            max_frame_bytes=self._max_frame_bytes,
            connect_timeout_s=cfg.connect_timeout_s,
            proxy=target.ws_proxy,
            ping_interval_s=cfg.keepalive_time_s,
        )
