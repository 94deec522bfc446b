"""The host side of a session's read-only content: its files and skills.

Blobs arrive from the control plane before the spec that mounts them, in
:class:`~outpost_wire.frames.PutBlob` chunks (:meth:`ContentMounts.put_chunk`). A blob is
assembled in ``<root>/blobs/<sha256>.<session>.part`` (chunks in order: a chunk past the bytes
held is refused, a chunk already held is taken again harmlessly, offset 0 starts over), checked
against its sha256 when whole, and kept as ``<root>/blobs/<sha256>`` (read-only): a cache shared by
the edge's sessions, so a blob the edge holds is not sent again. The cache has a disk budget
(``budget_bytes``): the least recently used blobs are evicted to make room; a blob larger than the
budget is refused with a message saying so.

Each sandbox gets two per-session host directories, bind-mounted read-only: ``/mnt/session``
(files at their mount paths, hard links to the cache, copies across file systems) and
``/mnt/skills`` (each skill's zip unpacked at ``<name>/``: regular files and directories only,
every path checked against traversal, sizes bounded by the archive's own). :meth:`apply` makes
them hold exactly the session's current mounts, so a file added (or removed) after the sandbox
was made appears (or goes) at the next call.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
import shutil
import stat
import threading
import zipfile
from collections.abc import Sequence
from pathlib import Path

from edge_agent.errors import EdgeError
from outpost_wire.frames import BlobMount, BlobStored, PutBlob

__all__ = ["SESSION_ROOT", "SKILLS_ROOT", "BlobRefused", "ContentMounts"]

SESSION_ROOT = "/mnt/session"
SKILLS_ROOT = "/mnt/skills"
DEFAULT_BUDGET_BYTES = 2 * 1024 * 1024 * 1024
_MAX_UNPACKED_BYTES = 256 * 1024 * 1024  # a skill archive's members together, inflated


class BlobRefused(EdgeError):
    """A chunk the edge cannot take: a gap, a checksum mismatch, over the disk budget."""


class ContentMounts:
    def __init__(self, root: Path, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> None:
        self.root = root
        self.budget_bytes = budget_bytes
        self._blobs = root / "blobs"
        self._sessions = root / "sessions"
        self._lock = threading.Lock()

    # -- the blob cache --------------------------------------------------------------------------
    def blob_path(self, sha256: str) -> Path:
        return self._blobs / sha256

    def has(self, sha256: str) -> bool:
        return self.blob_path(sha256).is_file()

    def put_chunk(self, session_id: str, chunk: PutBlob) -> BlobStored:
        """Take one chunk; ``complete`` once the blob is whole and its sha256 checked. Serialized:
        two pushes of one blob (a provision and a call of the same session) meet harmlessly."""
        with self._lock:
            return self._put_chunk(session_id, chunk)

    def _put_chunk(self, session_id: str, chunk: PutBlob) -> BlobStored:
        done = self.blob_path(chunk.sha256)
        part = self._blobs / f"{chunk.sha256}.{_safe(session_id)}.part"
        if done.is_file():
            os.utime(done)  # recently used
            part.unlink(missing_ok=True)
            return BlobStored(chunk.sha256, chunk.total_size, True)
        if chunk.total_size > self.budget_bytes:
            raise BlobRefused(
                f"a blob of {chunk.total_size} bytes is larger than this edge's content cache budget "
                f"({self.budget_bytes} bytes; edge setting sandbox.content_cache_bytes)"
            )
        if chunk.offset + len(chunk.data) > chunk.total_size:
            raise BlobRefused(f"a chunk ends past the blob's {chunk.total_size} bytes")
        self._blobs.mkdir(parents=True, exist_ok=True)
        held = part.stat().st_size if part.exists() else 0
        if chunk.offset == 0 and not held:
            self._make_room(chunk.total_size)
        if chunk.offset > held:
            raise BlobRefused(
                f"a chunk at offset {chunk.offset} but the edge holds {held} bytes (a chunk lost)"
            )
        # A chunk at or before the bytes held (sent again, or a push starting over) rewrites the
        # same bytes: the sha256 check at the end catches any that differ.
        with open(part, "r+b" if held else "wb") as out:
            out.seek(chunk.offset)
            out.write(chunk.data)
        received = chunk.offset + len(chunk.data)
        if max(received, held) < chunk.total_size:
            return BlobStored(chunk.sha256, received, False)
        digest = hashlib.sha256()
        with open(part, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        if digest.hexdigest() != chunk.sha256:
            part.unlink(missing_ok=True)
            raise BlobRefused(f"checksum mismatch: the bytes received hash to {digest.hexdigest()[:16]}…")
        part.chmod(0o444)
        os.replace(part, done)
        return BlobStored(chunk.sha256, chunk.total_size, True)

    def _make_room(self, size: int) -> None:
        """Evict the least recently used complete blobs until ``size`` more bytes fit."""
        blobs = [p for p in self._blobs.iterdir() if p.is_file() and "." not in p.name]
        used = sum(p.stat().st_size for p in blobs)
        for old in sorted(blobs, key=lambda p: p.stat().st_mtime):
            if used + size <= self.budget_bytes:
                return
            used -= old.stat().st_size
            old.unlink(missing_ok=True)  # sessions' hard links keep their content

    # -- per-session directories -----------------------------------------------------------------
    def session_dirs(self, session_id: str) -> tuple[Path, Path]:
        base = self._sessions / _safe(session_id)
        return base / "session", base / "skills"

    def binds(self, session_id: str) -> tuple[tuple[str, str, bool], ...]:
        """``(host path, path in the sandbox, read only)`` of the two mounts (made if missing)."""
        files, skills = self.session_dirs(session_id)
        for directory in (files, skills):
            directory.mkdir(parents=True, exist_ok=True)
            directory.chmod(0o755)
        return ((str(files), SESSION_ROOT, True), (str(skills), SKILLS_ROOT, True))

    def missing(self, mounts: Sequence[BlobMount]) -> list[BlobMount]:
        return [m for m in mounts if not self.has(m.sha256)]

    def apply(self, session_id: str, mounts: Sequence[BlobMount]) -> None:
        """Make the session's directories hold exactly ``mounts`` (each blob must be held)."""
        files_dir, skills_dir = self.session_dirs(session_id)
        wanted_files: dict[Path, str] = {}
        wanted_skills: dict[str, str] = {}
        for mount in mounts:
            if mount.kind == "file":
                relative = posixpath.relpath(mount.mount_path, SESSION_ROOT)
                if relative.startswith("..") or relative == ".":
                    raise BlobRefused(
                        f"file {mount.name}: mount path {mount.mount_path} is not under {SESSION_ROOT}"
                    )
                wanted_files[files_dir / relative] = mount.sha256
            else:
                name = posixpath.basename(mount.mount_path)
                if _safe(name) != name or name in ("", ".", ".."):
                    raise BlobRefused(f"skill {mount.name}: bad mount path {mount.mount_path}")
                wanted_skills[name] = mount.sha256
        self.binds(session_id)
        _clear_except(files_dir, set(wanted_files))
        for target, sha in wanted_files.items():
            if target.is_file() and not target.is_symlink() and _same(target, self.blob_path(sha)):
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.unlink(missing_ok=True)
            try:
                os.link(self.blob_path(sha), target)
            except OSError:
                shutil.copyfile(self.blob_path(sha), target)
                target.chmod(0o444)
        for child in skills_dir.iterdir():
            if (
                child.name not in wanted_skills
                or not (child / f".sha256-{wanted_skills[child.name]}").exists()
            ):
                _remove(child)
        for name, sha in wanted_skills.items():
            if not (skills_dir / name).exists():
                _unpack_skill(self.blob_path(sha), skills_dir / name, name, sha)

    def forget(self, session_id: str) -> None:
        shutil.rmtree(self._sessions / _safe(session_id), ignore_errors=True)


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in text)


