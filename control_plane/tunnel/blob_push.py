"""Push a session's files and skills to its edge before the sandbox spec that mounts them.

When the gateway sends a session's spec to an edge (:mod:`control_plane.tunnel.gateway`) and the
spec names :class:`~outpost_wire.frames.BlobMount` s, it first sends each blob's bytes in
:class:`~outpost_wire.frames.PutBlob` requests of :data:`~outpost_wire.frames.BLOB_CHUNK_BYTES`,
in order, each answered by :class:`~outpost_wire.frames.BlobStored`. The edge keeps blobs by
sha256: a blob it holds already answers the first chunk ``complete`` and the rest is not sent, so
a second session with the same file or skill costs one small round trip. The edge checks the
sha256 when it holds the whole blob. A blob that fails (a chunk lost, a checksum mismatch, the
edge's disk budget) is sent once more from the start; a second failure raises
:class:`~outpost_wire.errors.RemoteError` naming the file or skill, which the harness reports to
the model as the tool call's error.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from outpost_wire.errors import ErrorCode, RemoteError
from outpost_wire.frames import BLOB_CHUNK_BYTES, BlobMount, BlobStored, Failure, Outcome, PutBlob

__all__ = ["BlobSource", "SendChunk", "push_blobs"]

log = logging.getLogger(__name__)

BlobSource = Callable[[str, BlobMount], Awaitable[AsyncIterator[bytes]]]
"""``(session_id, mount)`` -> the blob's bytes, in chunks of any size."""
SendChunk = Callable[[PutBlob], Awaitable[Outcome]]

_ATTEMPTS = 2  # a failed blob is sent once more from the start


async def push_blobs(
    session_id: str, mounts: Sequence[BlobMount], source: BlobSource, send: SendChunk
) -> None:
    """Make the edge hold every blob of ``mounts`` (each sha256 once)."""
    done: set[str] = set()
    for mount in mounts:
        if mount.sha256 in done:
            continue
        problem = ""
        for attempt in range(_ATTEMPTS):
            problem = await _push_one(session_id, mount, source, send)
            if not problem:
                break
            log.warning(
                "session %s: sending %s %s to the edge failed (attempt %d): %s",
                session_id,
                mount.kind,
                mount.name,
                attempt + 1,
                problem,
            )
        if problem:
            raise RemoteError(
                ErrorCode.SANDBOX_UNAVAILABLE,
                f"the {mount.kind} {mount.name} could not be delivered to the sandbox's edge: {problem}",
            )
        done.add(mount.sha256)


async def _push_one(session_id: str, mount: BlobMount, source: BlobSource, send: SendChunk) -> str:
    """Send one blob; "" when the edge holds it whole, else what went wrong."""
    try:
        chunks = await source(session_id, mount)
    except Exception as exc:  # gone from the store, unreadable: named in the error
        return f"its content cannot be read on the control plane ({exc})"
    offset = 0
    try:
        async for data in _rechunk(chunks):
            outcome = await send(PutBlob(mount.sha256, mount.size, offset, data))
            if isinstance(outcome, Failure):
                return outcome.message
            if not isinstance(outcome, BlobStored):
                return f"unexpected answer {type(outcome).__name__}"
            if outcome.complete:
                return ""
            offset += len(data)
            if outcome.received != offset:
                return f"the edge holds {outcome.received} bytes after a chunk ending at {offset}"
        if offset == 0 and mount.size == 0:
            outcome = await send(PutBlob(mount.sha256, 0, 0, b""))
            if isinstance(outcome, BlobStored) and outcome.complete:
                return ""
            return outcome.message if isinstance(outcome, Failure) else "the edge did not take the empty file"
        return f"the content ended after {offset} of {mount.size} bytes without the edge completing it"
    finally:
        with contextlib.suppress(Exception):
            await chunks.aclose()  # type: ignore[attr-defined]


async def _rechunk(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    buffer = bytearray()
    async for piece in chunks:
        buffer += piece
        while len(buffer) >= BLOB_CHUNK_BYTES:
            yield bytes(buffer[:BLOB_CHUNK_BYTES])
            del buffer[:BLOB_CHUNK_BYTES]
    if buffer:
        yield bytes(buffer)
