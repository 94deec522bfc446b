"""The skill service on the in-memory store and a blob directory, without HTTP: versions and
``latest`` (also when an older upload finishes last), names kept, deletes that cascade or are
refused, a failed write leaving nothing; agents resolving and pinning skills against it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from control_plane.agents import AgentService
from control_plane.blobs import FilesystemBlobStore
from control_plane.errors import InvalidRequest, NotFound
from control_plane.skills import SkillFile, SkillQuery, SkillService, SkillUpload, VersionQuery
from control_plane.store import MemoryStore

T0 = datetime(2026, 5, 1, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)  # every write its own time
        return self.now


def upload(description: str = "Reports.", name: str = "report") -> SkillUpload:
    manifest = f"---\nname: {name}\ndescription: {description}\n---\n".encode()
    return SkillUpload(files=[SkillFile(f"{name}/SKILL.md", manifest)])


def blobs_in(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and p.parent.name != "tmp"]


async def test_versions_latest_and_deletes(tmp_path: Path) -> None:
    store = MemoryStore()
    service = SkillService(store, FilesystemBlobStore(tmp_path), Clock())
    skill = await service.create(upload())
    first = skill.body["latest_version_id"]
    second = await service.create_version(skill.id, upload("Reports, v2."))
    assert (await service.get(skill.id)).body["latest_version_id"] == second.id
    assert (await service.get_version(skill.id, "latest")).body["description"] == "Reports, v2."
    page = await service.list_versions(skill.id, VersionQuery())
    assert [v.id for v in page.items] == [second.id, first]
    with pytest.raises(InvalidRequest, match="never changes"):
        await service.create_version(skill.id, upload(name="other"))
    with pytest.raises(InvalidRequest, match="'latest'"):
        await service.delete_version(skill.id, "latest")
    await service.delete_version(skill.id, second.id)
    assert (await service.get(skill.id)).body["latest_version_id"] == first
    with pytest.raises(InvalidRequest, match="only version"):
        await service.delete_version(skill.id, first)
    with pytest.raises(NotFound):
        await service.get_version("skill_other", first)  # a version of another skill is not found
    await service.create_version(skill.id, upload("Reports, v3."))
    assert len(blobs_in(tmp_path)) == 2
    await service.delete(skill.id)
    assert blobs_in(tmp_path) == []
    assert (await service.list_skills(SkillQuery())).items == []
    assert (await store.list_resources("skill_version")).items == []


async def test_an_older_version_never_replaces_a_newer_latest(tmp_path: Path) -> None:
    service = SkillService(MemoryStore(), FilesystemBlobStore(tmp_path), Clock())
    skill = await service.create(upload())
    newer = await service.create_version(skill.id, upload("v2"))
    older = await service.get_version(skill.id, skill.body["latest_version_id"])
    await service._make_latest(skill.id, older)  # an upload that finished after a newer one
    assert (await service.get(skill.id)).body["latest_version_id"] == newer.id


async def test_agents_check_and_pin_skills(tmp_path: Path) -> None:
    store = MemoryStore()
    clock = Clock()
    service = SkillService(store, FilesystemBlobStore(tmp_path), clock)
    skill = await service.create(upload())
    agents = AgentService(store, clock)
    refs = [{"type": "custom", "skill_id": skill.id, "version": "latest"}]
    pinned, offers = await agents.pin_skills(refs)
    latest = skill.body["latest_version_id"]
    assert pinned == [{**refs[0], "version": latest}]
    assert offers == [{"skill_id": skill.id, "version": latest, "name": "report", "description": "Reports."}]
    with pytest.raises(InvalidRequest, match=r"skills\[0\]: skill 'skill_gone' not found"):
        await agents.pin_skills([{"type": "custom", "skill_id": "skill_gone", "version": "latest"}])
    with pytest.raises(InvalidRequest, match="Anthropic's own skills"):
        await agents.pin_skills([{"type": "anthropic", "skill_id": "pdf", "version": "latest"}])