def _same(a: Path, b: Path) -> bool:
    with contextlib.suppress(OSError):
        return a.stat().st_ino == b.stat().st_ino or a.read_bytes() == b.read_bytes()
    return False


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _clear_except(directory: Path, keep: set[Path]) -> None:
    """Remove what ``directory`` holds beyond the files ``keep`` (and their parents)."""
    parents = {p for path in keep for p in path.parents}
    for root, dirs, names in os.walk(directory, topdown=False):
        for name in names:
            path = Path(root) / name
            if path not in keep:
                path.unlink(missing_ok=True)
        for name in dirs:
            path = Path(root) / name
            if path not in parents:
                _remove(path)


def _unpack_skill(archive: Path, target: Path, name: str, sha256: str) -> None:
    """Unpack a skill's canonical zip (one top-level directory) into ``target``: regular files
    and directories only, each path checked (no absolute path, no ``..``, no links), at most
    :data:`_MAX_UNPACKED_BYTES` in all. Made beside ``target`` and renamed into place."""
    staging = target.with_name(f".{name}.unpacking")
    _remove(staging)
    staging.mkdir(parents=True)
    total = 0
    try:
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                parts = info.filename.split("/")
                mode = info.external_attr >> 16
                if info.filename.startswith("/") or "\\" in info.filename or ".." in parts:
                    raise BlobRefused(f"skill {name}: unsafe path {info.filename!r} in its archive")
                if stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):  # links, devices, FIFOs
                    raise BlobRefused(f"skill {name}: {info.filename!r} is not a regular file")
                relative = "/".join(parts[1:])  # below the one top-level directory
                if not relative or info.is_dir():
                    continue
                total += info.file_size
                if total > _MAX_UNPACKED_BYTES:
                    raise BlobRefused(
                        f"skill {name}: its files together are over {_MAX_UNPACKED_BYTES} bytes"
                    )
                path = staging / relative
                path.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(path, "xb") as out:
                    shutil.copyfileobj(src, out)
                path.chmod(0o755 if mode & 0o111 else 0o644)
        (staging / f".sha256-{sha256}").touch()
        os.replace(staging, target)
    except zipfile.BadZipFile as exc:
        raise BlobRefused(f"skill {name}: its archive is not a zip ({exc})") from None
    finally:
        _remove(staging)
