"""The read-only content of a session's sandbox: its files and its pinned skills, as wire mounts.

* each ``file`` resource: :func:`~control_plane.sessions.file_resources.file_blob_mounts`, the
  file's bytes at its ``mount_path`` (under ``/mnt/session``);
* each skill the session pinned (``skill_offers`` in the session's body): the version's canonical
  zip, unpacked by the edge at ``/mnt/skills/<name>/`` (the archive's one top-level directory is
  ``<name>/``).

:func:`open_blob` reads a mount's bytes from the blob store, for the gateway to push to the edge
(:mod:`control_plane.tunnel.blob_push`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from control_plane.blobs import BlobStore
from control_plane.errors import NotFound
from control_plane.sessions.file_resources import FILE_TYPE, file_blob_mounts
from control_plane.store.base import Resource, Resources
from outpost_wire.frames import BlobMount

__all__ = ["SKILLS_ROOT", "content_mounts", "open_blob"]

SKILLS_ROOT = "/mnt/skills"
_VERSION_KIND = "skill_version"  # control_plane.skills.catalog.VERSION_KIND
_RESOURCE_KIND = "session_resource"


async def content_mounts(
    store: Resources, session_id: str, resources: Sequence[Resource]
) -> tuple[BlobMount, ...]:
    """The session's files (from ``resources``, its resources) and pinned skills."""
    mounts = list(file_blob_mounts(resources))
    try:
        session = await store.get_resource("session", session_id)
    except NotFound:
        return tuple(mounts)
    for offer in session.body.get("skill_offers") or []:
        version = await _version(store, str(offer["version"]))
        if version is None:
            continue  # deleted since the session pinned it: the edge is told nothing of it
        name = str(version.body["name"])
        mounts.append(
            BlobMount(
                kind="skill",
                name=name,
                sha256=str(version.body["sha256"]),
                size=int(version.body["size_bytes"]),
                mount_path=f"{SKILLS_ROOT}/{name}",
            )
        )
    return tuple(mounts)


async def _version(store: Resources, version_id: str) -> Resource | None:
    try:
        return await store.get_resource(_VERSION_KIND, version_id)
    except NotFound:
        return None


async def open_blob(
    store: Resources, blobs: BlobStore, session_id: str, mount: BlobMount
) -> AsyncIterator[bytes]:
    """The bytes of ``mount`` (a file of the session, or one of its skills), in chunks; ``NotFound``
    if the file or skill version is gone."""
    key = await _blob_key(store, session_id, mount)
    if key is None:
        raise NotFound(mount.kind, mount.name)
    return await blobs.open(key)


async def _blob_key(store: Resources, session_id: str, mount: BlobMount) -> str | None:
    if mount.kind == FILE_TYPE:
        page = await store.list_resources(_RESOURCE_KIND, filters={"session_id": session_id}, limit=200)
        for res in page.items:
            if res.body.get("type") == FILE_TYPE and res.body.get("sha256") == mount.sha256:
                return str(res.body["blob_key"])
        return None
    session = await store.get_resource("session", session_id)
    for offer in session.body.get("skill_offers") or []:
        version = await _version(store, str(offer["version"]))
        if version is not None and version.body.get("sha256") == mount.sha256:
            return str(version.body["blob_key"])
    return None
