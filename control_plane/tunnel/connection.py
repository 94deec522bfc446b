"""One connected edge, as the control plane sees it: a CONTROL-role tunnel session plus its pump.

The gRPC (and later WebSocket) handler feeds frames in with :meth:`EdgeConnection.receive` and
runs :meth:`EdgeConnection.writer` to push frames out; everything else is the sans-I/O session.

The session reassembles result chunks only for the request ids the listener says are pending on
this edge (``expects_result``); chunks of any other id are dropped unbuffered and logged at DEBUG,
a few lines a minute.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from control_plane.store.base import EdgeRecord
from outpost_wire.admission import PROBE_CAPABILITY
from outpost_wire.errors import ErrorCode
from outpost_wire.frames import PROTOCOL_VERSION, Hello, Outcome, Request, Welcome
from outpost_wire.session import (
    ConnState,
    DrainReceived,
    HelloReceived,
    PeerDead,
    PeerError,
    ProtocolError,
    ResultReceived,
    Role,
    SessionConfig,
    TunnelSession,
)
from outpost_wire.throttle import LogThrottle
from outpost_wire.timer import SessionTimer
from outpost_wire.tunnel_events import CatalogReceived

__all__ = ["ConnectionListener", "EdgeConnection"]

log = logging.getLogger(__name__)
_dropped = LogThrottle(log)  # an edge can cause these: a few lines a minute


class ConnectionListener(Protocol):
    """What the registry does with a connection's life events."""

    def on_ready(self, conn: EdgeConnection) -> None: ...

    def expects_result(self, conn: EdgeConnection, request_id: str) -> bool:
        """Whether a request with this id was sent to ``conn``'s edge and is still unanswered."""
        ...

    def on_result(self, conn: EdgeConnection, request_id: str, outcome: Outcome) -> None: ...

    def on_closed(self, conn: EdgeConnection) -> None: ...


