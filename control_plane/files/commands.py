"""What :class:`~control_plane.files.service.FileService` is asked.

Typed values, not HTTP: the API's router reads the multipart body into an :class:`Upload` and the
query string into a :class:`FileQuery`. The service's answers are the store's ``Resource`` (a
file's metadata) and :class:`FilePage`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from control_plane.store.base import Resource

__all__ = ["FilePage", "FileQuery", "Upload", "UploadFields"]


@dataclass(frozen=True, slots=True)
class UploadFields:
    """What came with the bytes, as the client sent it (the service checks and cleans it)."""

    filename: str | None = None  # the part's filename; only its last path component is kept
    content_type: str | None = None  # the part's Content-Type
    expires_in_seconds: int | None = None  # None: the file does not expire


class Upload(Protocol):
    """One upload: its bytes as they arrive, then what came with them. The fields are read after
    the content is consumed (a multipart body may carry them after the file's part)."""

    def content(self) -> AsyncIterator[bytes]: ...

    def fields(self) -> UploadFields: ...


@dataclass(frozen=True, slots=True)
class FileQuery:
    """A page of files, newest first; or, with ``ids``, exactly those that exist (one page)."""

    limit: int | None = None  # None: 20 (not combinable with ``ids``)
    cursor: str | None = None  # the store's
    ids: Sequence[str] = ()
    scope_id: str | None = None  # only files of that scope (a session); None: every file


@dataclass(frozen=True, slots=True)
class FilePage:
    items: list[Resource]
    next_cursor: str | None
