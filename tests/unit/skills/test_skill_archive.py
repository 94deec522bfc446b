"""A skill upload checked and made one canonical zip: every refusal (zip-slip, absolute paths,
links, devices, sizes, counts, the manifest's front matter) and the normal form."""

from __future__ import annotations

import io
import stat
import tarfile
import zipfile

import pytest

from control_plane.errors import ContentTooLarge, InvalidRequest
from control_plane.skills.archive import SkillFile, SkillLimits, build_archive

MANIFEST = b"---\nname: report\ndescription: Writes reports.\n---\n\nBody.\n"
LIMITS = SkillLimits()


def zipped(entries: list[tuple[str, bytes, int]]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, data, mode in entries:
            info = zipfile.ZipInfo(name)
            info.create_system = 3
            info.external_attr = mode << 16
            archive.writestr(info, data)
    return out.getvalue()


def tarred(members: list[tarfile.TarInfo], data: dict[str, bytes], mode: str = "w:gz") -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode=mode) as archive:  # type: ignore[call-overload]
        for member in members:
            content = data.get(member.name)
            if content is not None:
                member.size = len(content)
            archive.addfile(member, io.BytesIO(content) if content is not None else None)
    return out.getvalue()


def regular(name: str, mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mode = mode
    return info


def refused(files: list[SkillFile], fragment: str, limits: SkillLimits = LIMITS) -> None:
    with pytest.raises(InvalidRequest) as caught:
        build_archive(files, limits)
    assert fragment in str(caught.value), str(caught.value)


def test_loose_files_become_a_canonical_zip() -> None:
    files = [SkillFile("report/scripts/a.py", b"a"), SkillFile("report/SKILL.md", MANIFEST)]
    archive = build_archive(files, LIMITS)
    assert (archive.name, archive.description, archive.file_count) == ("report", "Writes reports.", 2)
    with zipfile.ZipFile(io.BytesIO(archive.data)) as made:
        assert made.namelist() == ["report/SKILL.md", "report/scripts/a.py"]
        assert all(i.date_time == (1980, 1, 1, 0, 0, 0) for i in made.infolist())
        assert stat.S_IMODE(made.getinfo("report/SKILL.md").external_attr >> 16) == 0o644
    assert build_archive(list(reversed(files)), LIMITS).data == archive.data  # the same bytes


def test_the_slug_is_the_front_matter_name_else_the_directory() -> None:
    renamed = build_archive([SkillFile("folder/SKILL.md", MANIFEST)], LIMITS)
    assert renamed.name == "report"
    with zipfile.ZipFile(io.BytesIO(renamed.data)) as made:
        assert made.namelist() == ["report/SKILL.md"]  # stored under the slug
    nameless = build_archive([SkillFile("my-dir/SKILL.md", b"---\ndescription: d\n---\n")], LIMITS)
    assert (nameless.name, nameless.front_matter_name) == ("my-dir", None)
    refused([SkillFile("My Dir/SKILL.md", b"---\ndescription: d\n---\n")], "directory name")


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("/report/SKILL.md", "absolute"),
        ("C:/report/SKILL.md", "absolute"),
        ("report/../SKILL.md", "'..'"),
        ("report/./SKILL.md", "'..'"),
        ("report//SKILL.md", "'..'"),
        ("report\\SKILL.md", "backslash"),
        ("report/a\nb", "control"),
        ("SKILL.md", "top-level directory"),
        ("report/" + "x" * 600, "longer than"),
    ],
)
def test_bad_paths_are_refused(path: str, fragment: str) -> None:
    refused([SkillFile("report/SKILL.md", MANIFEST), SkillFile(path, b"x")], fragment)


def test_duplicates_several_tops_and_no_manifest_are_refused() -> None:
    refused([SkillFile("report/SKILL.md", MANIFEST)] * 2, "twice")
    refused([SkillFile("report/SKILL.md", MANIFEST), SkillFile("other/x", b"x")], "one top-level")
    refused([SkillFile("report/notes.md", b"x")], "SKILL.md is required")
    refused([SkillFile("report/sub/SKILL.md", MANIFEST)], "SKILL.md is required")  # not at the root
    refused([], "at least one file")


def test_too_many_and_too_big_are_refused() -> None:
    small = SkillLimits(max_files=3, max_file_bytes=100, max_total_bytes=150)
    many = [SkillFile("report/SKILL.md", MANIFEST)] + [SkillFile(f"report/{i}", b"") for i in range(3)]
    refused(many, "more than 3 files", small)
    with pytest.raises(ContentTooLarge):
        build_archive([SkillFile("report/SKILL.md", MANIFEST), SkillFile("report/big", b"x" * 101)], small)
    with pytest.raises(ContentTooLarge):
        build_archive(
            [SkillFile("report/SKILL.md", MANIFEST), SkillFile("report/a", b"x" * 95)], small
        )  # 58 + 95 bytes together


