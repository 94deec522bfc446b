"""The gateway's push of files and skills to an edge: chunked, stopped early by a cached blob,
retried once, then an error that names the file."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from control_plane.tunnel.blob_push import SendChunk, push_blobs
from edge_agent.sandbox.content_mounts import BlobRefused, ContentMounts
from outpost_wire.errors import ErrorCode, RemoteError
from outpost_wire.frames import BLOB_CHUNK_BYTES, BlobMount, BlobStored, Failure, Outcome, PutBlob

DATA = bytes(range(256)) * (BLOB_CHUNK_BYTES // 256 * 2 + 3)  # two full chunks and a bit
MOUNT = BlobMount(
    "file", "file_1", hashlib.sha256(DATA).hexdigest(), len(DATA), "/mnt/session/uploads/file_1"
)


async def _source(session_id: str, mount: BlobMount) -> AsyncIterator[bytes]:
    async def pieces() -> AsyncIterator[bytes]:
        for start in range(0, len(DATA), 100_000):  # not chunk-aligned: the push re-chunks
            yield DATA[start : start + 100_000]

    return pieces()


def _edge(content: ContentMounts, sent: list[PutBlob], *, corrupt: int = 0) -> SendChunk:
    """A fake link to a real blob cache; the first ``corrupt`` chunks arrive with a flipped byte."""

    async def send(chunk: PutBlob) -> Outcome:
        sent.append(chunk)
        if len(sent) <= corrupt and chunk.data:
            chunk = PutBlob(chunk.sha256, chunk.total_size, chunk.offset, b"\xff" + chunk.data[1:])
        try:
            return content.put_chunk("s1", chunk)
        except BlobRefused as exc:
            return Failure(ErrorCode.SANDBOX_UNAVAILABLE, str(exc))

    return send


async def test_chunks_then_cached(tmp_path: Path) -> None:
    content = ContentMounts(tmp_path)
    sent: list[PutBlob] = []
    await push_blobs("s1", [MOUNT, MOUNT], _source, _edge(content, sent))
    assert [len(c.data) for c in sent] == [
        BLOB_CHUNK_BYTES,
        BLOB_CHUNK_BYTES,
        len(DATA) - 2 * BLOB_CHUNK_BYTES,
    ]
    assert content.blob_path(MOUNT.sha256).read_bytes() == DATA
    sent.clear()
    await push_blobs("s2", [MOUNT], _source, _edge(content, sent))
    assert len(sent) == 1  # the edge holds it: the first chunk's answer is complete


async def test_a_corrupted_transfer_is_sent_once_more(tmp_path: Path) -> None:
    content = ContentMounts(tmp_path)
    sent: list[PutBlob] = []
    await push_blobs("s1", [MOUNT], _source, _edge(content, sent, corrupt=1))
    assert len(sent) == 6 and content.has(MOUNT.sha256)


async def test_two_failures_name_the_file(tmp_path: Path) -> None:
    content = ContentMounts(tmp_path)
    with pytest.raises(RemoteError, match=r"file file_1 could not be delivered.*checksum mismatch"):
        await push_blobs("s1", [MOUNT], _source, _edge(content, [], corrupt=10))
    assert not content.has(MOUNT.sha256)


async def test_a_chunk_answer_that_does_not_add_up_fails(tmp_path: Path) -> None:
    async def lossy(chunk: PutBlob) -> Outcome:
        return BlobStored(chunk.sha256, 0, False)

    with pytest.raises(RemoteError, match="file_1"):
        await push_blobs("s1", [MOUNT], _source, lossy)
