"""sandboxd's file tools and path policy, called directly against a temporary workspace."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import pytest

from edge_agent.sandbox.sandboxd.file_tools import FILE_BYTES_LIMIT, FileTools
from edge_agent.sandbox.sandboxd.paths import Workspace
from edge_agent.sandbox.sandboxd.search import GLOB_RESULT_LIMIT


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    root.mkdir()
    return root.resolve()


@pytest.fixture
def files(ws: Path) -> FileTools:
    return FileTools(Workspace(str(ws)), use_rg=False)


def text_of(files: FileTools, tool: str, inp: dict[str, Any]) -> tuple[str, bool]:
    blocks, is_error = files.run(tool, inp)
    assert all(b["type"] == "text" for b in blocks)
    return "".join(b["text"] for b in blocks), is_error


# path policy ---------------------------------------------------------------------------------


@pytest.mark.parametrize("tool", ["read", "write", "edit"])
@pytest.mark.parametrize("path", ["../etc/passwd", "/etc/passwd", "a/../../x", "/"])
def test_paths_outside_workspace_are_refused(files: FileTools, tool: str, path: str) -> None:
    inp = {"file_path": path, "content": "x", "old_string": "a", "new_string": "b"}
    text, is_error = text_of(files, tool, inp)
    assert is_error
    assert text == f"{tool}: path '{path}' is outside the session's working directory"


def test_symlink_pointing_outside_is_refused(files: FileTools, ws: Path) -> None:
    (ws / "etc").symlink_to("/etc")
    (ws / "dangling").symlink_to("/nonexistent/file")
    for tool, path in [("read", "etc/passwd"), ("write", "dangling"), ("glob", "etc"), ("grep", "etc")]:
        inp = {"file_path": path, "content": "x", "path": path, "pattern": "*"}
        text, is_error = text_of(files, tool, inp)
        assert is_error and "is outside the session's working directory" in text, (tool, text)


def test_symlink_inside_workspace_is_followed(files: FileTools, ws: Path) -> None:
    (ws / "real.txt").write_text("hi")
    (ws / "link.txt").symlink_to(ws / "real.txt")
    assert text_of(files, "read", {"file_path": "link.txt"}) == ("hi", False)


def test_absolute_path_inside_workspace_is_allowed(files: FileTools, ws: Path) -> None:
    (ws / "a.txt").write_text("abc")
    assert text_of(files, "read", {"file_path": str(ws / "a.txt")}) == ("abc", False)


# read ----------------------------------------------------------------------------------------


def test_read_whole_file_and_view_range(files: FileTools, ws: Path) -> None:
    (ws / "f.txt").write_text("one\ntwo\nthree\n")
    assert text_of(files, "read", {"file_path": "f.txt"}) == ("one\ntwo\nthree\n", False)
    assert text_of(files, "read", {"file_path": "f.txt", "view_range": [2, 3]}) == ("two\nthree", False)
    assert text_of(files, "read", {"file_path": "f.txt", "view_range": [2, 0]}) == ("two\nthree\n", False)
    assert text_of(files, "read", {"file_path": "f.txt", "view_range": [2, -1]}) == ("two\nthree\n", False)
    assert text_of(files, "read", {"file_path": "f.txt", "view_range": [1, 1]}) == ("one", False)
    assert text_of(files, "read", {"file_path": "f.txt", "view_range": [3, 2]})[1]
    assert text_of(files, "read", {"file_path": "f.txt", "view_range": [1]})[1]


def test_view_range_matches_split_semantics(files: FileTools, ws: Path) -> None:
    content = "a\nb\n\nc"
    (ws / "g.txt").write_text(content)
    lines = content.split("\n")
    for start, end in [(1, 0), (2, 3), (4, 4), (3, 0), (5, 0)]:
        expected = "\n".join(lines[start - 1 : end if end > 0 else len(lines)])
        got, is_error = text_of(files, "read", {"file_path": "g.txt", "view_range": [start, end]})
        assert not is_error
        assert got == (expected or "(no output)"), (start, end)


def test_read_large_file_needs_view_range(files: FileTools, ws: Path) -> None:
    big = ws / "big.log"
    big.write_text("".join(f"line {i}\n" for i in range(60_000)))
    assert big.stat().st_size > FILE_BYTES_LIMIT
    text, is_error = text_of(files, "read", {"file_path": "big.log"})
    assert is_error and "view_range" in text and str(FILE_BYTES_LIMIT) in text
    assert text_of(files, "read", {"file_path": "big.log", "view_range": [50_000, 50_001]}) == (
        "line 49999\nline 50000",
        False,
    )


def test_read_errors(files: FileTools, ws: Path) -> None:
    (ws / "dir").mkdir()
    (ws / "bin.dat").write_bytes(b"\xff\xfe\x00")
    os.mkfifo(ws / "fifo")
    assert text_of(files, "read", {"file_path": "nope.txt"}) == (
        "read: nope.txt: no such file or directory",
        True,
    )
    assert text_of(files, "read", {"file_path": "dir"}) == ("read: dir: not a regular file", True)
    assert text_of(files, "read", {"file_path": "fifo"}) == ("read: fifo: not a regular file", True)
    assert text_of(files, "read", {"file_path": "bin.dat"}) == ("read: bin.dat: not valid UTF-8 text", True)
    assert text_of(files, "read", {}) == ("read: missing required field 'file_path'", True)


def test_read_image_and_pdf(files: FileTools, ws: Path) -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32
    (ws / "pic.PNG").write_bytes(png)
    (ws / "doc.pdf").write_bytes(b"%PDF-1.4\n%%EOF\n")
    blocks, is_error = files.run("read", {"file_path": "pic.PNG"})
    assert not is_error
    assert blocks == [
        {"type": "image", "media_type": "image/png", "data_b64": base64.b64encode(png).decode()}
    ]
    blocks, _ = files.run("read", {"file_path": "doc.pdf"})
    assert blocks[0]["type"] == "document" and blocks[0]["media_type"] == "application/pdf"


def test_read_image_too_large(files: FileTools, ws: Path) -> None:
    with open(ws / "huge.jpg", "wb") as fh:
        fh.truncate(4 * 1024 * 1024)
    text, is_error = text_of(files, "read", {"file_path": "huge.jpg"})
    assert is_error and "image limit" in text


# write / edit --------------------------------------------------------------------------------


def test_write_creates_parents_and_counts_bytes(files: FileTools, ws: Path) -> None:
    assert text_of(files, "write", {"file_path": "a/b/c.txt", "content": "héllo\n"}) == (
        "wrote 7 bytes to a/b/c.txt",
        False,
    )
    assert (ws / "a/b/c.txt").read_text() == "héllo\n"


def test_write_refuses_directories_and_fifos(files: FileTools, ws: Path) -> None:
    (ws / "d").mkdir()
    os.mkfifo(ws / "p")
    assert text_of(files, "write", {"file_path": "d", "content": ""}) == ("write: d: is a directory", True)
    assert text_of(files, "write", {"file_path": "p", "content": ""}) == (
        "write: p: not a regular file",
        True,
    )


def test_edit(files: FileTools, ws: Path) -> None:
    (ws / "e.py").write_text("a = 1\nb = 1\n")
    assert text_of(files, "edit", {"file_path": "e.py", "old_string": "= 1", "new_string": "= 2"}) == (
        "edit: old_string appears 2 times in e.py (must be unique)",
        True,
    )
    assert text_of(files, "edit", {"file_path": "e.py", "old_string": "zzz", "new_string": ""}) == (
        "edit: old_string not found in e.py",
        True,
    )
    assert text_of(files, "edit", {"file_path": "e.py", "old_string": "a = 1", "new_string": "a = 3"}) == (
        "edited e.py (1 replacement(s))",
        False,
    )
    inp = {"file_path": "e.py", "old_string": "= ", "new_string": "== ", "replace_all": True}
    assert text_of(files, "edit", inp) == ("edited e.py (2 replacement(s))", False)
    assert (ws / "e.py").read_text() == "a == 3\nb == 1\n"
    assert text_of(files, "edit", {"file_path": "e.py", "old_string": "", "new_string": "x"})[1]
    assert text_of(files, "edit", {"file_path": "missing", "old_string": "a", "new_string": "b"}) == (
        "edit: missing: no such file or directory",
        True,
    )


# glob ----------------------------------------------------------------------------------------


def test_glob_newest_first_absolute_paths(files: FileTools, ws: Path) -> None:
    for i, name in enumerate(["old.py", "sub/mid.py", "sub/deep/new.py", "skip.txt"]):
        path = ws / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
        os.utime(path, (1000 + i, 1000 + i))
    text, is_error = text_of(files, "glob", {"pattern": "**/*.py"})
    assert not is_error
    assert text.split("\n") == [str(ws / "sub/deep/new.py"), str(ws / "sub/mid.py"), str(ws / "old.py")]
    assert text_of(files, "glob", {"pattern": "*.py", "path": "sub"}) == (str(ws / "sub/mid.py"), False)
    assert text_of(files, "glob", {"pattern": "*.rs"}) == ("no matches", False)


def test_glob_rejections(files: FileTools) -> None:
    assert text_of(files, "glob", {"pattern": "/etc/*"}) == ("glob: absolute pattern not permitted", True)
    assert text_of(files, "glob", {"pattern": "../*"}) == ("glob: '..' is not permitted in the pattern", True)
    assert text_of(files, "glob", {"pattern": "*", "path": "/etc"})[1]


def test_glob_caps_results(files: FileTools, ws: Path) -> None:
    for i in range(GLOB_RESULT_LIMIT + 20):
        (ws / f"f{i}.txt").write_text("")
    text, _ = text_of(files, "glob", {"pattern": "*.txt"})
    assert len(text.split("\n")) == GLOB_RESULT_LIMIT


# grep (pure-Python walk; the rg path is covered by the Docker tests) -------------------------


def test_grep_walk(files: FileTools, ws: Path) -> None:
    (ws / "src").mkdir()
    (ws / "src/a.py").write_text("import os\nTODO: fix\n")
    (ws / "b.txt").write_text("nothing\ntodo lower\nTODO again\n")
    (ws / ".git").mkdir()
    (ws / ".git/config").write_text("TODO in git\n")
    (ws / "bin").write_bytes(b"TODO\x00binary")
    (ws / "long.txt").write_text("TODO" + "x" * 5000 + "\n")
    text, is_error = text_of(files, "grep", {"pattern": "TODO"})
    assert not is_error
    assert sorted(text.split("\n")) == sorted([f"{ws}/src/a.py:2:TODO: fix", f"{ws}/b.txt:3:TODO again"])
    assert text_of(files, "grep", {"pattern": "TODO", "path": "src/a.py"}) == (
        f"{ws}/src/a.py:2:TODO: fix",
        False,
    )
    assert text_of(files, "grep", {"pattern": "nomatch"}) == ("no matches", False)
    text, is_error = text_of(files, "grep", {"pattern": "("})
    assert is_error and text.startswith("grep: invalid regex")
    assert text_of(files, "grep", {"pattern": "x", "path": "nope"}) == (
        "grep: nope: no such file or directory",
        True,
    )


def test_unknown_tool(files: FileTools) -> None:
    assert text_of(files, "bash", {}) == ("unknown tool 'bash'", True)
    assert text_of(files, "__init__", {}) == ("unknown tool '__init__'", True)
