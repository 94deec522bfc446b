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
from outpost_wire.grpc_wakeups import drain_grpc_wakeups

__all__ = ["GrpcTransport", "connect_grpc"]

log = logging.getLogger(__name__)

#: How long a fresh call may take to repeat a refusal that a racing write hid (see GrpcTransport).
_ASK_AGAIN_TIMEOUT_S = 5.0


class GrpcTransport:
    """One tunnel call. A refusal at the start of the call can race our first write: grpc-aio then
    reports the failed write as ``INTERNAL: Internal error from Core`` and the control plane's
    status (``UNAUTHENTICATED: edge authentication failed: revoked``) is lost for this call. So a
    call that ends with INTERNAL before any frame came back is asked about once more
    (:meth:`_failure`): a fresh call on the same channel, on which we write nothing (so nothing
    can race), gets the refusal again at once if there is one."""

    def __init__(
        self,
        channel: grpc.aio.Channel,
        call: grpc.aio.StreamStreamCall,
        *,
        ask_again_timeout_s: float = _ASK_AGAIN_TIMEOUT_S,
    ) -> None:
        self._channel = channel
        self._call = call
        self._closed = False
        self._received = False  # a frame came back: the control plane accepted us on this call
        self._ask_again_timeout_s = ask_again_timeout_s
        self._failed: asyncio.Future[TransportError] | None = None  # the answer of _ask_again

    async def send(self, data: bytes) -> None:
        try:
            await self._call.write(data)
        except grpc.aio.AioRpcError as exc:
            raise await self._failure(exc) from None
        except asyncio.InvalidStateError as exc:
            raise _map(exc) from None

    async def receive(self) -> bytes | None:
        try:
            data = await self._call.read()
        except grpc.aio.AioRpcError as exc:
            raise await self._failure(exc) from None
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
                message = f"control plane closed the tunnel: {code.name}: {details}"
                if code == grpc.StatusCode.UNAUTHENTICATED:
                    raise TransportError.refused(message, details or "")
                if code == grpc.StatusCode.INTERNAL:
                    raise await self._failure(None, TransportError(message))
                raise TransportError(message)
            return None
        assert isinstance(data, bytes)
        self._received = True
        return data

    async def _failure(
        self, exc: grpc.aio.AioRpcError | None, mapped: TransportError | None = None
    ) -> TransportError:
        """The error for a failed call (``exc``, or ``mapped`` already); INTERNAL before any
        frame came back is asked about again, once: send and receive share the answer."""
        error = _map(exc) if mapped is None and exc is not None else mapped
        assert error is not None
        internal = exc is None or exc.code() == grpc.StatusCode.INTERNAL
        if not internal or self._received or self._closed:
            return error
        if self._failed is None:
            self._failed = asyncio.ensure_future(self._ask_again(error))
        return await asyncio.shield(self._failed)

    async def _ask_again(self, fallback: TransportError) -> TransportError:
        call = self._channel.stream_stream(
            CONNECT_METHOD, request_serializer=None, response_deserializer=None
        )()
        try:
            async with asyncio.timeout(self._ask_again_timeout_s):
                # A control plane that refuses us ends the call at once; one that accepts us
                # waits for our hello, which does not come (the timeout: keep the first error).
                await call.read()
            code, details = await call.code(), await call.details()
        except grpc.aio.AioRpcError as again:
            code, details = again.code(), again.details()
        except TimeoutError:
            return fallback
        except asyncio.CancelledError:  # the channel closed under us (or our task is cancelled)
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            return fallback
        finally:
            call.cancel()
        if code != grpc.StatusCode.UNAUTHENTICATED:
            return fallback
        log.debug("the tunnel call ended with INTERNAL; asked again: UNAUTHENTICATED: %s", details)
        return TransportError.refused(f"tunnel failed: UNAUTHENTICATED: {details}", details or "")

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
    # Keep a busy loop from stalling the tunnel for seconds (see outpost_wire.grpc_wakeups).
    drain_grpc_wakeups()
    return GrpcTransport(channel, call)


def _map(exc: BaseException) -> TransportError:
    if isinstance(exc, grpc.aio.AioRpcError):
        code = exc.code()
        details = exc.details() or ""
        message = f"tunnel failed: {code.name}: {details}"
        if code == grpc.StatusCode.UNAUTHENTICATED:
            return TransportError.refused(message, details)
        return TransportError(message)
    return TransportError(f"tunnel failed: {exc}")
