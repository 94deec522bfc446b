"""Reading skills and their versions from the store: what agents and sessions resolve against.

A skill is a resource of kind ``skill`` (``display_name``, ``name``: the slug, ``source``,
``latest_version_id``); each version is a resource of kind ``skill_version`` (``skill_id``,
``name``, ``description``, the archive's ``blob_key``, ``size_bytes``, ``sha256``, ``epoch``: its
creation time in microseconds since the Unix epoch, the older beta's way to name a version).
:meth:`SkillCatalog.version` resolves what a client may name a version by: ``latest``, its id, or
its epoch. Read-only; :class:`~control_plane.skills.service.SkillService` writes.
"""

from __future__ import annotations

from control_plane.errors import NotFound
from control_plane.store.base import Resource, Resources

__all__ = ["LATEST", "SKILL_KIND", "VERSION_KIND", "SkillCatalog"]

SKILL_KIND = "skill"
VERSION_KIND = "skill_version"
LATEST = "latest"


class SkillCatalog:
    def __init__(self, store: Resources) -> None:
        self._store = store

    async def skill(self, skill_id: str) -> Resource:
        return await self._store.get_resource(SKILL_KIND, skill_id)

    async def version(self, skill_id: str, version: str) -> Resource:
        """The version ``version`` (``latest``, an id or an epoch) of the skill; ``NotFound``
        (kind ``skill``, or ``skill_version``) if either does not exist."""
        if version == LATEST:
            skill = await self.skill(skill_id)
            version = skill.body["latest_version_id"]
        elif version.isdigit():
            page = await self._store.list_resources(
                VERSION_KIND, filters={"skill_id": skill_id, "epoch": version}, limit=1
            )
            if not page.items:
                await self.skill(skill_id)  # a missing skill is named as such
                raise NotFound(VERSION_KIND, version)
            return page.items[0]
        try:
            res = await self._store.get_resource(VERSION_KIND, version)
        except NotFound:
            await self.skill(skill_id)
            raise
        if res.body.get("skill_id") != skill_id:
            await self.skill(skill_id)
            raise NotFound(VERSION_KIND, version)
        return res
