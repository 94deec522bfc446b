"""A clone on the edge host as a tar archive for the sandbox's workspace volume.

Every entry is owned by the sandbox user (uid/gid 1000 by default) with set-uid/set-gid bits
cleared; only directories, regular files and symbolic links are kept. The archive is rooted at
the workspace: ``a/b`` for ``/workspace/a/b``, with entries for the missing parents so the daemon
does not create them as root. Blocking (file I/O): callers run it in a thread.
"""

from __future__ import annotations

import posixpath
import tarfile
from pathlib import Path
from typing import BinaryIO

__all__ = ["write_tree_tar"]

_KEEP = (tarfile.DIRTYPE, tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.SYMTYPE)
_MODE_MASK = 0o1777  # no set-uid / set-gid


def write_tree_tar(src: Path, relative: str, out: BinaryIO, *, uid: int = 1000, gid: int = 1000) -> None:
    """Write ``src`` (a directory) into ``out`` as the tree ``relative`` owned by ``uid:gid``."""

    def own(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid, info.gid, info.uname, info.gname = uid, gid, "", ""
        info.mode &= _MODE_MASK
        return info

    def owned(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        return own(info) if info.type in _KEEP else None

    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        parent = posixpath.dirname(relative)
        parents: list[str] = []
        while parent:
            parents.insert(0, parent)
            parent = posixpath.dirname(parent)
        for name in parents:
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(own(info))
        tar.add(src, arcname=relative, recursive=True, filter=owned)
