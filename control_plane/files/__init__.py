"""Files: uploaded bytes and their metadata (``/v1/files``).

* :mod:`~control_plane.files.service` — :class:`FileService`, the rules (size cap, name and type,
  expiry); the bytes live in a :class:`~control_plane.blobs.BlobStore`, the metadata in the store.
* :mod:`~control_plane.files.commands` — what the service is asked (the API's router builds them).
"""

from __future__ import annotations

from control_plane.files.commands import FilePage, FileQuery, Upload, UploadFields
from control_plane.files.service import DEFAULT_MAX_FILE_BYTES, FileService

__all__ = ["DEFAULT_MAX_FILE_BYTES", "FilePage", "FileQuery", "FileService", "Upload", "UploadFields"]
