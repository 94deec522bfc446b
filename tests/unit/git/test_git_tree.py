"""The clone as a tar for the workspace: owned by the sandbox user, parents included, nothing but
directories, files and symlinks, no set-uid bits."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

from edge_agent.git.tree import write_tree_tar


def test_entries_are_owned_by_the_sandbox_user(tmp_path: Path) -> None:
    src = tmp_path / "tree"
    (src / ".git").mkdir(parents=True)
    (src / ".git" / "config").write_text("[core]\n")
    (src / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(src / "run.sh", 0o4755)
    os.symlink("run.sh", src / "link")
    os.mkfifo(src / "fifo")
    out = io.BytesIO()
    write_tree_tar(src, "team/app", out, uid=1000, gid=1000)
    out.seek(0)
    with tarfile.open(fileobj=out) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert sorted(members) == [
        "team",
        "team/app",
        "team/app/.git",
        "team/app/.git/config",
        "team/app/link",
        "team/app/run.sh",
    ]
    assert {(m.uid, m.gid, m.uname, m.gname) for m in members.values()} == {(1000, 1000, "", "")}
    assert members["team"].isdir() and members["team"].mode == 0o755
    assert members["team/app/run.sh"].mode == 0o755  # set-uid cleared
    assert members["team/app/link"].issym() and members["team/app/link"].linkname == "run.sh"
