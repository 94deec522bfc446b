"""``/v1/skills`` and skill versions through the official SDK (``client.beta.skills``), every
reply parsed strictly: upload of a directory (``files_from_dir``) and of one archive, retrieve,
list (pages, ``source``), versions (``latest``, ids, epochs), the content download (a zip), delete;
refused uploads store nothing; who may write; agents and sessions resolving their skills."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import anthropic
import pytest
from anthropic.lib import files_from_dir

from control_plane.access_keys import KeyScope, create_api_key
from tests.support.api_app import Api, assert_complete, utcnow

SKILL_MD = b"---\nname: pdf-report\ndescription: Writes PDF reports from tables.\n---\n\n# PDF reports\n"


def stored_blobs(tmp_path: Path) -> list[Path]:
    root = tmp_path / "blobs"
    return [p for p in root.rglob("*") if p.is_file() and p.parent.name != "tmp"] if root.exists() else []


def skill_dir(tmp_path: Path, name: str = "pdf-report", manifest: bytes = SKILL_MD) -> Path:
    root = tmp_path / "src" / name
    (root / "scripts").mkdir(parents=True, exist_ok=True)
    (root / "SKILL.md").write_bytes(manifest)
    (root / "scripts" / "render.py").write_bytes(b"print('render')\n")
    return root


def zip_names(data: bytes) -> list[str]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return archive.namelist()


async def test_every_method_round_trip(api: Api, tmp_path: Path) -> None:
    skills = api.client.beta.skills
    skill = await skills.create(files=files_from_dir(skill_dir(tmp_path)))
    assert_complete(skill)
    assert skill.id.startswith("skill_") and skill.type == "skill"
    assert skill.display_name == "pdf-report" and skill.source.type == "custom"
    assert_complete(again := await skills.retrieve(skill.id))
    assert again == skill

    first = await skills.versions.retrieve("latest", skill_id=skill.id)
    assert_complete(first)
    assert (first.id, first.skill_id, first.type) == (skill.latest_version_id, skill.id, "skill_version")
    assert (first.name, first.description) == ("pdf-report", "Writes PDF reports from tables.")

    changed = SKILL_MD.replace(b"from tables", b"from tables and charts")
    second = await skills.versions.create(
        skill.id, files=files_from_dir(skill_dir(tmp_path, manifest=changed))
    )
    assert_complete(second)
    assert second.description == "Writes PDF reports from tables and charts."
    assert (await skills.retrieve(skill.id)).latest_version_id == second.id
    assert (await skills.versions.retrieve("latest", skill_id=skill.id)).id == second.id
    assert (await skills.versions.retrieve(first.id, skill_id=skill.id)).id == first.id

    listed = await skills.versions.list(skill.id)
    for item in listed.data:
        assert_complete(item)
    assert [v.id for v in listed.data] == [second.id, first.id]
    assert [v.id async for v in await skills.versions.list(skill.id, limit=1)] == [second.id, first.id]

    response = await skills.versions.download(second.id, skill_id=skill.id)
    content = await response.read()
    assert response.http_response.headers["content-type"] == "application/zip"
    assert 'filename="pdf-report.zip"' in response.http_response.headers["content-disposition"]
    assert zip_names(content) == ["pdf-report/SKILL.md", "pdf-report/scripts/render.py"]
    with zipfile.ZipFile(io.BytesIO(content)) as archive:
        assert archive.read("pdf-report/SKILL.md") == changed
    latest = await (await skills.versions.download("latest", skill_id=skill.id)).read()
    assert latest == content

    deleted = await skills.versions.delete(second.id, skill_id=skill.id)
    assert_complete(deleted)
    assert (deleted.id, deleted.type) == (second.id, "skill_version_deleted")
    assert (await skills.retrieve(skill.id)).latest_version_id == first.id  # the next newest
    with pytest.raises(anthropic.BadRequestError, match="only version"):
        await skills.versions.delete(first.id, skill_id=skill.id)
    gone = await skills.delete(skill.id)
    assert_complete(gone)
    assert (gone.id, gone.type) == (skill.id, "skill_deleted")
    with pytest.raises(anthropic.NotFoundError):
        await skills.retrieve(skill.id)
    with pytest.raises(anthropic.NotFoundError):
        await skills.versions.retrieve(first.id, skill_id=skill.id)
    assert stored_blobs(tmp_path) == []


async def test_list_pages_and_source(api: Api) -> None:
    skills = api.client.beta.skills
    ids = []
    for i in range(3):
        manifest = f"---\nname: s{i}\ndescription: Skill {i}.\n---\n".encode()
        created = await skills.create(files=[(f"s{i}/SKILL.md", manifest)], display_name=f"Skill {i}")
        assert created.display_name == f"Skill {i}"
        ids.append(created.id)
    page = await skills.list(limit=2)
    assert len(page.data) == 2 and page.next_page is not None
    for item in page.data:
        assert_complete(item)
    assert [s.id async for s in await skills.list(limit=2)] == list(reversed(ids))
    assert [s.id async for s in await skills.list(source="custom")] == list(reversed(ids))
    assert (await skills.list(source="anthropic")).data == []  # Outpost holds none of Anthropic's
    with pytest.raises(anthropic.BadRequestError, match="source"):
        await skills.list(source="elsewhere")


async def test_an_archive_upload_and_the_epoch_name(api: Api) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("zipped/SKILL.md", b"---\ndescription: From a zip.\n---\n")
        archive.writestr("zipped/data/table.csv", b"a,b\n1,2\n")
    skills = api.client.beta.skills
    skill = await skills.create(files=[("zipped.zip", buffer.getvalue(), "application/zip")])
    version = await skills.versions.retrieve("latest", skill_id=skill.id)
    assert version.name == "zipped"  # no name in the front matter: the directory's
    content = await (await skills.versions.download(version.id, skill_id=skill.id)).read()
    assert zip_names(content) == ["zipped/SKILL.md", "zipped/data/table.csv"]
    stored = await api.store.get_resource("skill_version", version.id)
    by_epoch = await skills.versions.retrieve(stored.body["epoch"], skill_id=skill.id)
    assert by_epoch.id == version.id


async def test_refused_uploads_store_nothing(api: Api, tmp_path: Path) -> None:
    skills = api.client.beta.skills
    cases = [
        ([("SKILL.md", SKILL_MD)], "top-level directory"),
        ([("a/SKILL.md", SKILL_MD), ("b/x.txt", b"x")], "one top-level directory"),
        ([("s/../SKILL.md", SKILL_MD)], "'..'"),
        ([("/abs/SKILL.md", SKILL_MD)], "absolute"),
        ([("s/readme.txt", b"no manifest")], "SKILL.md is required"),
        ([("s/SKILL.md", b"# no front matter\n")], "front matter"),
        ([("s/SKILL.md", b"---\nname: Bad Name\ndescription: d\n---\n")], "lowercase"),
        ([("s/SKILL.md", b"---\nname: s\n---\n")], "description"),
        ([("s/SKILL.md", b"---\nname: claude-helper\ndescription: d\n---\n")], "reserved"),
        ([("s/SKILL.md", SKILL_MD), ("s/SKILL.md", SKILL_MD)], "twice"),
    ]
    for files, expected in cases:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await skills.create(files=files)
        assert expected in str(caught.value), (expected, str(caught.value))
    skill = await skills.create(files=[("pdf-report/SKILL.md", SKILL_MD)])
    other = b"---\nname: other-name\ndescription: d\n---\n"
    with pytest.raises(anthropic.BadRequestError, match="never changes"):
        await skills.versions.create(skill.id, files=[("other-name/SKILL.md", other)])
    with pytest.raises(anthropic.NotFoundError):
        await skills.versions.create("skill_missing", files=[("pdf-report/SKILL.md", SKILL_MD)])
    response = await api.http.post("/v1/skills", files={"other": ("a.txt", b"a")})
    assert response.status_code == 400  # a field this route does not know
    assert [s.id async for s in await skills.list()] == [skill.id]
    assert len(stored_blobs(tmp_path)) == 1


async def test_too_big_is_413(api: Api, tmp_path: Path) -> None:
    big = b"x" * (8 * 1024 * 1024)  # with the manifest, past the 8 MiB total
    with pytest.raises(anthropic.APIStatusError) as caught:
        await api.client.beta.skills.create(files=[("s/SKILL.md", SKILL_MD), ("s/big.bin", big)])
    assert caught.value.status_code == 413
    assert stored_blobs(tmp_path) == []


async def test_scoped_and_read_only_keys_read_but_do_not_write(api: Api) -> None:
    skill = await api.client.beta.skills.create(files=[("pdf-report/SKILL.md", SKILL_MD)])
    env = await api.environment()
    scoped, _ = await create_api_key(
        api.store, "scoped", utcnow(), scope=KeyScope.READ_WRITE, environment_ids=(env,)
    )
    reader, _ = await create_api_key(api.store, "reader", utcnow(), scope=KeyScope.READ_ONLY)
    for key in (scoped, reader):
        async with anthropic.AsyncAnthropic(base_url=api.url, api_key=key, max_retries=0) as client:
            assert (await client.beta.skills.retrieve(skill.id)).id == skill.id
            version = await client.beta.skills.versions.retrieve("latest", skill_id=skill.id)
            assert await (await client.beta.skills.versions.download(version.id, skill_id=skill.id)).read()
            if key == scoped:
                with pytest.raises(anthropic.PermissionDeniedError):
                    await client.beta.skills.create(files=[("pdf-report/SKILL.md", SKILL_MD)])
            with pytest.raises(anthropic.PermissionDeniedError):
                await client.beta.skills.delete(skill.id)


async def test_agents_resolve_skills_and_sessions_pin_them(api: Api) -> None:
    beta = api.client.beta
    with pytest.raises(anthropic.BadRequestError, match="skill_missing"):
        await api.agent(skills=[{"type": "custom", "skill_id": "skill_missing"}])
    with pytest.raises(anthropic.BadRequestError, match="not available in Outpost"):
        await api.agent(skills=[{"type": "anthropic", "skill_id": "xlsx"}])
    skill = await beta.skills.create(files=[("pdf-report/SKILL.md", SKILL_MD)])
    with pytest.raises(anthropic.BadRequestError, match="skillver_nope"):
        await api.agent(skills=[{"type": "custom", "skill_id": skill.id, "version": "skillver_nope"}])
    agent = await api.agent(skills=[{"type": "custom", "skill_id": skill.id}])
    assert_complete(agent)
    assert agent.skills[0].version == "latest"  # the agent follows the newest version
    with pytest.raises(anthropic.BadRequestError, match="skill_missing"):
        await beta.agents.update(
            agent.id, version=agent.version, skills=[{"type": "custom", "skill_id": "skill_missing"}]
        )

    session = await api.session(agent=agent.id)
    assert session.agent.skills[0].version == skill.latest_version_id  # pinned at the start
    assert_complete(session)
    stored = await api.store.get_resource("session", session.id)
    assert stored.body["skill_offers"] == [
        {
            "skill_id": skill.id,
            "version": skill.latest_version_id,
            "name": "pdf-report",
            "description": "Writes PDF reports from tables.",
        }
    ]
    await beta.skills.delete(skill.id)
    with pytest.raises(anthropic.BadRequestError, match=skill.id):
        await api.session(agent=agent.id)  # resolved again at each start