@pytest.mark.parametrize(
    ("manifest", "fragment"),
    [
        (b"no front matter\n", "must start with YAML front matter"),
        (b"---\nname: report\n", "no closing"),
        (b"---\nname: [unclosed\n---\n", "not valid YAML"),
        (b"---\n- a list\n---\n", "mapping"),
        (b"---\nname: report\n---\n", "'description'"),
        (b"---\nname: report\ndescription: '  '\n---\n", "'description'"),
        (b"---\nname: report\ndescription: " + b"d" * 1025 + b"\n---\n", "longer than 1024"),
        (b"---\nname: report\ndescription: has <tag> in it\n---\n", "XML tags"),
        (b"---\nname: Report\ndescription: d\n---\n", "lowercase"),
        (b"---\nname: " + b"r" * 65 + b"\ndescription: d\n---\n", "lowercase"),
        (b"---\nname: a--b\ndescription: d\n---\n", "lowercase"),
        (b"---\nname: anthropic-tools\ndescription: d\n---\n", "reserved word"),
        (b"---\nname: 12\ndescription: d\n---\n", "must be a string"),
        (b"\xff\xfe---\n", "UTF-8"),
    ],
)
def test_bad_front_matter_is_refused(manifest: bytes, fragment: str) -> None:
    refused([SkillFile("report/SKILL.md", manifest)], fragment)


def test_a_zip_upload_is_unpacked_and_checked() -> None:
    good = zipped([("report/SKILL.md", MANIFEST, 0o100644), ("report/run.sh", b"#!/bin/sh", 0o100755)])
    archive = build_archive([SkillFile("report.zip", good)], LIMITS)
    with zipfile.ZipFile(io.BytesIO(archive.data)) as made:
        assert stat.S_IMODE(made.getinfo("report/run.sh").external_attr >> 16) == 0o755  # kept executable
    slip = zipped([("report/SKILL.md", MANIFEST, 0o100644), ("report/../../etc/evil", b"x", 0o100644)])
    refused([SkillFile("up.zip", slip)], "'..'")
    absolute = zipped([("report/SKILL.md", MANIFEST, 0o100644), ("/etc/evil", b"x", 0o100644)])
    refused([SkillFile("up.zip", absolute)], "absolute")
    link = zipped([("report/SKILL.md", MANIFEST, 0o100644), ("report/l", b"/etc/passwd", 0o120777)])
    refused([SkillFile("up.zip", link)], "links are refused")
    device = zipped([("report/SKILL.md", MANIFEST, 0o100644), ("report/d", b"", 0o020644)])
    refused([SkillFile("up.zip", device)], "devices")
    refused([SkillFile("up.zip", b"PK\x03\x04 broken")], "damaged")


def test_a_zip_bomb_is_stopped_at_the_cap() -> None:
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("report/SKILL.md", MANIFEST)
        archive.writestr("report/zeros", b"\0" * (20 * 1024 * 1024))
    assert len(bomb.getvalue()) < 100_000
    with pytest.raises(ContentTooLarge):
        build_archive([SkillFile("bomb.zip", bomb.getvalue())], LIMITS)


def test_a_tar_upload_is_unpacked_and_checked() -> None:
    data = {"./report/SKILL.md": MANIFEST, "./report/a.txt": b"a"}
    good = tarred([regular("./report/SKILL.md"), regular("./report/a.txt")], data)
    assert build_archive([SkillFile("report.tgz", good)], LIMITS).file_count == 2
    for mode in ("w", "w:bz2", "w:xz"):
        plain = tarred([regular("report/SKILL.md")], {"report/SKILL.md": MANIFEST}, mode)
        assert build_archive([SkillFile("report.tar", plain)], LIMITS).name == "report"
    symlink = regular("report/l")
    symlink.type, symlink.linkname = tarfile.SYMTYPE, "/etc/passwd"
    hardlink = regular("report/h")
    hardlink.type, hardlink.linkname = tarfile.LNKTYPE, "report/SKILL.md"
    device = regular("report/dev")
    device.type = tarfile.CHRTYPE
    fifo = regular("report/fifo")
    fifo.type = tarfile.FIFOTYPE
    for bad, fragment in ((symlink, "links"), (hardlink, "links"), (device, "devices"), (fifo, "devices")):
        upload = tarred([regular("report/SKILL.md"), bad], {"report/SKILL.md": MANIFEST})
        refused([SkillFile("up.tgz", upload)], fragment)
    slip = tarred(
        [regular("report/SKILL.md"), regular("../evil")], {"report/SKILL.md": MANIFEST, "../evil": b"x"}
    )
    refused([SkillFile("up.tgz", slip)], "data filter")
    refused([SkillFile("up.tgz", b"\x1f\x8b not gzip")], "damaged")


def test_a_compressed_tar_bomb_is_stopped_while_inflating() -> None:
    data = {"report/SKILL.md": MANIFEST, "report/zeros": b"\0" * (40 * 1024 * 1024)}
    bomb = tarred([regular("report/SKILL.md"), regular("report/zeros")], data)
    assert len(bomb) < 200_000
    with pytest.raises(ContentTooLarge):
        build_archive([SkillFile("bomb.tgz", bomb)], LIMITS)


def test_a_single_skill_md_is_never_taken_for_an_archive() -> None:
    assert build_archive([SkillFile("report/SKILL.md", MANIFEST)], LIMITS).file_count == 1
