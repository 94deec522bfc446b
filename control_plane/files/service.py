"""Files: bytes a client uploads once and sessions use later, and the rules, whoever asks.

A file is two parts: its bytes, a blob in the :class:`~control_plane.blobs.BlobStore`, and its
metadata, a resource of kind ``file`` in the store's :class:`Resources` role (so every store
backend keeps files without a schema of its own). The bytes are stored first and the metadata
last: a file is listed only once its bytes are whole, and a failed upload leaves nothing (its
blob is deleted). Deleting goes the other way round (metadata, then bytes), so no listed file ever
lacks its bytes; a crash in between leaves at most an unlisted blob.

Rules: a file is at most ``max_file_bytes`` (:class:`ContentTooLarge` past it, found while the
bytes stream in); its name is the last path component of the name it was sent with (control
characters dropped, at most 255 characters; none: ``unnamed`` plus the extension of its type); its
type is the ``type/subtype`` it was sent with, else one guessed from the name, else
``application/octet-stream``; ``expires_in_seconds`` (3600 to 7776000, as the hosted API) sets
``expires_at``. An expired file is gone: reads answer ``NotFound`` and delete it (lazily), and
:meth:`FileService.purge_expired` (the retention pruner) deletes the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import mimetypes
import re
import secrets
import unicodedata
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta
from typing import Any

from control_plane.blobs import BlobInfo, BlobStore
from control_plane.errors import ContentTooLarge, InvalidRequest, NotFound
from control_plane.files.commands import FilePage, FileQuery, Upload, UploadFields
from control_plane.store.base import Order, Resource, Resources
from control_plane.timestamps import timestamp

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "MAX_EXPIRES_IN_S",
    "MAX_LIST_IDS",
    "MAX_LIST_LIMIT",
    "MIN_EXPIRES_IN_S",
    "RESOURCE_KIND",
    "FileService",
    "new_file_id",
]

RESOURCE_KIND = "file"
DEFAULT_MAX_FILE_BYTES = 500 * 1024 * 1024  # the hosted Files API's cap per file
MIN_EXPIRES_IN_S = 3600
MAX_EXPIRES_IN_S = 90 * 86_400
MAX_LIST_LIMIT = 1000
MAX_LIST_IDS = 100
_DEFAULT_LIMIT = 20
_MAX_NAME_CHARS = 255
_OCTET_STREAM = "application/octet-stream"
_MIME_PART = r"[a-z0-9][a-z0-9!#$&^_.+-]{0,126}"
_MIME = re.compile(f"{_MIME_PART}/{_MIME_PART}")
_TYPES = mimetypes.MimeTypes()  # Python's own table only: the same guesses on every host


def new_file_id() -> str:
    return "file_" + secrets.token_hex(12)


class FileService:
    def __init__(
        self,
        store: Resources,
        blobs: BlobStore,
        clock: Callable[[], datetime],
        *,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    ) -> None:
        self._store = store
        self._blobs = blobs
        self._clock = clock
        self.max_file_bytes = max_file_bytes

    async def upload(self, upload: Upload) -> Resource:
        """Store the upload's bytes, then its metadata; nothing is kept if either fails."""
        try:
            blob = await self._blobs.put(upload.content(), max_bytes=self.max_file_bytes)
        except ContentTooLarge:
            raise ContentTooLarge(self.max_file_bytes, "the file") from None
        try:
            return await self._record(blob, upload.fields())
        except BaseException:
            await asyncio.shield(self._blobs.delete(blob.key))
            raise

    async def _record(self, blob: BlobInfo, fields: UploadFields) -> Resource:
        now = self._clock()
        expires_at = None
        if fields.expires_in_seconds is not None:
            seconds = fields.expires_in_seconds
            if not MIN_EXPIRES_IN_S <= seconds <= MAX_EXPIRES_IN_S:
                raise InvalidRequest(
                    f"expires_in_seconds must be between {MIN_EXPIRES_IN_S} and {MAX_EXPIRES_IN_S}",
                    param="expires_in_seconds",
                )
            expires_at = timestamp(now + timedelta(seconds=seconds))
        mime_type = _mime_type(fields.content_type, fields.filename)
        body: dict[str, Any] = {
            "filename": _filename(fields.filename, mime_type),
            "mime_type": mime_type,
            "size_bytes": blob.size_bytes,
            "sha256": blob.sha256,
            "blob_key": blob.key,
            "expires_at": expires_at,
            "scope_id": None,  # uploaded through the API: no session's
            "downloadable": True,
        }
        return await self._store.create_resource(RESOURCE_KIND, new_file_id(), body, now)

    async def get(self, file_id: str) -> Resource:
        """The file's metadata; ``NotFound`` if it does not exist or has expired."""
        res = await self._store.get_resource(RESOURCE_KIND, file_id)
        if self._expired(res):
            await self._purge(res)
            raise NotFound(RESOURCE_KIND, file_id)
        return res

    async def content(self, file_id: str) -> tuple[Resource, AsyncIterator[bytes]]:
        """The file's metadata and its bytes, in chunks."""
        res = await self.get(file_id)
        try:
            return res, await self._blobs.open(res.body["blob_key"])
        except NotFound:  # deleted meanwhile
            raise NotFound(RESOURCE_KIND, file_id) from None

    async def delete(self, file_id: str) -> None:
        res = await self.get(file_id)
        await self._purge(res)

    async def list_files(self, query: FileQuery) -> FilePage:
        if query.ids:
            return await self._by_ids(query)
        limit = _DEFAULT_LIMIT if query.limit is None else query.limit
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise InvalidRequest(f"limit must be between 1 and {MAX_LIST_LIMIT}", param="limit")
        filters = {"scope_id": query.scope_id} if query.scope_id is not None else None
        items: list[Resource] = []
        cursor = query.cursor
        while True:  # expired files are deleted and skipped; ask for just what is still missing
            page = await self._store.list_resources(
                RESOURCE_KIND, filters=filters, limit=limit - len(items), cursor=cursor
            )
            for res in page.items:
                if self._expired(res):
                    await self._purge(res)
                else:
                    items.append(res)
            cursor = page.next_cursor
            if len(items) >= limit or cursor is None:
                return FilePage(items, cursor)

    async def _by_ids(self, query: FileQuery) -> FilePage:
        if query.limit is not None or query.cursor is not None:
            raise InvalidRequest("ids cannot be combined with page or limit", param="ids")
        ids = list(dict.fromkeys(query.ids))
        if len(ids) > MAX_LIST_IDS:
            raise InvalidRequest(f"at most {MAX_LIST_IDS} ids", param="ids")
        items = []
        for file_id in ids:
            try:
                res = await self.get(file_id)
            except NotFound:
                continue  # unknown, deleted and expired ids are left out
            if query.scope_id is None or res.body.get("scope_id") == query.scope_id:
                items.append(res)
        items.sort(key=lambda r: r.created_at, reverse=True)
        return FilePage(items, None)

    async def purge_expired(self, batch_size: int = 100) -> int:
        """Delete every expired file (retention); returns how many. Reads every file's metadata,
        ``batch_size`` at a time."""
        purged = 0
        cursor: str | None = None
        while True:
            page = await self._store.list_resources(
                RESOURCE_KIND, limit=batch_size, cursor=cursor, order=Order.ASC
            )
            for res in page.items:
                if self._expired(res):
                    await self._purge(res)
                    purged += 1
            cursor = page.next_cursor
            if cursor is None:
                return purged
            await asyncio.sleep(0)  # let other work in between batches

    def _expired(self, res: Resource) -> bool:
        expires_at = res.body.get("expires_at")
        return expires_at is not None and datetime.fromisoformat(expires_at) <= self._clock()

    async def _purge(self, res: Resource) -> None:
        """Metadata first, then the bytes; either may be gone already (a concurrent delete)."""
        with contextlib.suppress(NotFound):
            await self._store.delete_resource(RESOURCE_KIND, res.id)
        await self._blobs.delete(res.body["blob_key"])


def _mime_type(sent: str | None, filename: str | None) -> str:
    if sent is not None:
        value = sent.split(";", 1)[0].strip().lower()
        if _MIME.fullmatch(value) and value != _OCTET_STREAM:
            return value
    if filename:
        guessed, encoding = _TYPES.guess_type(_last_component(filename), strict=False)
        if guessed is not None and encoding is None:
            return guessed
    return _OCTET_STREAM


def _last_component(name: str) -> str:
    return re.split(r"[/\\]", name)[-1]


def _filename(sent: str | None, mime_type: str) -> str:
    name = _last_component(sent or "")
    name = "".join(c for c in name if unicodedata.category(c) not in ("Cc", "Cf")).strip()
    if name in ("", ".", ".."):
        return "unnamed" + (_TYPES.guess_extension(mime_type, strict=False) or "")
    return name[:_MAX_NAME_CHARS]
