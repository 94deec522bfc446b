"""The filesystem blob store: atomic puts, the size cap, aborted puts leave nothing, delete."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from control_plane.blobs import FilesystemBlobStore
from control_plane.errors import ContentTooLarge, NotFound


def files_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


async def chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def read_all(store: FilesystemBlobStore, key: str) -> bytes:
    return b"".join([chunk async for chunk in await store.open(key)])


async def test_put_open_delete(tmp_path: Path) -> None:
    store = FilesystemBlobStore(tmp_path / "blobs")
    data = os.urandom(3 * 1024 * 1024 + 17)  # several writes and reads
    info = await store.put(chunks(data[:1000], data[1000:]))
    assert (info.size_bytes, info.sha256) == (len(data), hashlib.sha256(data).hexdigest())
    assert await read_all(store, info.key) == data
    [path] = files_under(tmp_path / "blobs")
    assert path.name == info.key and path.stat().st_mode & 0o777 == 0o600
    await store.delete(info.key)
    await store.delete(info.key)  # a missing blob is not an error
    with pytest.raises(NotFound):
        await store.open(info.key)
    assert files_under(tmp_path / "blobs") == []


async def test_two_puts_of_the_same_bytes_are_two_blobs(tmp_path: Path) -> None:
    store = FilesystemBlobStore(tmp_path)
    first, second = await store.put(chunks(b"same")), await store.put(chunks(b"same"))
    assert first.key != second.key and first.sha256 == second.sha256
    await store.delete(first.key)
    assert await read_all(store, second.key) == b"same"


async def test_over_the_cap_stops_reading_and_leaves_nothing(tmp_path: Path) -> None:
    store = FilesystemBlobStore(tmp_path)
    pulled = 0

    async def endless() -> AsyncIterator[bytes]:
        nonlocal pulled
        while True:
            pulled += 1
            yield b"x" * 1000

    with pytest.raises(ContentTooLarge) as caught:
        await store.put(endless(), max_bytes=10_000)
    assert caught.value.limit == 10_000 and pulled == 11  # not one chunk more than needed
    assert files_under(tmp_path) == []
    exact = await store.put(chunks(b"y" * 10_000), max_bytes=10_000)
    assert exact.size_bytes == 10_000


async def test_a_failed_or_cancelled_put_leaves_nothing(tmp_path: Path) -> None:
    store = FilesystemBlobStore(tmp_path)

    async def failing() -> AsyncIterator[bytes]:
        yield b"some bytes"
        raise ConnectionResetError("the client went away")

    with pytest.raises(ConnectionResetError):
        await store.put(failing())
    assert files_under(tmp_path) == []

    started = asyncio.Event()

    async def stalled() -> AsyncIterator[bytes]:
        yield b"first"
        started.set()
        await asyncio.Event().wait()
        yield b"never"

    task = asyncio.create_task(store.put(stalled()))
    await asyncio.wait_for(started.wait(), timeout=10)
    assert len(files_under(tmp_path / "tmp")) == 1  # in progress: a temporary file only
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert files_under(tmp_path) == []


async def test_keys_never_become_paths(tmp_path: Path) -> None:
    store = FilesystemBlobStore(tmp_path / "blobs")
    (tmp_path / "secret").write_bytes(b"not a blob")
    for key in ("../secret", "/etc/passwd", "ab", "A" * 32):
        with pytest.raises(NotFound):
            await store.open(key)
        with pytest.raises(NotFound):
            await store.delete(key)
    assert (tmp_path / "secret").exists()


def test_remove_stale_keeps_uploads_in_progress(tmp_path: Path) -> None:
    store = FilesystemBlobStore(tmp_path)
    (tmp_path / "tmp").mkdir()
    old, fresh = tmp_path / "tmp" / ("a" * 32), tmp_path / "tmp" / ("b" * 32)
    old.write_bytes(b"left by a crash")
    fresh.write_bytes(b"being written")
    day_ago = time.time() - 2 * 86_400
    os.utime(old, (day_ago, day_ago))
    assert store.remove_stale() == 1
    assert not old.exists() and fresh.exists()
