"""Skills: uploaded skill directories, versioned, and the rules, whoever asks (``/v1/skills``).

A skill version is two parts: its canonical zip (:mod:`~control_plane.skills.archive`), a blob in
the :class:`~control_plane.blobs.BlobStore`, and its metadata, a ``skill_version`` resource
(:mod:`~control_plane.skills.catalog`); the skill itself is a ``skill`` resource that names its
newest version (``latest_version_id``). Writes go bytes first, metadata last (a failed upload
leaves nothing: its blob is deleted); deletes go metadata first, bytes last, as for files.

Rules, as the hosted product's: a skill always holds at least one version (created with its first
upload); the slug (``name``) is set by the first upload and every later upload must resolve to
the same; ``display_name`` (one line, at most 255 characters) defaults to the slug. Deleting a
skill deletes its versions; deleting a skill's only version is refused (400: delete the skill).
Deleting the newest version makes the next newest ``latest``. Only ``custom`` skills exist here:
Outpost has none of Anthropic's own (``source`` ``anthropic`` lists nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any

from control_plane.blobs import BlobStore
from control_plane.errors import Conflict, InvalidRequest, NotFound, VersionConflict
from control_plane.skills.archive import SkillArchive, SkillLimits, build_archive
from control_plane.skills.catalog import SKILL_KIND, VERSION_KIND, SkillCatalog
from control_plane.skills.commands import SkillPage, SkillQuery, SkillUpload, VersionQuery
from control_plane.store.base import Order, Resource, Resources

__all__ = ["MAX_DISPLAY_NAME_CHARS", "MAX_LIST_LIMIT", "SOURCES", "SkillService", "new_skill_id"]

MAX_LIST_LIMIT = 1000
MAX_DISPLAY_NAME_CHARS = 255
SOURCES = ("custom", "anthropic", "anthropic_example", "plugin")
_DEFAULT_LIMIT = 20
_UPDATE_ATTEMPTS = 5
_DELETE_BATCH = 100


def new_skill_id() -> str:
    return "skill_" + secrets.token_hex(12)


def new_skill_version_id() -> str:
    return "skillver_" + secrets.token_hex(12)


async def _one_chunk(data: bytes) -> AsyncIterator[bytes]:
    yield data


class SkillService:
    def __init__(
        self,
        store: Resources,
        blobs: BlobStore,
        clock: Callable[[], datetime],
        *,
        limits: SkillLimits | None = None,
    ) -> None:
        self._store = store
        self._blobs = blobs
        self._clock = clock
        self.limits = limits or SkillLimits()
        self.catalog = SkillCatalog(store)

    # -- skills ------------------------------------------------------------------------------
    async def create(self, upload: SkillUpload) -> Resource:
        """A new skill with its first version."""
        display_name = _display_name(upload.display_name)
        archive = build_archive(upload.files, self.limits)
        skill_id = new_skill_id()
        version = await self._store_version(skill_id, archive)
        body = {
            "display_name": display_name or archive.name,
            "name": archive.name,
            "source": "custom",
            "latest_version_id": version.id,
        }
        try:
            return await self._store.create_resource(SKILL_KIND, skill_id, body, version.created_at)
        except BaseException:
            await asyncio.shield(self._purge_version(version))
            raise

    async def get(self, skill_id: str) -> Resource:
        return await self.catalog.skill(skill_id)

    async def list_skills(self, query: SkillQuery) -> SkillPage:
        limit = _limit(query.limit)
        if query.source is not None and query.source not in SOURCES:
            raise InvalidRequest(f"source must be one of {', '.join(SOURCES)}", param="source")
        if query.source not in (None, "custom"):  # Outpost holds custom skills only
            return SkillPage([], None)
        page = await self._store.list_resources(SKILL_KIND, limit=limit, cursor=query.cursor)
        return SkillPage(page.items, page.next_cursor)

    async def delete(self, skill_id: str) -> None:
        """The skill and every version of it (metadata first, then the bytes)."""
        await self.get(skill_id)
        while True:
            page = await self._store.list_resources(
                VERSION_KIND, filters={"skill_id": skill_id}, limit=_DELETE_BATCH, order=Order.ASC
            )
            for version in page.items:
                await self._purge_version(version)
            if page.next_cursor is None:
                break
        with contextlib.suppress(NotFound):  # a concurrent delete
            await self._store.delete_resource(SKILL_KIND, skill_id)

    # -- versions ----------------------------------------------------------------------------
    async def create_version(self, skill_id: str, upload: SkillUpload) -> Resource:
        skill = await self.get(skill_id)
        if upload.display_name is not None:
            raise InvalidRequest("display_name is set at the skill's creation only", param="display_name")
        archive = build_archive(upload.files, self.limits)
        if archive.name != skill.body["name"]:
            raise InvalidRequest(
                f"the upload's skill name {archive.name!r} is not this skill's ({skill.body['name']!r}); "
                "a skill's name never changes",
                param="files",
            )
        version = await self._store_version(skill_id, archive)
        try:
            await self._make_latest(skill_id, version)
        except BaseException:
            await asyncio.shield(self._purge_version(version))
            raise
        return version

    async def get_version(self, skill_id: str, version: str) -> Resource:
        """``version``: ``latest``, a version id or a version's epoch."""
        return await self.catalog.version(skill_id, version)

    async def list_versions(self, skill_id: str, query: VersionQuery) -> SkillPage:
        """The skill's versions, newest first."""
        limit = _limit(query.limit)
        await self.get(skill_id)
        page = await self._store.list_resources(
            VERSION_KIND, filters={"skill_id": skill_id}, limit=limit, cursor=query.cursor
        )
        return SkillPage(page.items, page.next_cursor)

    async def content(self, skill_id: str, version: str) -> tuple[Resource, AsyncIterator[bytes]]:
        """The version's metadata and its canonical zip, in chunks."""
        res = await self.get_version(skill_id, version)
        try:
            return res, await self._blobs.open(res.body["blob_key"])
        except NotFound:  # deleted meanwhile
            raise NotFound(VERSION_KIND, res.id) from None

    async def delete_version(self, skill_id: str, version: str) -> Resource:
        """Delete one version (not ``latest`` by name: a version id or epoch); the skill's only
        version is refused. Returns the deleted version."""
        if version == "latest":
            raise InvalidRequest("name the version to delete by its id, not 'latest'", param="version")
        res = await self.get_version(skill_id, version)
        page = await self._store.list_resources(VERSION_KIND, filters={"skill_id": skill_id}, limit=2)
        if len(page.items) < 2:
            raise InvalidRequest(
                f"{res.id!r} is the only version of skill {skill_id!r}; a skill holds at least one "
                "version: delete the skill instead",
                param="version",
            )
        await self._purge_version(res)
        await self._make_latest(skill_id, None)
        return res

    # -- internals ---------------------------------------------------------------------------
    async def _store_version(self, skill_id: str, archive: SkillArchive) -> Resource:
        blob = await self._blobs.put(_one_chunk(archive.data))
        now = self._clock()
        body: dict[str, Any] = {
            "skill_id": skill_id,
            "name": archive.name,
            "description": archive.description,
            "blob_key": blob.key,
            "size_bytes": blob.size_bytes,
            "sha256": blob.sha256,
            "file_count": archive.file_count,
            "epoch": str(int(now.timestamp() * 1_000_000)),
        }
        try:
            return await self._store.create_resource(VERSION_KIND, new_skill_version_id(), body, now)
        except BaseException:
            await asyncio.shield(self._blobs.delete(blob.key))
            raise

    async def _make_latest(self, skill_id: str, version: Resource | None) -> None:
        """Point the skill at ``version`` if it is newer than its current latest (``None``: at
        the newest version there is, after a delete). Retried when the skill changes meanwhile."""
        for _ in range(_UPDATE_ATTEMPTS):
            skill = await self.get(skill_id)
            target = version
            if target is None:
                newest = await self._store.list_resources(
                    VERSION_KIND, filters={"skill_id": skill_id}, limit=1
                )
                if not newest.items:
                    return
                target = newest.items[0]
            elif not await self._newer_than_latest(skill, target):
                return
            if skill.body["latest_version_id"] == target.id:
                return
            body = {**skill.body, "latest_version_id": target.id}
            try:
                await self._store.update_resource(
                    SKILL_KIND, skill_id, body, self._clock(), expected_version=skill.version
                )
                return
            except VersionConflict:
                continue
        raise Conflict(f"skill {skill_id!r} kept changing; retry")

    async def _newer_than_latest(self, skill: Resource, version: Resource) -> bool:
        try:
            current = await self._store.get_resource(VERSION_KIND, skill.body["latest_version_id"])
        except NotFound:
            return True
        return (version.created_at, version.id) > (current.created_at, current.id)

    async def _purge_version(self, res: Resource) -> None:
        with contextlib.suppress(NotFound):
            await self._store.delete_resource(VERSION_KIND, res.id)
        await self._blobs.delete(res.body["blob_key"])


def _limit(limit: int | None) -> int:
    value = _DEFAULT_LIMIT if limit is None else limit
    if not 1 <= value <= MAX_LIST_LIMIT:
        raise InvalidRequest(f"limit must be between 1 and {MAX_LIST_LIMIT}", param="limit")
    return value


def _display_name(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    if len(value) > MAX_DISPLAY_NAME_CHARS or any(c in value for c in "\r\n"):
        raise InvalidRequest(
            f"display_name must be one line of at most {MAX_DISPLAY_NAME_CHARS} characters",
            param="display_name",
        )
    return value
