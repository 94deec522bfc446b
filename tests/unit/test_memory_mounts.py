"""The edge's memory mounts (scan and apply on a real directory), the frames' round trip, and the
control plane's write-back with preconditions on the in-memory store."""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime
from pathlib import Path

from control_plane.harness.memory_writeback import MemoryWriteBack, contents_reader
from control_plane.store.base import MEMORY_STORE_KIND, MemoryActor, MemoryVersionFilter, MemoryWrite
from control_plane.store.memory import MemoryStore
from edge_agent.sandbox.memory_mounts import MAX_FILE_BYTES, MemoryMounts
from outpost_wire.codec import decode_frame, decode_outcome, encode_frame, encode_outcome
from outpost_wire.frames import Execute, MemoryFile, MemoryMount, MemorySnapshot, Provision, Request
from outpost_wire.results import MemoryChange, TextBlock, ToolResult

RW = MemoryMount("memstore_a", "notes")
RO = MemoryMount("memstore_b", "facts", read_only=True)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _now() -> datetime:
    return datetime.now(UTC)


def test_scan_reports_added_modified_deleted_and_takes_the_new_baseline(tmp_path: Path) -> None:
    mounts = MemoryMounts(tmp_path / "memory")
    mounts.apply(
        "ses_1",
        [RW, RO],
        [MemorySnapshot("memstore_a", (MemoryFile("/a.md", "A"), MemoryFile("/d/b.md", "B")))],
    )
    root = mounts.host_dir("ses_1", RW)
    assert (root / "a.md").read_text() == "A" and (root / "d" / "b.md").read_text() == "B"
    assert mounts.scan("ses_1", [RW, RO]) == ()
    (root / "a.md").write_text("A2")
    (root / "d" / "b.md").unlink()
    (root / "new.md").write_text("N")
    changes = {c.path: c for c in mounts.scan("ses_1", [RW, RO])}
    assert changes["/a.md"] == MemoryChange("memstore_a", "/a.md", "A2", _sha("A"))
    assert changes["/d/b.md"] == MemoryChange("memstore_a", "/d/b.md", None, _sha("B"))
    assert changes["/new.md"] == MemoryChange("memstore_a", "/new.md", "N", "")
    assert mounts.scan("ses_1", [RW, RO]) == ()  # the new state is the baseline


def test_scan_refuses_links_large_and_binary_files_once(tmp_path: Path) -> None:
    mounts = MemoryMounts(tmp_path / "memory")
    mounts.apply("ses_1", [RW], [])
    root = mounts.host_dir("ses_1", RW)
    secret = tmp_path / "secret.txt"
    secret.write_text("do not read")
    (root / "link.md").symlink_to(secret)
    (root / "dirlink").symlink_to(tmp_path)
    (root / "big.md").write_text("x" * (MAX_FILE_BYTES + 1))
    (root / "bin.md").write_bytes(b"\xff\xfe")
    changes = {c.path: c for c in mounts.scan("ses_1", [RW])}
    assert set(changes) == {"/link.md", "/dirlink", "/big.md", "/bin.md"}
    assert all(c.error and c.content is None for c in changes.values())
    assert "link" in changes["/link.md"].error and "102,400" in changes["/big.md"].error
    assert mounts.scan("ses_1", [RW]) == ()  # reported once until they change


def test_apply_replaces_the_contents_and_read_only_mounts_are_never_scanned(tmp_path: Path) -> None:
    mounts = MemoryMounts(tmp_path / "memory")
    mounts.apply("ses_1", [RW, RO], [MemorySnapshot("memstore_b", (MemoryFile("/f.md", "F"),))])
    ro_dir = mounts.host_dir("ses_1", RO)
    assert oct(ro_dir.stat().st_mode & 0o777) == "0o777"  # read-only by the mount, not the mode
    (ro_dir / "f.md").write_text("changed on the host")
    (mounts.host_dir("ses_1", RW) / "stray.md").write_text("S")
    assert [c.store_id for c in mounts.scan("ses_1", [RW, RO])] == ["memstore_a"]
    mounts.apply("ses_1", [RW, RO], [MemorySnapshot("memstore_a", (MemoryFile("/x.md", "X"),))])
    assert sorted(os.listdir(mounts.host_dir("ses_1", RW))) == ["x.md"]
    assert os.listdir(ro_dir) == []
    mounts.forget("ses_1")
    assert not mounts.has_baseline("ses_1") and not ro_dir.exists()


