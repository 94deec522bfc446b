"""The edge's files-and-skills cache: chunks assembled in order, checked, refused clearly."""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

import pytest

from edge_agent.sandbox.content_mounts import BlobRefused, ContentMounts
from outpost_wire.frames import BlobMount, PutBlob


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _chunks(data: bytes, size: int) -> list[PutBlob]:
    sha = _sha(data)
    return [PutBlob(sha, len(data), o, data[o : o + size]) for o in range(0, len(data), size)]


def test_chunks_in_order_make_the_blob(tmp_path: Path) -> None:
    content = ContentMounts(tmp_path)
    data = bytes(range(256)) * 100
    answers = [content.put_chunk("s1", c) for c in _chunks(data, 1000)]
    assert [a.complete for a in answers] == [False] * (len(answers) - 1) + [True]
    assert answers[0].received == 1000
    assert content.blob_path(_sha(data)).read_bytes() == data
    # held now: the first chunk of another session's push is answered complete
    assert content.put_chunk("s2", _chunks(data, 1000)[0]).complete


def test_a_lost_chunk_is_refused_and_offset_zero_starts_over(tmp_path: Path) -> None:
    content = ContentMounts(tmp_path)
    chunks = _chunks(b"a" * 30, 10)
    content.put_chunk("s1", chunks[0])
    with pytest.raises(BlobRefused, match="chunk lost"):
        content.put_chunk("s1", chunks[2])  # out of order: bytes 10..20 never came
    assert content.put_chunk("s1", chunks[1]).received == 20  # a resent chunk is fine
    assert [content.put_chunk("s1", c).complete for c in chunks] == [False, False, True]


def test_a_checksum_mismatch_is_refused_and_nothing_is_kept(tmp_path: Path) -> None:
    content = ContentMounts(tmp_path)
    sha = _sha(b"expected")
    with pytest.raises(BlobRefused, match="checksum mismatch"):
        content.put_chunk("s1", PutBlob(sha, 8, 0, b"tampered"))
    assert not content.has(sha)
    assert content.put_chunk("s1", PutBlob(sha, 8, 0, b"expected")).complete


def test_a_blob_over_the_budget_is_refused_and_old_ones_are_evicted(tmp_path: Path) -> None:
    content = ContentMounts(tmp_path, budget_bytes=100)
    with pytest.raises(BlobRefused, match="budget"):
        content.put_chunk("s1", PutBlob(_sha(b"x" * 101), 101, 0, b"x" * 101))
    first, second = b"1" * 60, b"2" * 60
    content.put_chunk("s1", PutBlob(_sha(first), 60, 0, first))
    content.put_chunk("s1", PutBlob(_sha(second), 60, 0, second))
    assert content.has(_sha(second)) and not content.has(_sha(first))


def _skill_zip(entries: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
    return out.getvalue()


def test_apply_places_files_and_unpacks_skills(tmp_path: Path) -> None:
    content = ContentMounts(tmp_path)
    data = b"col\n1\n"
    archive = _skill_zip({"demo/SKILL.md": b"---\nname: demo\n---\n", "demo/scripts/run.py": b"print(1)\n"})
    for blob in (data, archive):
        content.put_chunk("s1", PutBlob(_sha(blob), len(blob), 0, blob))
    mounts = [
        BlobMount("file", "file_1", _sha(data), len(data), "/mnt/session/uploads/file_1"),
        BlobMount("skill", "demo", _sha(archive), len(archive), "/mnt/skills/demo"),
    ]
    content.apply("s1", mounts)
    files, skills = content.session_dirs("s1")
    assert (files / "uploads/file_1").read_bytes() == data
    assert (skills / "demo/SKILL.md").read_bytes().startswith(b"---")
    assert (skills / "demo/scripts/run.py").exists()
    content.apply("s1", mounts[1:])  # the file resource was deleted
    assert not (files / "uploads/file_1").exists()


def test_a_skill_archive_with_traversal_is_refused(tmp_path: Path) -> None:
    content = ContentMounts(tmp_path)
    archive = _skill_zip({"demo/../../escape": b"x"})
    content.put_chunk("s1", PutBlob(_sha(archive), len(archive), 0, archive))
    with pytest.raises(BlobRefused, match="unsafe path"):
        content.apply("s1", [BlobMount("skill", "demo", _sha(archive), len(archive), "/mnt/skills/demo")])
    assert not (tmp_path / "escape").exists()
