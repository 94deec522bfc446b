"""The file tools beyond the workspace: the mounts root (``/mnt`` in a sandbox: memory stores,
skills, uploads), stood in for by a temporary directory.

Both resolvers are exercised (``openat2`` and the walk). A read-only mount is a real read-only
bind mount, made by the local daemon harness in its own user and mount namespaces.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _sandboxd_local import LocalDaemon

from edge_agent.sandbox.sandboxd.file_tools import FileTools
from edge_agent.sandbox.sandboxd.paths import Workspace
from edge_agent.sandbox.sandboxd.quota import Quota

SECRET = "secret outside the roots"


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, Path]:
    """(workspace, mounts root) with a memory store mounted at <mounts>/memory/notes."""
    ws = tmp_path / "workspace"
    mnt = tmp_path / "mnt"
    ws.mkdir()
    (mnt / "memory" / "notes").mkdir(parents=True)
    (mnt / "memory" / "notes" / "a.md").write_text("alpha\nTODO remember\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "f.txt").write_text(SECRET)
    return ws.resolve(), mnt.resolve()


@pytest.fixture(params=[True, False], ids=["openat2", "walk"])
def files(request: pytest.FixtureRequest, roots: tuple[Path, Path]) -> FileTools:
    ws, mnt = roots
    workspace = Workspace(str(ws), mounts_root=str(mnt), use_openat2=request.param)
    return FileTools(workspace, use_rg=False)


def text_of(files: FileTools, tool: str, inp: dict[str, Any]) -> tuple[str, bool]:
    blocks, is_error = files.run(tool, inp)
    return "".join(b["text"] for b in blocks), is_error


def test_every_file_tool_works_under_a_mount(files: FileTools, roots: tuple[Path, Path]) -> None:
    _, mnt = roots
    notes = mnt / "memory" / "notes"
    assert text_of(files, "read", {"file_path": f"{notes}/a.md"}) == ("alpha\nTODO remember\n", False)
    assert text_of(files, "write", {"file_path": f"{notes}/sub/b.md", "content": "beta\n"}) == (
        f"wrote 5 bytes to {notes}/sub/b.md",
        False,
    )
    assert (notes / "sub" / "b.md").read_text() == "beta\n"
    edit = {"file_path": f"{notes}/a.md", "old_string": "alpha", "new_string": "ALPHA"}
    assert text_of(files, "edit", edit)[1] is False
    assert (notes / "a.md").read_text() == "ALPHA\nTODO remember\n"
    text, is_error = text_of(files, "glob", {"pattern": "**/*.md", "path": str(mnt)})
    assert not is_error and set(text.split("\n")) == {f"{notes}/a.md", f"{notes}/sub/b.md"}
    assert text_of(files, "grep", {"pattern": "TODO", "path": f"{mnt}/memory"}) == (
        f"{notes}/a.md:2:TODO remember",
        False,
    )
    assert text_of(files, "grep", {"pattern": "beta", "path": f"{notes}/sub/b.md"}) == (
        f"{notes}/sub/b.md:1:beta",
        False,
    )


def test_relative_paths_stay_relative_to_the_workspace(files: FileTools, roots: tuple[Path, Path]) -> None:
    ws, mnt = roots
    assert text_of(files, "write", {"file_path": "memory/notes/a.md", "content": "ws"})[1] is False
    assert (ws / "memory" / "notes" / "a.md").read_text() == "ws"
    assert (mnt / "memory" / "notes" / "a.md").read_text() == "alpha\nTODO remember\n"
    assert text_of(files, "glob", {"pattern": "**/*.md"}) == (f"{ws}/memory/notes/a.md", False)


def test_symlinks_within_a_mount_are_followed(files: FileTools, roots: tuple[Path, Path]) -> None:
    _, mnt = roots
    notes = mnt / "memory" / "notes"
    (notes / "rel.md").symlink_to("a.md")
    (notes / "abs.md").symlink_to(notes / "a.md")
    assert text_of(files, "read", {"file_path": f"{notes}/rel.md"})[0].startswith("alpha")
    assert text_of(files, "read", {"file_path": f"{notes}/abs.md"})[0].startswith("alpha")
    text, is_error = text_of(files, "glob", {"pattern": "*.md", "path": str(notes)})
    assert not is_error and set(text.split("\n")) == {f"{notes}/{n}" for n in ("a.md", "rel.md", "abs.md")}


def test_escapes_from_a_mount_are_refused(files: FileTools, roots: tuple[Path, Path]) -> None:
    ws, mnt = roots
    notes = mnt / "memory" / "notes"
    outside = ws.parent / "outside"
    (ws / "w.txt").write_text("workspace file")
    (notes / "etc").symlink_to("/etc")
    (notes / "out").symlink_to(outside)
    (notes / "up").symlink_to("../../..")
    (notes / "to-ws").symlink_to(ws)  # another root: a link never leads from one to the other
    (ws / "to-mnt").symlink_to(notes)
    cases = [
        ("read", {"file_path": f"{mnt}/../outside/f.txt"}),
        ("read", {"file_path": f"{notes}/../../../outside/f.txt"}),
        ("read", {"file_path": f"{mnt}x/f.txt"}),  # a sibling whose name starts like the root
        ("read", {"file_path": f"{notes}/etc/passwd"}),
        ("read", {"file_path": f"{notes}/out/f.txt"}),
        ("read", {"file_path": f"{notes}/up/outside/f.txt"}),
        ("read", {"file_path": f"{notes}/to-ws/w.txt"}),
        ("read", {"file_path": "to-mnt/a.md"}),
        ("write", {"file_path": f"{notes}/out/f.txt", "content": "x"}),
        ("write", {"file_path": f"{notes}/out/new/deep.txt", "content": "x"}),
        ("edit", {"file_path": f"{notes}/out/f.txt", "old_string": "s", "new_string": "x"}),
        ("glob", {"pattern": "*", "path": f"{notes}/out"}),
        ("grep", {"pattern": "secret", "path": f"{notes}/out"}),
        ("grep", {"pattern": "secret", "path": f"{mnt}/.."}),
    ]
    for tool, inp in cases:
        text, is_error = text_of(files, tool, inp)
        assert is_error and "is outside the session's working directory" in text, (tool, inp, text)
        assert f"({ws}) and its mounts ({mnt})" in text
    assert (outside / "f.txt").read_text() == SECRET
    assert not (outside / "new").exists()
    # A glob of the whole mounts root lists nothing through the links that lead out of it.
    text, _ = text_of(files, "glob", {"pattern": "**/f.txt", "path": str(mnt)})
    assert text == "no matches"


def test_the_quota_counts_the_workspace_only(roots: tuple[Path, Path]) -> None:
    ws, mnt = roots
    workspace = Workspace(str(ws), mounts_root=str(mnt))
    files = FileTools(workspace, use_rg=False, quota=Quota(str(ws), 64 * 1024))
    big = "x" * (128 * 1024) + "end"
    assert text_of(files, "write", {"file_path": f"{mnt}/memory/notes/big.md", "content": big})[1] is False
    edit = {"file_path": f"{mnt}/memory/notes/big.md", "old_string": "end", "new_string": "END"}
    assert text_of(files, "edit", edit)[1] is False
    text, is_error = text_of(files, "write", {"file_path": "big.md", "content": big})
    assert is_error and "size quota" in text
    assert not (ws / "big.md").exists()


def test_without_a_mounts_root_only_the_workspace_is_reachable(roots: tuple[Path, Path]) -> None:
    ws, mnt = roots
    files = FileTools(Workspace(str(ws)), use_rg=False)
    path = f"{mnt}/memory/notes/a.md"
    assert text_of(files, "read", {"file_path": path}) == (
        f"read: path '{path}' is outside the session's working directory",
        True,
    )


# through the daemon, with a real read-only mount ---------------------------------------------


@pytest.fixture
def daemon(roots: tuple[Path, Path]) -> Iterator[LocalDaemon]:
    ws, mnt = roots
    (mnt / "memory" / "facts").mkdir()
    (mnt / "memory" / "facts" / "f.md").write_text("fixed\n")
    d = LocalDaemon(ws, mounts_root=mnt, read_only=[mnt / "memory" / "facts"])
    yield d
    d.close()


def test_writes_into_a_read_only_mount_fail_with_a_clear_error(
    daemon: LocalDaemon, roots: tuple[Path, Path]
) -> None:
    ws, mnt = roots
    facts = mnt / "memory" / "facts"
    assert daemon.hello["root"] == str(ws) and daemon.hello["mounts_root"] == str(mnt)
    assert daemon.call("read", {"file_path": f"{facts}/f.md"}) == ("fixed\n", False)
    refusal = f"read-only: {facts} is mounted read-only"
    for tool, inp in [
        ("write", {"file_path": f"{facts}/f.md", "content": "changed\n"}),
        ("write", {"file_path": f"{facts}/new.md", "content": "new\n"}),
        ("write", {"file_path": f"{facts}/deep/er/new.md", "content": "new\n"}),
        ("edit", {"file_path": f"{facts}/f.md", "old_string": "fixed", "new_string": "broken"}),
    ]:
        assert daemon.call(tool, inp) == (f"{tool}: {inp['file_path']}: {refusal}", True)
    assert (facts / "f.md").read_text() == "fixed\n"
    assert sorted(p.name for p in facts.iterdir()) == ["f.md"]
    # The read-write mount next to it, and search across both, still work.
    assert (
        daemon.call("write", {"file_path": f"{mnt}/memory/notes/n.md", "content": "fixed too\n"})[1] is False
    )
    assert daemon.call("grep", {"pattern": "fixed", "path": f"{mnt}/memory"}) == (
        f"{facts}/f.md:1:fixed\n{mnt}/memory/notes/n.md:1:fixed too",
        False,
    )
    assert daemon.call("glob", {"pattern": "*/*.md", "path": f"{mnt}/memory"})[1] is False
    # bash sees the same: the mount is read-only for every tool.
    text, is_error = daemon.call("bash", {"command": f"echo x >> {facts}/f.md"})
    assert is_error and "Read-only file system" in text
