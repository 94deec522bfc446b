"""sandboxd's race-free path resolution and workspace quota, on the host (no Docker).

Both resolvers are exercised: ``openat2(RESOLVE_BENEATH)`` where the kernel has it, and the
component-by-component walk it falls back to (forced with ``use_openat2=False``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from edge_agent.sandbox.sandboxd.file_tools import FileTools
from edge_agent.sandbox.sandboxd.paths import Openat2, PathEscape, Workspace, walk_beneath
from edge_agent.sandbox.sandboxd.quota import Quota

SECRET = "secret outside the workspace"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    root.mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "f.txt").write_text(SECRET)
    (tmp_path / "outside" / "only-outside.txt").write_text(SECRET)
    return root.resolve()


@pytest.fixture
def root_fd(ws: Path) -> Iterator[int]:
    fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


def walk(root_fd: int, ws: Path, rel: str, **kwargs: Any) -> tuple[str, str]:
    """(real path of the directory reached, last name), closing the descriptor."""
    fd, name = walk_beneath(root_fd, str(ws), rel, **kwargs)
    try:
        return os.readlink(f"/proc/self/fd/{fd}"), name
    finally:
        os.close(fd)


def text_of(files: FileTools, tool: str, inp: dict[str, Any]) -> tuple[str, bool]:
    blocks, is_error = files.run(tool, inp)
    return "".join(b["text"] for b in blocks), is_error


# the walk ------------------------------------------------------------------------------------


def test_walk_follows_symlinks_that_stay_inside(ws: Path, root_fd: int) -> None:
    (ws / "a" / "b").mkdir(parents=True)
    (ws / "rel").symlink_to("a/b")
    (ws / "abs").symlink_to(ws / "a")
    (ws / "a" / "up").symlink_to("..")
    assert walk(root_fd, ws, "rel/x") == (str(ws / "a" / "b"), "x")
    assert walk(root_fd, ws, "abs/b/x") == (str(ws / "a" / "b"), "x")
    assert walk(root_fd, ws, "a/up/a/b/../x") == (str(ws / "a"), "x")
    assert walk(root_fd, ws, "a/b/..") == (str(ws / "a"), "")
    assert walk(root_fd, ws, ".") == (str(ws), "")
    # The last component is resolved too: a symlink there is followed to its target's parent.
    (ws / "a" / "b" / "t.txt").write_text("t")
    (ws / "last").symlink_to("a/b/t.txt")
    assert walk(root_fd, ws, "last") == (str(ws / "a" / "b"), "t.txt")


@pytest.mark.parametrize(
    ("setup", "rel"),
    [
        (None, ".."),
        (None, "a/../.."),
        (("link", "../outside"), "link/f.txt"),
        (("link", "PLACEHOLDER/outside"), "link/f.txt"),  # absolute, elsewhere
        (("link", "/etc"), "link/passwd"),
        (("link", "/proc/self/root/etc"), "link/passwd"),
        (("link", "a/../../outside/f.txt"), "link"),
    ],
)
def test_walk_refuses_every_way_out(ws: Path, root_fd: int, setup: tuple[str, str] | None, rel: str) -> None:
    (ws / "a").mkdir()
    if setup is not None:
        name, target = setup
        (ws / name).symlink_to(target.replace("PLACEHOLDER", str(ws.parent)))
    with pytest.raises(PathEscape):
        walk_beneath(root_fd, str(ws), rel)


def test_walk_loops_and_missing_parents(ws: Path, root_fd: int) -> None:
    (ws / "loop").symlink_to("loop")
    with pytest.raises(OSError) as info:
        walk_beneath(root_fd, str(ws), "loop/x")
    assert info.value.errno == errno.ELOOP
    with pytest.raises(FileNotFoundError):
        walk_beneath(root_fd, str(ws), "no/such/x")
    assert walk(root_fd, ws, "new/deep/x", create_dirs=True) == (str(ws / "new" / "deep"), "x")
    (ws / "file").write_text("")
    with pytest.raises(NotADirectoryError):
        walk_beneath(root_fd, str(ws), "file/x")


def test_walk_leaves_no_descriptor_open(ws: Path, root_fd: int) -> None:
    (ws / "a" / "b").mkdir(parents=True)
    (ws / "out").symlink_to("/etc")
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        walk(root_fd, ws, "a/b/x")
        with pytest.raises(PathEscape):
            walk_beneath(root_fd, str(ws), "a/b/../../out/x")
    assert len(os.listdir("/proc/self/fd")) == before


def test_openat2_is_used_where_the_kernel_has_it(ws: Path) -> None:
    # This host's kernel is 5.6+ (openat2); the walk is tested separately with use_openat2=False.
    assert Openat2.load() is not None
    assert Workspace(str(ws)).openat2 is not None
    assert Workspace(str(ws), use_openat2=False).openat2 is None


# the tools, with each resolver ---------------------------------------------------------------


@pytest.fixture(params=["openat2", "walk"])
def files(request: pytest.FixtureRequest, ws: Path) -> FileTools:
    return FileTools(Workspace(str(ws), use_openat2=request.param == "openat2"), use_rg=False)


def test_tools_follow_inside_links_and_refuse_outside_ones(files: FileTools, ws: Path) -> None:
    (ws / "d").mkdir()
    (ws / "d" / "real.txt").write_text("inside")
    (ws / "abs").symlink_to(ws / "d")
    (ws / "out").symlink_to(ws.parent / "outside")
    (ws / "dangling").symlink_to(ws / "d" / "new.txt")
    assert text_of(files, "read", {"file_path": "abs/real.txt"}) == ("inside", False)
    assert text_of(files, "read", {"file_path": str(ws / "abs" / "real.txt")}) == ("inside", False)
    assert text_of(files, "write", {"file_path": "dangling", "content": "made"})[1] is False
    assert (ws / "d" / "new.txt").read_text() == "made"
    for tool, inp in [
        ("read", {"file_path": "out/f.txt"}),
        ("write", {"file_path": "out/f.txt", "content": "x"}),
        ("edit", {"file_path": "out/f.txt", "old_string": "s", "new_string": "x"}),
        ("write", {"file_path": "out/new/deep.txt", "content": "x"}),
        ("glob", {"pattern": "*", "path": "out"}),
        ("grep", {"pattern": "secret", "path": "out"}),
    ]:
        text, is_error = text_of(files, tool, inp)
        assert is_error and "outside the session's working directory" in text, (tool, text)
    assert (ws.parent / "outside" / "f.txt").read_text() == SECRET
    assert not (ws.parent / "outside" / "new").exists()


def test_write_to_a_fifo_is_refused_without_blocking(files: FileTools, ws: Path) -> None:
    os.mkfifo(ws / "pipe")
    text, is_error = text_of(files, "write", {"file_path": "pipe", "content": "x"})
    assert is_error and text == "write: pipe: not a regular file"


def test_grep_and_glob_name_workspace_paths(files: FileTools, ws: Path) -> None:
    (ws / "src").mkdir()
    (ws / "src" / "a.py").write_text("TODO\n")
    assert text_of(files, "grep", {"pattern": "TODO", "path": "src"}) == (f"{ws}/src/a.py:1:TODO", False)
    assert text_of(files, "grep", {"pattern": "TODO", "path": "src/a.py"}) == (f"{ws}/src/a.py:1:TODO", False)
    assert text_of(files, "glob", {"pattern": "*.py", "path": "src"}) == (f"{ws}/src/a.py", False)


def test_swapping_a_directory_for_a_symlink_never_escapes(files: FileTools, ws: Path) -> None:
    """A thread swaps ``dir`` between a real directory and a symlink to outside as fast as it can
    while the tools read and write through it; bounded by time, the count of calls is printed."""
    (ws / "real").mkdir()
    (ws / "real" / "f.txt").write_text("inside")
    evil = ws / "evil"
    evil.symlink_to(ws.parent / "outside")
    stop = threading.Event()

    def swapper() -> None:
        swapped = ws / "dir"
        while not stop.is_set():
            with contextlib.suppress(OSError):
                os.rename(ws / "real", swapped)  # a real directory ...
            with contextlib.suppress(OSError):
                os.rename(swapped, ws / "real")
            with contextlib.suppress(OSError):
                os.symlink(ws.parent / "outside", swapped)  # ... then a symlink to outside
            with contextlib.suppress(OSError):
                if swapped.is_symlink():
                    swapped.unlink()
                elif swapped.is_dir():  # made by a write in between
                    shutil.rmtree(swapped)

    thread = threading.Thread(target=swapper)
    thread.start()
    calls = ok = 0
    escapes: list[str] = []
    deadline = time.monotonic() + 2.0
    try:
        while time.monotonic() < deadline:
            text, is_error = text_of(files, "read", {"file_path": "dir/f.txt"})
            calls += 1
            ok += not is_error
            if SECRET in text:
                escapes.append(text)
            text_of(files, "write", {"file_path": "dir/f.txt", "content": "inside"})
            listed, _ = text_of(files, "glob", {"pattern": "dir/*"})
            grepped, _ = text_of(files, "grep", {"pattern": "secret", "path": "dir"})
            escapes += [out for out in (listed, grepped) if "only-outside" in out or SECRET in out]
    finally:
        stop.set()
        thread.join()
    print(
        f"{'openat2' if files.ws.openat2 else 'walk'}: {calls} reads, {ok} succeeded, {len(escapes)} escaped"
    )
    assert escapes == []
    assert (ws.parent / "outside" / "f.txt").read_text() == SECRET
    assert sorted(p.name for p in (ws.parent / "outside").iterdir()) == ["f.txt", "only-outside.txt"]


# the quota -----------------------------------------------------------------------------------


def test_quota_refuses_writes_and_edits_past_it(ws: Path) -> None:
    quota = Quota(str(ws), 64 * 1024)
    files = FileTools(Workspace(str(ws)), use_rg=False, quota=quota)
    assert text_of(files, "write", {"file_path": "a.txt", "content": "x" * 40_000}) == (
        "wrote 40000 bytes to a.txt",
        False,
    )
    text, is_error = text_of(files, "write", {"file_path": "b.txt", "content": "y" * 40_000})
    assert is_error and "would exceed its size quota" in text
    assert not (ws / "b.txt").exists()  # refused before anything was created
    # Rewriting a file in place counts only the difference.
    assert text_of(files, "write", {"file_path": "a.txt", "content": "z" * 40_000})[1] is False
    text, is_error = text_of(
        files, "edit", {"file_path": "a.txt", "old_string": "z", "new_string": "zz", "replace_all": True}
    )
    assert is_error and "would exceed its size quota" in text
    # Shrinking is always allowed.
    assert text_of(files, "write", {"file_path": "a.txt", "content": "small"})[1] is False
    assert text_of(files, "write", {"file_path": "b.txt", "content": "y" * 40_000})[1] is False


def test_quota_notices_what_bash_wrote(ws: Path) -> None:
    quota = Quota(str(ws), 64 * 1024)
    assert quota.over_note() is None
    (ws / "big").write_bytes(b"x" * 100_000)
    (ws / "hard").hardlink_to(ws / "big")  # counted once
    note = quota.over_note()
    assert note is not None and "over its size quota" in note
    assert 100_000 <= quota.used() < 150_000
    (ws / "big").unlink()
    (ws / "hard").unlink()
    assert quota.over_note() is None


def test_no_quota_by_default(ws: Path) -> None:
    quota = Quota(str(ws), 0)
    assert not quota.enabled and quota.over_note() is None
    quota.check("write", "x", 0, 10**12)


def test_grep_with_rg_names_workspace_paths(ws: Path) -> None:
    # rg (when on PATH, as on the CI image) inherits the opened directory's descriptor.
    files = FileTools(Workspace(str(ws)), use_rg=True)
    (ws / "src").mkdir()
    (ws / "src" / "a.py").write_text("TODO\n")
    (ws / "out").symlink_to(ws.parent / "outside")
    assert text_of(files, "grep", {"pattern": "TODO"}) == (f"{ws}/src/a.py:1:TODO", False)
    assert text_of(files, "grep", {"pattern": "TODO", "path": "src/a.py"}) == (f"{ws}/src/a.py:1:TODO", False)
    assert text_of(files, "grep", {"pattern": "secret"}) == ("no matches", False)  # symlinks not followed


def test_glob_follows_links_only_inside(files: FileTools, ws: Path) -> None:
    (ws / "d" / "sub").mkdir(parents=True)
    (ws / "d" / "sub" / "a.py").write_text("")
    (ws / "link").symlink_to(ws / "d")  # absolute, inside
    (ws / "out").symlink_to(ws.parent / "outside")
    (ws / "secret.txt").symlink_to(ws.parent / "outside" / "f.txt")
    (ws / "ok.txt").symlink_to("d/sub/a.py")
    text, _ = text_of(files, "glob", {"pattern": "*/sub/*.py"})
    assert sorted(text.split("\n")) == [f"{ws}/d/sub/a.py", f"{ws}/link/sub/a.py"]
    text, _ = text_of(files, "glob", {"pattern": "**/*.py"})  # ** does not enter symlinked dirs
    assert text == f"{ws}/d/sub/a.py"
    text, _ = text_of(files, "glob", {"pattern": "*.txt"})  # a link to outside is left out
    assert text == f"{ws}/ok.txt"
    assert text_of(files, "glob", {"pattern": "*/*.txt"}) == ("no matches", False)
    text, _ = text_of(files, "glob", {"pattern": "**"})
    assert sorted(text.split("\n")) == [str(ws), f"{ws}/d", f"{ws}/d/sub"]
