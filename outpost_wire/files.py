"""Durable file writes shared by both sides (identity files, CA files, small state files)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["write_atomic"]


def write_atomic(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` through a temp file in the same directory (created with ``mode``),
    fsync it, rename it over ``path`` and fsync the directory: readers see the old file or the new
    one, never a torn one, and the new one survives a crash once this returns."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