class EdgeConnection:
    def __init__(
        self,
        edge: EdgeRecord,
        *,
        listener: ConnectionListener,
        session_config: SessionConfig,
        control_plane_id: str,
        software_version: str,
        peer: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.edge = edge
        self.peer = peer
        self.hello: Hello | None = None
        self.draining = False  # the edge announced it is shutting down
        self.mcp_catalog: dict[str, Any] = {}  # the edge's MCP catalog (servers and their tools)
        self.mcp_catalog_digest = ""
        #: sha256 (hex) of the MCP tunnel connector tokens the edge presented in its hello
        #: (the tokens themselves are not kept); see :meth:`serves_tunnel`.
        self.tunnel_token_hashes: frozenset[str] = frozenset()
        self.connected_at = datetime.now(UTC)  # when the edge said hello (wall clock)
        self.close_code: ErrorCode | None = None
        self.close_reason = ""
        self._listener = listener
        self._session = TunnelSession(
            Role.CONTROL, session_config, expects_result=lambda rid: listener.expects_result(self, rid)
        )
        self._session_config = session_config
        self._control_plane_id = control_plane_id
        self._software_version = software_version
        self._clock = clock
        self._wake = asyncio.Event()
        self.closed = asyncio.Event()
        self._session.connection_made(clock())
        #: Heartbeats and the edge's liveness; the pump starts and closes it.
        self.timer = SessionTimer(self._session, self._process, name=f"tunnel-timer-{edge.id}", clock=clock)

    @property
    def edge_id(self) -> str:
        return self.edge.id

    @property
    def environment_id(self) -> str:
        return self.edge.environment_id

    @property
    def is_open(self) -> bool:
        return self._session.state is ConnState.OPEN and not self.closed.is_set()

    @property
    def sandboxes_in_use(self) -> int:
        """The edge's live sandboxes: from its latest heartbeat, else from its hello."""
        beat = self._session.last_peer_heartbeat
        if beat is not None:
            return beat.sandboxes_in_use
        return self.hello.sandboxes_in_use if self.hello is not None else 0

    @property
    def dropped_result_chunks(self) -> int:
        """Result chunks the edge sent for ids not pending on it, dropped unbuffered."""
        return self._session.dropped_result_chunks

    @property
    def reassembly_bytes(self) -> int:
        """Bytes of partial results held for this connection now."""
        return self._session.reassembly_bytes

    @property
    def sandbox_capacity(self) -> int:
        """The most sandboxes the edge's policy allows (from its hello; 0 before it)."""
        return self.hello.sandbox_capacity if self.hello is not None else 0

    @property
    def heartbeat_seq(self) -> int:
        """The sequence number of the edge's latest heartbeat on this connection (0: none yet).
        It grows with every beat, so the gateway can tell whether the edge has reported its
        sandboxes since it placed a session there."""
        beat = self._session.last_peer_heartbeat
        return beat.seq if beat is not None else 0

    def serves_tunnel(self, grants: Mapping[str, datetime | None]) -> bool:
        """Whether the edge presented a token ``grants`` names (sha256 hex -> when it was retired,
        ``None``: current), before that token was retired: a rotation leaves the connections
        made with the old token serving, and refuses new ones."""
        for token_hash in self.tunnel_token_hashes:
            if token_hash in grants:
                retired = grants[token_hash]
                if retired is None or self.connected_at < retired:
                    return True
        return False

    # -- input --------------------------------------------------------------------------------
    def receive(self, data: bytes) -> None:
        dropped = self._session.dropped_result_chunks
        self._session.receive_data(data, self._clock())
        if self._session.dropped_result_chunks != dropped:
            _dropped.log(
                logging.DEBUG,
                "unexpected-result",
                "edge %s sent a result chunk for a request it was not asked or that is settled; dropped",
                self.edge_id,
            )
        self._process()
        self.timer.poke()  # the handshake's end, say, brings the next deadline forward

    def _process(self) -> None:
        for event in self._session.events_received():
            if isinstance(event, HelloReceived):
                self._on_hello(event.hello)
            elif isinstance(event, ResultReceived):
                self._listener.on_result(self, event.request_id, event.outcome)
            elif isinstance(event, CatalogReceived):
                self._set_catalog(event.digest, event.catalog_json)
            elif isinstance(event, DrainReceived):
                log.info("edge %s is draining: %s", self.edge_id, event.reason)
                self.draining = True
            elif isinstance(event, PeerDead):
                log.warning("edge %s stopped sending heartbeats; dropping it", self.edge_id)
                self.close(ErrorCode.UNAVAILABLE, "heartbeat timeout")
            elif isinstance(event, ProtocolError):
                log.warning("edge %s sent a bad frame: %s: %s", self.edge_id, event.code.value, event.message)
                self.close(event.code, event.message)
            elif isinstance(event, PeerError):
                log.warning(
                    "edge %s closed the tunnel: %s: %s", self.edge_id, event.code.value, event.message
                )
                self.close(event.code, event.message)
        self._wake.set()

    def _on_hello(self, hello: Hello) -> None:
        if hello.edge_id != self.edge_id:
            log.warning("edge %s said hello as %r; refusing", self.edge_id, hello.edge_id)
            self._session.close(
                ErrorCode.UNAUTHENTICATED, "hello edge_id does not match the client certificate"
            )
            self.close(ErrorCode.UNAUTHENTICATED, "hello edge_id does not match the client certificate")
            return
        self.hello = dataclasses.replace(hello, tunnel_tokens=())  # the tokens are not kept
        self.connected_at = datetime.now(UTC)
        # the same hash as control_plane.mcp_tunnels.token_hash
        self.tunnel_token_hashes = frozenset(
            hashlib.sha256(token.encode("utf-8")).hexdigest() for token in hello.tunnel_tokens
        )
        self._set_catalog(hello.mcp_catalog_digest, hello.mcp_catalog_json)
        self._session.send_welcome(
            Welcome(
                control_plane_id=self._control_plane_id,
                software_version=self._software_version,
                protocol_version=PROTOCOL_VERSION,
                heartbeat_interval_s=self._session_config.heartbeat_interval_s,
            )
        )
        if PROBE_CAPABILITY in hello.capabilities:
            # `outpost-edge doctor`: authenticated and welcomed, never registered, so the edge's
            # real tunnel (if it is up) stays as it is and no call is routed here.
            log.info("edge %s: answered a probe hello from %s (doctor)", self.edge_id, self.peer or "?")
            return
        log.info(
            "edge %s (%s) connected from %s: version %s, capacity %d, policy %s",
            self.edge_id,
            self.edge.name,
            self.peer or "?",
            hello.software_version,
            hello.sandbox_capacity,
            hello.policy_digest,
        )
        self._listener.on_ready(self)

    def _set_catalog(self, digest: str, catalog_json: str) -> None:
        if not catalog_json:
            self.mcp_catalog, self.mcp_catalog_digest = {}, digest
            return
        try:
            catalog = json.loads(catalog_json)
        except json.JSONDecodeError:
            log.warning("edge %s sent an MCP catalog that is not JSON; ignored", self.edge_id)
            return
        if not isinstance(catalog, dict):
            log.warning("edge %s sent an MCP catalog that is not an object; ignored", self.edge_id)
            return
        self.mcp_catalog, self.mcp_catalog_digest = catalog, digest
        log.info(
            "edge %s: MCP catalog %s (%d server(s))",
            self.edge_id,
            digest[:19],
            len(catalog.get("servers", [])),
        )

    # -- output -------------------------------------------------------------------------------
    def send_request(self, request: Request) -> None:
        """Queue a request (raises FrameTooLarge / ProtocolViolation from the session core)."""
        self._session.send_request(request)
        self._wake.set()

    def send_cancel(self, request_id: str) -> None:
        if self.is_open:
            self._session.send_cancel(request_id)
            self._wake.set()

    def send_drain(self, reason: str, grace_ms: int) -> None:
        if self.is_open:
            self._session.send_drain(reason, grace_ms)
            self._wake.set()

    async def writer(self, write: Callable[[bytes], Awaitable[None]]) -> None:
        """Push queued frames through ``write`` until the connection closes."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            for data in self._session.data_to_send():
                await write(data)
            self.timer.poke()  # after frames went out the next heartbeat is due later, never earlier
            if self.closed.is_set():
                return

    def close(self, code: ErrorCode, reason: str) -> None:
        """Idempotent. The transport handler notices ``closed`` and ends the stream."""
        if self.closed.is_set():
            return
        self.close_code = code
        self.close_reason = reason
        if self._session.state is not ConnState.CLOSED:
            self._session.close(code, reason)
        self.closed.set()
        self._wake.set()
        self._listener.on_closed(self)
