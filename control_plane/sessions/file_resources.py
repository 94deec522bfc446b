"""A session's files (``file`` resources): validation, storage, views, the wire mounts.

Params (``resources[]`` of ``POST /v1/sessions``, and ``POST /v1/sessions/{id}/resources``), as
the SDK sends them::

    {"type": "file", "file_id": "file_...",
     "mount_path": "/mnt/session/uploads/report.csv"}   # optional; default /mnt/session/uploads/<file_id>

The file must exist (``NotFound`` otherwise). ``mount_path`` is a normalized absolute path under
:data:`MOUNT_ROOT` (the directory the edge mounts read-only), without ``..``, ``.`` or empty
segments or control characters, at most :data:`MAX_MOUNT_PATH_CHARS` characters, and neither the
same as nor inside or above another file's path in the session. At most :data:`MAX_FILES` per
session. Stored as a resource of kind ``session_resource`` with the file's ``sha256``,
``size_bytes`` and ``blob_key`` snapshotted at attach time (the content the edge gets); shown as
the SDK's ``BetaManagedAgentsFileResource``.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from control_plane.errors import InvalidRequest
from control_plane.store.base import Resource, Resources
from control_plane.timestamps import timestamp
from outpost_wire.frames import BlobMount

__all__ = [
    "FILE_TYPE",
    "MAX_FILES",
    "MOUNT_ROOT",
    "file_blob_mounts",
    "file_json",
    "resolve_file_resource",
]

FILE_TYPE = "file"
MOUNT_ROOT = "/mnt/session"
DEFAULT_DIR = MOUNT_ROOT + "/uploads"
MAX_FILES = 64
MAX_MOUNT_PATH_CHARS = 1024
_FIELDS = frozenset({"type", "file_id", "mount_path"})
_FILE_KIND = "file"  # control_plane.files.service.RESOURCE_KIND


async def resolve_file_resource(
    store: Resources, item: Any, where: str, existing: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The stored body (without ``session_id``) of one ``file`` resource param; ``existing``: the
    bodies of the session's other resources (their mount paths must not collide)."""
    if not isinstance(item, Mapping):
        raise InvalidRequest(f"{where}: must be an object", param=where)
    unknown = sorted(set(item) - _FIELDS)
    if unknown:
        raise InvalidRequest(f"{where}: unknown field(s) {', '.join(unknown)}", param=where)
    if item.get("type") != FILE_TYPE:
        raise InvalidRequest(f"{where}.type: must be 'file'", param=f"{where}.type")
    file_id = item.get("file_id")
    if not isinstance(file_id, str) or not file_id or len(file_id) > 255:
        raise InvalidRequest(f"{where}.file_id: required, a file id", param=f"{where}.file_id")
    files = [body for body in existing if body.get("type") == FILE_TYPE]
    if len(files) >= MAX_FILES:
        raise InvalidRequest(f"{where}: at most {MAX_FILES} files per session", param=where)
    mount_path = item.get("mount_path")
    if mount_path is None:
        mount_path = f"{DEFAULT_DIR}/{file_id}"
    mount_path = _check_mount_path(mount_path, f"{where}.mount_path")
    for other in files:
        theirs = str(other["mount_path"])
        if mount_path == theirs or mount_path.startswith(theirs + "/") or theirs.startswith(mount_path + "/"):
            raise InvalidRequest(
                f"{where}.mount_path: {mount_path} collides with {theirs} of file {other['file_id']}",
                param=f"{where}.mount_path",
            )
    res = await store.get_resource(_FILE_KIND, file_id)
    return {
        "type": FILE_TYPE,
        "file_id": file_id,
        "mount_path": mount_path,
        "sha256": res.body["sha256"],
        "size_bytes": res.body["size_bytes"],
        "blob_key": res.body["blob_key"],
    }


def _check_mount_path(value: Any, where: str) -> str:
    ok = (
        isinstance(value, str)
        and 0 < len(value) <= MAX_MOUNT_PATH_CHARS
        and value.startswith(MOUNT_ROOT + "/")
        and posixpath.normpath(value) == value
        and ".." not in value.split("/")
        and not any(ord(c) < 32 or c == "\x7f" for c in value)
    )
    if not ok:
        raise InvalidRequest(
            f"{where}: must be a normalized absolute path inside {MOUNT_ROOT}/ (mounted read-only), "
            f"at most {MAX_MOUNT_PATH_CHARS} characters, without '..'",
            param=where,
        )
    return str(value)


def file_json(res: Resource) -> dict[str, Any]:
    """A file resource as the API shows it (the SDK's ``BetaManagedAgentsFileResource``)."""
    return {
        "type": FILE_TYPE,
        "id": res.id,
        "file_id": res.body["file_id"],
        "mount_path": res.body["mount_path"],
        "created_at": timestamp(res.created_at),
        "updated_at": timestamp(res.updated_at),
    }


def file_blob_mounts(resources: Sequence[Resource]) -> tuple[BlobMount, ...]:
    """The wire mounts of a session's files, in order."""
    return tuple(
        BlobMount(
            kind="file",
            name=str(r.body["file_id"]),
            sha256=str(r.body["sha256"]),
            size=int(r.body["size_bytes"]),
            mount_path=str(r.body["mount_path"]),
        )
        for r in resources
        if r.body.get("type") == FILE_TYPE
    )
