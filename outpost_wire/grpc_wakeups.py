"""Keep grpc-aio's completion hand-off from stalling every gRPC stream of a busy process.

How grpc-aio (grpcio 1.8x) hands completions to asyncio: a poller thread takes each finished
operation (a message read, a message written) off the core's completion queue, queues it, and
writes **one byte** to a socketpair whose other end is an ``add_reader`` callback on the event loop.
That callback reads **one byte** and then runs every queued completion. The writing end is a
*blocking* socket. So a process whose loop iterates less often than operations complete piles up
bytes (one per completion, one removed per loop iteration); after ~280 of them the socketpair is
full (each 1-byte write costs a whole socket buffer entry) and the poller thread blocks in
``write()`` (grpc/grpc#40989 shows the same blocked write at shutdown). From then on no gRPC
completion reaches Python at all, on any stream, until the loop has consumed much of the backlog,
again one byte per iteration: with a loop running 1,000
sessions (20-50 iterations a second) that is 3-10 s in which the control plane neither receives
nor sends a single tunnel frame, while its loop, its timers and its HTTP side run on. Every edge
then sees its control plane go silent past its heartbeat timeout and drops the tunnel, all at once,
and the control plane in turn sees the edges' heartbeats stop (``scale`` bench, issue 11).

:func:`drain_grpc_wakeups` replaces that loop callback with one that reads every pending byte but
one, then runs grpc's own handler (which reads the last byte and runs all queued completions), so
one loop iteration clears the backlog whatever its size and the poller thread never blocks. It
reaches into grpc's private ``PollerCompletionQueue`` (found through the garbage collector, as
grpc keeps it in a C-level global); if a grpcio release changes that shape, nothing is replaced
and a warning says so (``tests/integration/test_tunnel_busy_loop.py`` then fails).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import gc
import logging
import socket
import sys
import termios
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["drain_grpc_wakeups", "wakeups_drained"]

log = logging.getLogger(__name__)

#: Per loop: the poller thread of the completion queue whose reader was replaced (alive while
#: that queue is grpc's current one), and its wake-up socket.
_drained: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[threading.Thread, socket.socket]] = (
    weakref.WeakKeyDictionary()
)


def drain_grpc_wakeups(loop: asyncio.AbstractEventLoop | None = None) -> bool:
    """Make ``loop`` (default: the running loop) drain grpc-aio's wake-up socket whole at every
    wake-up. Call it once grpc-aio is set up on the loop (a ``grpc.aio`` server or channel was made
    on it); grpc-aio makes a new completion queue when its last server or channel is gone and
    another is made, so call it again then (it is cheap while the queue is the same). Returns
    whether the reader is in place (False: grpc-aio has no wake-up socket on this loop, or one of a
    shape this does not know; nothing was changed then)."""
    loop = asyncio.get_running_loop() if loop is None else loop
    done = _drained.get(loop)
    if done is not None and done[0].is_alive():
        return True  # grpc removes the reader only when it shuts that queue (and its thread) down
    _drained.pop(loop, None)
    try:
        from grpc._cython import cygrpc
    except ImportError:  # pragma: no cover - grpc is a dependency of both daemons
        return False
    queue_type: Any = getattr(cygrpc, "PollerCompletionQueue", None)
    if queue_type is not None:
        # type(), not isinstance(): dead weakref proxies among the objects raise on isinstance().
        for queue in (o for o in gc.get_objects() if type(o) is queue_type):
            found = _wakeup_socket(queue, loop)
            if found is None:
                continue
            thread, sock = found
            on_readable = _drain_then(sock, functools.partial(queue._handle_events, loop))
            loop.remove_reader(sock)  # grpc's own reader (uvloop returns None, not a bool)
            loop.add_reader(sock, on_readable)
            _drained[loop] = (thread, sock)
            log.debug("grpc-aio wake-ups on fd %d are drained whole at every wake-up", sock.fileno())
            return True
    log.warning("grpc-aio's wake-up socket was not found on this loop: it is left as it is")
    return False


def _wakeup_socket(
    queue: Any, loop: asyncio.AbstractEventLoop
) -> tuple[threading.Thread, socket.socket] | None:
    """The live poller thread of ``queue`` and the socket it wakes ``loop`` through, if ``queue``
    has the shape of grpcio 1.6x-1.8x: referents ``_poller_thread``, the two sockets and
    ``_loops`` (loop -> bound loop, whose referents are the loop and the reading socket)."""
    if not callable(getattr(queue, "_handle_events", None)):
        return None
    referents = gc.get_referents(queue)
    threads = [r for r in referents if isinstance(r, threading.Thread) and r.is_alive()]
    bound = [r[loop] for r in referents if isinstance(r, dict) and loop in r]
    if len(threads) != 1 or len(bound) != 1:
        return None
    socks = [r for r in gc.get_referents(bound[0]) if isinstance(r, socket.socket) and r.fileno() != -1]
    if len(socks) != 1:
        return None
    return threads[0], socks[0]


def wakeups_drained(loop: asyncio.AbstractEventLoop | None = None) -> bool:
    """Whether :func:`drain_grpc_wakeups` replaced the reader on ``loop`` (default: the running
    loop) and it is still in place."""
    done = _drained.get(asyncio.get_running_loop() if loop is None else loop)
    return done is not None and done[0].is_alive()


def _drain_then(sock: socket.socket, handle_events: Callable[[], object]) -> Callable[[], None]:
    def on_readable() -> None:
        pending = _pending_bytes(sock)
        if pending > 1:
            # Leave one byte: grpc's handler reads exactly one (on a socket that may block).
            # Only the poller thread writes, so what is pending can only grow meanwhile.
            with contextlib.suppress(BlockingIOError, InterruptedError):
                sock.recv(pending - 1)
        handle_events()

    return on_readable


def _pending_bytes(sock: socket.socket) -> int:
    buf = bytearray(4)
    try:
        fcntl.ioctl(sock.fileno(), termios.FIONREAD, buf)
    except OSError:
        return 0
    return int.from_bytes(buf, sys.byteorder, signed=True)
