"""``drain_grpc_wakeups`` on both event loops the daemons run (asyncio, uvloop): it finds grpc-aio's
wake-up socket, calls keep completing afterwards (the reader it put in place runs grpc's handler),
it is idempotent, and it holds after all servers and channels are gone and new ones are made
(grpc-aio may then make a new completion queue). Real gRPC on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import grpc
import grpc.aio
import pytest
import uvloop

from outpost_wire.grpc_wakeups import drain_grpc_wakeups, wakeups_drained

_METHOD = "/test.Echo/Say"


def _echo_server() -> grpc.aio.Server:
    server = grpc.aio.server()

    async def say(request: bytes, _context: grpc.aio.ServicerContext) -> bytes:
        return request

    handler = grpc.unary_unary_rpc_method_handler(say, request_deserializer=None, response_serializer=None)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Echo", {"Say": handler}),))
    return server


async def _round_trips() -> None:
    for _ in range(2):  # the second time after everything grpc-aio had was closed
        server = _echo_server()
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        try:
            assert drain_grpc_wakeups()
            assert drain_grpc_wakeups()  # idempotent
            assert wakeups_drained()
            say = channel.unary_unary(_METHOD, request_serializer=None, response_deserializer=None)
            replies = await asyncio.wait_for(asyncio.gather(*(say(b"%d" % i) for i in range(200))), 30)
            assert replies == [b"%d" % i for i in range(200)]
        finally:
            await channel.close()
            await server.stop(None)


@pytest.mark.parametrize("run", [asyncio.run, uvloop.run], ids=["asyncio", "uvloop"])
def test_calls_complete_with_the_wakeups_drained(run: Callable[[Coroutine[Any, Any, None]], None]) -> None:
    run(_round_trips())
