"""gRPC transport for the edge: one bidirectional stream of raw frames over mTLS.

Frames travel as opaque bytes (identity serializers) so that our codec, not protobuf-in-gRPC,
enforces size limits and reports malformed frames. Keepalive is set explicitly: grpc-python's
defaults stop pinging idle connections, and servers reject pings sent more often than they allow
(the control plane permits one every 10 s; we ping every ``keepalive_time_s`` ≥ 10 s).
"""

from __future__ import annotations

import asyncio
import logging

import grpc
import grpc.aio

from edge_agent.connection.proxy import ProxyConfig
from edge_agent.connection.transport import TransportError
from outpost_wire.channel import CONNECT_METHOD, grpc_message_limit

__all__ = ["GrpcTransport", "connect_grpc"]

log = logging.getLogger(__name__)


class GrpcTransport:
    def __init__(self, channel: grpc.aio.Channel, call: grpc.aio.StreamStreamCall) -> None:
        self._channel = channel
        self._call = call
        self._closed = False

    async def send(self, data: bytes) -> None:
        try:
            await self._call.write(data)
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as exc:
            raise _map(exc) from None

    async def receive(self) -> bytes | None:
        try:
            data = await self._call.read()
        except grpc.aio.AioRpcError as exc:
            raise _map(exc) from None
        except asyncio.CancelledError:
            # grpc-aio raises CancelledError from a read once we cancelled the call ourselves
            # (``close``): that is the end of the stream, not a cancellation of our task.
            task = asyncio.current_task()
            if self._closed and (task is None or task.cancelling() == 0):
                return None
            raise
        if data is grpc.aio.EOF:
            # The server ended the stream; its status tells why (e.g. UNAUTHENTICATED).
            code = await self._call.code()
            if code not in (grpc.StatusCode.OK, None):
                details = await self._call.details()
                raise TransportError(
                    f"control plane closed the tunnel: {code.name}: {details}",
                    unauthenticated=code == grpc.StatusCode.UNAUTHENTICATED,
                )
            return None
        assert isinstance(data, bytes)
        return data

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._call.cancel()
        await self._channel.close(grace=None)


async def connect_grpc(
    address: str,
    *,
    ca_pem: bytes,
    key_pem: bytes,
    cert_pem: bytes,
    max_frame_bytes: int,
    keepalive_time_s: float,
    connect_timeout_s: float,
    tls_server_name: str | None = None,
    proxy: ProxyConfig | None = None,
) -> GrpcTransport:
    """Open a secure channel and start the tunnel stream. Raises TransportError.

    ``proxy``: tunnel through this HTTP proxy with ``CONNECT`` (grpc-core sends the URL's
    credentials as ``Proxy-Authorization: Basic``); ``None`` connects directly, whatever the
    environment says (the caller resolved ``https_proxy`` / ``no_proxy`` already)."""
    credentials = grpc.ssl_channel_credentials(
        root_certificates=ca_pem, private_key=key_pem, certificate_chain=cert_pem
    )
    limit = grpc_message_limit(max_frame_bytes)
    options: list[tuple[str, int | str]] = [
        ("grpc.keepalive_time_ms", int(keepalive_time_s * 1000)),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", limit),
        ("grpc.enable_retries", 0),
        # We run our own reconnect loop with full-jitter backoff.
        ("grpc.initial_reconnect_backoff_ms", 1000),
    ]
    if proxy is not None:
        options.append(("grpc.http_proxy", proxy.url))
    else:
        options.append(("grpc.enable_http_proxy", 0))
    if tls_server_name:
        options.append(("grpc.ssl_target_name_override", tls_server_name))
    channel = grpc.aio.secure_channel(address, credentials, options=options)
    try:
        await asyncio.wait_for(channel.channel_ready(), timeout=connect_timeout_s)
    except TimeoutError:
        await channel.close(grace=None)
        via = f" through proxy {proxy.redacted}" if proxy is not None else ""
        raise TransportError(
            f"could not connect to the tunnel at {address}{via} within {connect_timeout_s:g} s "
            "(network unreachable, TLS handshake refused, proxy refusal, or wrong address)"
        ) from None
    call = channel.stream_stream(CONNECT_METHOD, request_serializer=None, response_deserializer=None)()
    return GrpcTransport(channel, call)


def _map(exc: BaseException) -> TransportError:
    if isinstance(exc, grpc.aio.AioRpcError):
        code = exc.code()
        return TransportError(
            f"tunnel failed: {code.name}: {exc.details()}",
            unauthenticated=code == grpc.StatusCode.UNAUTHENTICATED,
        )
    return TransportError(f"tunnel failed: {exc}")
