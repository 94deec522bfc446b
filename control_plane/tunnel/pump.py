"""Pump one :class:`EdgeConnection` through a carrier: the part the gRPC and WebSocket tunnel
handlers share once the edge is authenticated.

Three tasks run until the connection closes: a reader feeding frames to ``conn.receive``, the
connection's writer, and its timer (``conn.timer``: heartbeats and the edge's liveness). On return
the connection is closed and the last frames it queued (an error frame, a drain) were given a
moment to go out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from control_plane.tunnel.connection import EdgeConnection
from outpost_wire.errors import ErrorCode

__all__ = ["ReadFrame", "WriteFrame", "pump"]

log = logging.getLogger(__name__)

#: The next frame from the edge, or ``None`` when it ended the stream.
ReadFrame = Callable[[], Awaitable[bytes | None]]
#: Send one frame to the edge.
WriteFrame = Callable[[bytes], Awaitable[None]]

_FLUSH_TIMEOUT_S = 1.0


async def pump(
    conn: EdgeConnection,
    *,
    read: ReadFrame,
    write: WriteFrame,
    broken: tuple[type[BaseException], ...] = (),
) -> None:
    """Run ``conn`` until it closes. Exceptions of the types in ``broken`` raised by ``read`` mean
    the carrier broke: they are logged and close the connection."""
    edge_id = conn.edge_id
    writer = asyncio.create_task(conn.writer(write), name=f"tunnel-writer-{edge_id}")
    reader = asyncio.create_task(_read(conn, read, broken), name=f"tunnel-reader-{edge_id}")
    conn.timer.start()
    try:
        await conn.closed.wait()
    finally:
        # Flush what the session queued last (an error frame, a drain) before ending.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(writer, timeout=_FLUSH_TIMEOUT_S)
        await conn.timer.close()
        for task in (writer, reader):
            task.cancel()
        await asyncio.gather(writer, reader, return_exceptions=True)
        conn.close(ErrorCode.UNAVAILABLE, "stream ended")


async def _read(conn: EdgeConnection, read: ReadFrame, broken: tuple[type[BaseException], ...]) -> None:
    try:
        while True:
            data = await read()
            if data is None:
                break
            conn.receive(data)
            if conn.closed.is_set():
                return
    except broken as exc:
        log.info("tunnel to edge %s broke: %s", conn.edge_id, exc)
    conn.close(ErrorCode.UNAVAILABLE, "stream ended")
