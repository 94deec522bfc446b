"""The tunnel server over gRPC: mTLS, one bidirectional stream of raw frames per edge.

TLS requires a client certificate issued by our CA (``require_client_auth``): a certificate from
anyone else fails the handshake. A certificate we issued is then checked against the store
(known edge, fingerprint, not revoked, not expired); a refusal ends the stream with
UNAUTHENTICATED and is logged, and touches no other edge. Keepalive: we accept client pings every
10 s or more and ping idle edges ourselves, so dead links are found even without heartbeats.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import grpc
import grpc.aio
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from control_plane.errors import ControlPlaneError, ListenFailed
from control_plane.listen import check_bindable
from control_plane.store.base import EdgeRecord
from control_plane.tunnel.connection import EdgeConnection
from control_plane.tunnel.pump import pump
from control_plane.tunnel.registry import EdgeRegistry
from outpost_wire.channel import CONNECT_METHOD, grpc_message_limit
from outpost_wire.errors import ErrorCode
from outpost_wire.grpc_wakeups import drain_grpc_wakeups
from outpost_wire.session import SessionConfig
from outpost_wire.throttle import LogThrottle

__all__ = ["Authenticator", "GrpcTunnelServer"]

log = logging.getLogger(__name__)
_refusals = LogThrottle(log)  # strangers can cause these: a few lines a minute per kind

#: Check a client certificate (DER) and return the edge it belongs to; raise ControlPlaneError to refuse.
Authenticator = Callable[[bytes], Awaitable[EdgeRecord]]

_SERVICE, _METHOD = CONNECT_METHOD.strip("/").split("/")


class GrpcTunnelServer:
    def __init__(
        self,
        *,
        registry: EdgeRegistry,
        authenticate: Authenticator,
        server_key_pem: bytes,
        server_cert_pem: bytes,
        ca_cert_pem: bytes,
        session_config: SessionConfig,
        control_plane_id: str,
        software_version: str,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self._registry = registry
        self._authenticate = authenticate
        self._session_config = session_config
        self._control_plane_id = control_plane_id
        self._software_version = software_version
        self._address = f"{host}:{port}"
        self._host = host
        limit = grpc_message_limit(session_config.max_frame_bytes)
        self._server = grpc.aio.server(
            options=[
                ("grpc.keepalive_time_ms", 30_000),
                ("grpc.keepalive_timeout_ms", 10_000),
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
                ("grpc.http2.max_ping_strikes", 3),
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", limit),
                ("grpc.so_reuseport", 0),  # a second process on the port is an error, not a sharer
            ]
        )
        handler = grpc.stream_stream_rpc_method_handler(
            self._connect, request_deserializer=None, response_serializer=None
        )
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(_SERVICE, {_METHOD: handler}),)
        )
        # Dynamic credentials: ``update_certificate`` swaps the server certificate for the next
        # handshakes without a restart (gRPC asks ``_next_certificate`` at each new handshake).
        self._ca_cert_pem = ca_cert_pem
        self._next_config: grpc.ServerCertificateConfiguration | None = None
        self._credentials = grpc.dynamic_ssl_server_credentials(
            grpc.ssl_server_certificate_configuration(
                [(server_key_pem, server_cert_pem)], root_certificates=ca_cert_pem
            ),
            self._next_certificate,
            require_client_authentication=True,
        )
        self.port = 0
        self._started = False

    def update_certificate(self, server_key_pem: bytes, server_cert_pem: bytes) -> None:
        """Serve this certificate from the next handshake on (tunnels already up keep theirs)."""
        self._next_config = grpc.ssl_server_certificate_configuration(
            [(server_key_pem, server_cert_pem)], root_certificates=self._ca_cert_pem
        )

    def _next_certificate(self) -> grpc.ServerCertificateConfiguration | None:
        """gRPC's fetcher (called from its own threads): a new configuration once, else ``None``
        (keep the current one)."""
        config, self._next_config = self._next_config, None
        return config

    @property
    def address(self) -> str:
        return f"{self._host}:{self.port}"

    @property
    def listening(self) -> bool:
        """True from :meth:`start` until :meth:`stop`."""
        return self._started

    async def start(self) -> int:
        """Listen; :class:`ListenFailed` if the address is taken or not this host's."""
        check_bindable("tunnel", self._host, int(self._address.rpartition(":")[2]))
        try:
            self.port = self._server.add_secure_port(self._address, self._credentials)
        except RuntimeError:  # grpc: "Failed to bind to address ..."
            self.port = 0
        if self.port == 0:
            raise ListenFailed("tunnel", self._address, "address in use or not available")
        await self._server.start()
        # Without this a busy loop stalls every tunnel for seconds (see outpost_wire.grpc_wakeups).
        drain_grpc_wakeups()
        self._started = True
        log.info("tunnel server listening on %s (gRPC, mTLS)", self.address)
        return self.port

    async def stop(self, grace_s: float) -> None:
        """Drain: tell every edge, give in-flight calls ``grace_s`` to finish, then stop."""
        if not self._started:
            return
        self._started = False
        self.announce_drain(grace_s)
        await self._registry.wait_no_pending(grace_s)
        for conn in self._registry.all_connections():
            conn.close(ErrorCode.UNAVAILABLE, "control plane shutting down")
        await self._server.stop(grace=1.0)

    def announce_drain(self, grace_s: float) -> None:
        """Tell every connected edge (gRPC and WebSocket alike) that this control plane is going
        away: they move to another address as soon as their calls in flight have answered. Edges
        that connect from now on, over either transport, are turned away at once (see
        :meth:`EdgeRegistry.announce_drain`). Idempotent."""
        self._registry.announce_drain("control plane shutting down", int(grace_s * 1000))

    async def _connect(self, _request_iterator: object, context: grpc.aio.ServicerContext) -> None:
        peer = context.peer()
        der = _client_cert_der(context)
        if der is None:
            _refusals.warning(
                "no-cert", "tunnel: connection from %s without a client certificate refused", peer
            )
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "client certificate required")
            return
        try:
            edge = await self._authenticate(der)
        except ControlPlaneError as exc:
            _refusals.warning("refused", "tunnel: connection from %s refused: %s", peer, exc)
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(exc))
            return
        conn = EdgeConnection(
            edge,
            listener=self._registry,
            session_config=self._session_config,
            control_plane_id=self._control_plane_id,
            software_version=self._software_version,
            peer=peer,
        )

        async def read() -> bytes | None:
            data = await context.read()
            if data is grpc.aio.EOF:
                return None
            assert isinstance(data, bytes)
            return data

        await pump(
            conn,
            read=read,
            write=context.write,
            broken=(grpc.aio.AioRpcError, asyncio.InvalidStateError),
        )
        if conn.close_code is ErrorCode.UNAUTHENTICATED:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, conn.close_reason)
        elif conn.close_code in (
            ErrorCode.MALFORMED_FRAME,
            ErrorCode.FRAME_TOO_LARGE,
            ErrorCode.PROTOCOL_VIOLATION,
        ):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"{conn.close_code.value}: {conn.close_reason}"
            )


def _client_cert_der(context: grpc.aio.ServicerContext) -> bytes | None:
    pems = context.auth_context().get("x509_pem_cert")
    if not pems:
        return None
    try:
        return x509.load_pem_x509_certificate(pems[0]).public_bytes(Encoding.DER)
    except ValueError:
        return None
