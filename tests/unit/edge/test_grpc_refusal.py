"""The gRPC transport recovers a refusal that grpc-aio hid: when the first write races the control
plane's refusal, the call ends as ``INTERNAL: Internal error from Core``; the transport then asks
once more on a fresh call (writing nothing) and reports the real refusal. Fakes of the grpc call
and channel: the race itself is not reproducible on demand (the integration tests hit it now and
then, through a proxy more often)."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import grpc.aio
import pytest

from edge_agent.connection.grpc_transport import GrpcTransport
from edge_agent.connection.transport import TransportError

INTERNAL = grpc.aio.AioRpcError(
    grpc.StatusCode.INTERNAL, grpc.aio.Metadata(), grpc.aio.Metadata(), "Internal error from Core"
)


def _refused(details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(
        grpc.StatusCode.UNAUTHENTICATED, grpc.aio.Metadata(), grpc.aio.Metadata(), details
    )


class FakeCall:
    def __init__(self, *, write: BaseException | None = None, read: BaseException | None = None) -> None:
        self._write, self._read = write, read
        self.cancelled = False
        self.reads = 0

    async def write(self, data: bytes) -> None:
        if self._write is not None:
            raise self._write

    async def read(self) -> Any:
        self.reads += 1
        if self._read is not None:
            raise self._read
        await asyncio.Event().wait()  # an accepting control plane: waits for our hello

    def cancel(self) -> bool:
        self.cancelled = True
        return True


class FakeChannel:
    def __init__(self, again: FakeCall) -> None:
        self.again = again
        self.calls = 0

    def stream_stream(self, *args: object, **kwargs: object) -> Any:
        self.calls += 1
        return lambda: self.again

    async def close(self, grace: float | None = None) -> None:
        pass


async def test_a_refusal_hidden_by_a_racing_write_is_asked_again_and_shared() -> None:
    again = FakeCall(read=_refused("edge authentication failed: revoked"))
    channel = FakeChannel(again)
    transport = GrpcTransport(channel, FakeCall(write=INTERNAL, read=INTERNAL))  # type: ignore[arg-type]
    send, receive = await asyncio.gather(
        transport.send(b"hello"), transport.receive(), return_exceptions=True
    )
    for error in (send, receive):
        assert getattr(error, "refusal", None) == "revoked", error
        assert "UNAUTHENTICATED: edge authentication failed: revoked" in str(error)
    assert channel.calls == 1 and again.cancelled  # asked once, for both


async def test_an_accepting_control_plane_keeps_the_first_error() -> None:
    again = FakeCall()  # never answers: the control plane waits for a hello
    transport = GrpcTransport(
        FakeChannel(again),  # type: ignore[arg-type]
        FakeCall(write=INTERNAL),  # type: ignore[arg-type]
        ask_again_timeout_s=0.05,  # the accepting case waits this long; short here to keep the test quick
    )
    with pytest.raises(TransportError) as error:
        await transport.send(b"hello")
    assert error.value.refusal is None and "INTERNAL" in str(error.value)
    assert again.cancelled


async def test_other_failures_are_not_asked_about() -> None:
    channel = FakeChannel(FakeCall())
    unavailable = grpc.aio.AioRpcError(
        grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "gone"
    )
    transport = GrpcTransport(channel, FakeCall(read=unavailable))  # type: ignore[arg-type]
    with pytest.raises(TransportError) as error:
        await transport.receive()
    assert "UNAVAILABLE" in str(error.value) and error.value.refusal is None
    assert channel.calls == 0