def test_frames_carry_mounts_contents_and_changes() -> None:
    op = Execute(
        "bash",
        "{}",
        sandbox=Provision(memory_mounts=(RW, RO)),
        memory=(MemorySnapshot("memstore_a", (MemoryFile("/a.md", "A"),)), MemorySnapshot("memstore_b")),
    )
    for execute in (op, Execute("bash", "{}", memory=()), Execute("bash", "{}")):
        request = Request("r1", "ses_1", "k", 0, execute)
        assert decode_frame(encode_frame(request, 1 << 20), 1 << 20) == request
    result = ToolResult(
        (TextBlock("ok"),),
        memory_changes=(
            MemoryChange("memstore_a", "/a.md", "", "ab"),
            MemoryChange("memstore_a", "/b.md", None, "cd"),
            MemoryChange("memstore_a", "/c.md", None, "", error="too large"),
        ),
    )
    assert decode_outcome(encode_outcome(result)) == result


async def _store_with_memory(store: MemoryStore, content: str) -> str:
    await store.create_resource(MEMORY_STORE_KIND, "memstore_a", {"name": "notes", "description": ""}, _now())
    write = MemoryWrite("memver_0", MemoryActor("api_actor", "key"), _now())
    record = await store.create_memory("memstore_a", "mem_1", "/notes.md", content, write, max_memories=10)
    return record.id


MOUNT = {"memory_store_id": "memstore_a", "access": "read_write", "mount_path": "/mnt/memory/notes"}


async def test_write_back_applies_with_preconditions_and_records_both_sides_of_a_conflict() -> None:
    async with MemoryStore() as store:
        memory_id = await _store_with_memory(store, "base\n")
        resent: list[str] = []
        wb = MemoryWriteBack(store, _now, resent.append)
        # Session B wins: its change applies on the baseline.
        notes = await wb.write_back(
            "ses_b", [MOUNT], [MemoryChange("memstore_a", "/notes.md", "base\nB\n", _sha("base\n"))]
        )
        assert notes == [] and resent == []
        # Session A held the same baseline: it loses, both versions are recorded, B's stays current.
        change = MemoryChange("memstore_a", "/notes.md", "base\nA\n", _sha("base\n"))
        [note] = await wb.write_back("ses_a", [MOUNT], [change])
        assert "Memory conflict: /mnt/memory/notes/notes.md" in note and resent == ["ses_a"]
        current = await store.get_memory("memstore_a", memory_id)
        assert current.content == "base\nB\n"
        versions = await store.list_memory_versions(
            "memstore_a", MemoryVersionFilter(memory_id=memory_id), limit=20, with_content=True
        )
        contents = [v.content for v in reversed(versions)]
        assert contents == ["base\n", "base\nB\n", "base\nA\n", "base\nB\n"]
        assert next(v.id for v in versions if v.content == "base\nA\n") in note
        # A retry of the same outcome (the control plane died before recording it) writes nothing more.
        await wb.write_back("ses_a", [MOUNT], [change])
        await wb.write_back(
            "ses_b", [MOUNT], [MemoryChange("memstore_a", "/notes.md", "base\nB\n", _sha("base\n"))]
        )
        again = await store.list_memory_versions("memstore_a", MemoryVersionFilter(), limit=20)
        assert len(again) == 4


async def test_write_back_creates_deletes_and_refuses() -> None:
    async with MemoryStore() as store:
        memory_id = await _store_with_memory(store, "old")
        wb = MemoryWriteBack(store, _now)
        notes = await wb.write_back(
            "ses_a",
            [MOUNT, {**MOUNT, "memory_store_id": "memstore_ro", "access": "read_only"}],
            [
                MemoryChange("memstore_a", "/new.md", "N", ""),
                MemoryChange("memstore_a", "/notes.md", None, _sha("old")),
                MemoryChange(
                    "memstore_a", "/big.md", None, "", error="larger than 102,400 bytes: it was not saved"
                ),
                MemoryChange("memstore_ro", "/x.md", "X", ""),
            ],
        )
        assert notes == ["Memory /mnt/memory/notes/big.md: larger than 102,400 bytes: it was not saved."]
        listed = await store.list_memories("memstore_a", limit=10, with_content=True)
        assert [(m.path, m.content) for m in listed] == [("/new.md", "N")]
        versions = await store.list_memory_versions(
            "memstore_a", MemoryVersionFilter(actor=MemoryActor("session_actor", "ses_a")), limit=10
        )
        assert sorted(v.operation for v in versions) == ["created", "deleted"]
        assert memory_id not in {m.id for m in listed}
        read = contents_reader(store)
        [snapshot] = await read("ses_a", (RW.__class__("memstore_a", "notes"),))
        assert snapshot.files == (MemoryFile("/new.md", "N"),)
