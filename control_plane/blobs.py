"""Blob storage: opaque byte strings the control plane keeps beside the store (files, skills).

The store holds documents (``Resources``); bytes too large for a document go here, and the document
keeps the blob's :class:`BlobInfo` (its key, size and sha256). A :class:`BlobStore` takes a blob
from an async stream of chunks (never whole in memory), hands it back as an async stream of
chunks, and deletes it. Services depend on the protocol only; the composition (``server.py``)
picks the implementation: :class:`FilesystemBlobStore`, a directory (``<data_dir>/blobs``).

Blobs are addressed by a random key the store makes at ``put`` (never by a name from a request,
never by their content): two uploads of the same bytes are two blobs, so deleting one is just
deleting it, with no reference count to keep consistent across replicas and no race between a
delete and an upload of the same bytes. The sha256 is computed while the bytes stream in and is
returned for the caller to keep (integrity checks, e.g. the edge's, later).

Writes are atomic: the bytes go to a temporary file in ``<root>/tmp`` (the same filesystem), are
fsynced, then renamed into place (and the directory fsynced): a blob is whole or absent. A put that
fails or is abandoned (the client went away, the stream raised, the size cap was passed) removes
its temporary file; one a crash left behind is removed by :meth:`FilesystemBlobStore.remove_stale`.
With several control-plane replicas on several hosts, the directory must be shared (a network
filesystem with atomic rename, as for the CA's files: docs/scale-out.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import secrets
import time
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from control_plane.errors import ContentTooLarge, NotFound

__all__ = ["BlobInfo", "BlobStore", "FilesystemBlobStore"]

_KEY = re.compile(r"[0-9a-f]{32}")
_WRITE_BYTES = 1024 * 1024  # chunks are gathered to this size before a write (one thread hop each)
READ_CHUNK_BYTES = 256 * 1024
_STALE_S = 24 * 3600.0  # a temporary file untouched this long belongs to no live upload


@dataclass(frozen=True, slots=True)
class BlobInfo:
    key: str  # made by the store; opaque to callers
    size_bytes: int
    sha256: str  # hex


class BlobStore(Protocol):
    async def put(self, chunks: AsyncIterable[bytes], *, max_bytes: int | None = None) -> BlobInfo:
        """Store the bytes of ``chunks`` as a new blob. More than ``max_bytes`` raises
        :class:`ContentTooLarge` as soon as the limit is passed (the rest is not read); then, or
        if ``chunks`` raises or the call is cancelled, nothing is stored."""

    async def open(self, key: str) -> AsyncIterator[bytes]:
        """The blob's bytes, in chunks; ``NotFound`` (kind ``blob``) if there is none."""

    async def delete(self, key: str) -> None:
        """Delete the blob; a missing one is not an error."""


class FilesystemBlobStore:
    """Blobs as files under ``root``: ``<root>/<key[:2]>/<key>``, temporary files in ``<root>/tmp``.
    Blocking file calls run in worker threads (``asyncio.to_thread``), never on the event loop."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._tmp = root / "tmp"

    def _path(self, key: str) -> Path:
        if not _KEY.fullmatch(key):  # keys are ours; anything else never becomes a path
            raise NotFound("blob", key)
        return self.root / key[:2] / key

    async def put(self, chunks: AsyncIterable[bytes], *, max_bytes: int | None = None) -> BlobInfo:
        key = secrets.token_hex(16)
        path = self._path(key)
        tmp = await asyncio.to_thread(self._open_temp, key)
        digest = hashlib.sha256()
        size = 0
        pending: list[bytes] = []
        pending_bytes = 0
        try:
            async for chunk in chunks:
                size += len(chunk)
                if max_bytes is not None and size > max_bytes:
                    raise ContentTooLarge(max_bytes)
                digest.update(chunk)
                pending.append(chunk)
                pending_bytes += len(chunk)
                if pending_bytes >= _WRITE_BYTES:
                    await asyncio.to_thread(tmp.write, b"".join(pending))
                    pending, pending_bytes = [], 0
            if pending:
                await asyncio.to_thread(tmp.write, b"".join(pending))
            await asyncio.to_thread(_commit, tmp, path)
        except BaseException:
            await asyncio.shield(asyncio.to_thread(_discard, tmp))
            raise
        return BlobInfo(key=key, size_bytes=size, sha256=digest.hexdigest())

    def _open_temp(self, key: str) -> BinaryIO:
        self._tmp.mkdir(parents=True, exist_ok=True, mode=0o700)
        return open(self._tmp / key, "xb", opener=_private)  # closed by _commit / _discard

    async def open(self, key: str) -> AsyncIterator[bytes]:
        path = self._path(key)
        try:
            handle = await asyncio.to_thread(path.open, "rb")
        except FileNotFoundError:
            raise NotFound("blob", key) from None
        return _read(handle)

    async def delete(self, key: str) -> None:
        path = self._path(key)
        await asyncio.to_thread(path.unlink, missing_ok=True)

    def remove_stale(self, older_than_s: float = _STALE_S) -> int:
        """Remove temporary files a crash left behind (untouched for ``older_than_s``: an upload
        in progress writes to its file at least every body timeout). Blocking: call it in a
        thread. Returns how many were removed."""
        removed = 0
        cutoff = time.time() - older_than_s
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self._tmp):
                with contextlib.suppress(FileNotFoundError):
                    if entry.is_file() and entry.stat().st_mtime < cutoff:
                        os.unlink(entry.path)
                        removed += 1
        return removed


def _private(path: str, flags: int) -> int:
    return os.open(path, flags, 0o600)


def _commit(tmp: BinaryIO, path: Path) -> None:
    tmp.flush()
    os.fsync(tmp.fileno())
    tmp.close()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.replace(tmp.name, path)
    _fsync_dir(path.parent)


def _discard(tmp: BinaryIO) -> None:
    tmp.close()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp.name)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


async def _read(handle: BinaryIO) -> AsyncIterator[bytes]:
    try:
        while chunk := await asyncio.to_thread(handle.read, READ_CHUNK_BYTES):
            yield chunk
    finally:
        handle.close()
