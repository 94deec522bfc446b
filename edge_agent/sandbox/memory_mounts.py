"""Memory stores materialised in a sandbox: host directories bind-mounted at ``/mnt/memory/<slug>``.

A session's mounted memory stores (:class:`~outpost_wire.frames.MemoryMount` in its sandbox spec)
each get a host directory ``<root>/<session>/<slug>``, bind-mounted into the sandbox (``:ro`` for
a read-only mount, so nothing in the sandbox can write it). The control plane sends the stores'
whole contents (:attr:`~outpost_wire.frames.Execute.memory`); :meth:`MemoryMounts.apply` makes
each directory hold exactly those files and remembers their sha256 as the **baseline**. After each
tool call :meth:`MemoryMounts.scan` compares the read-write directories with the baseline and
returns what changed (:class:`~outpost_wire.results.MemoryChange`: written with its content and
the baseline hash, deleted, or refused with an error), then takes the new state as the baseline.

The scan never follows a link: it walks with directory file descriptors (``O_NOFOLLOW`` at every
step), so a symlink swapped in by a process still running in the sandbox cannot make it read a
file outside the mount. Symlinks and other non-regular files, files over
:data:`MAX_FILE_BYTES`, text that is not UTF-8 and files past :data:`MAX_FILES` are refused (each
reported once until it changes) and never become memories.

The directories are world-writable (0777, files 0666): the sandbox's user is not the edge's; a
read-only mount is read-only by the bind mount itself (writes fail with ``EROFS``). They live
under the edge's state directory (0700), so only the sandbox and the
edge reach them. The baseline lives in memory: after a restart the edge holds none, asks for the
spec again (``SANDBOX_SPEC_REQUIRED``) and the control plane re-sends the contents with it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

from outpost_wire.frames import MemoryMount, MemorySnapshot
from outpost_wire.results import MemoryChange

from .spec import sanitize_name

__all__ = ["MAX_FILES", "MAX_FILE_BYTES", "MOUNT_ROOT", "MemoryMounts"]

MOUNT_ROOT = "/mnt/memory"
MAX_FILE_BYTES = 102_400  # a memory's content limit
MAX_FILES = 2_000  # a memory store's limit
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class MemoryMounts:
    """The host side of every session's memory mounts (thread-safe per session: the dispatcher
    runs one call of a session at a time through :meth:`apply` / :meth:`scan`)."""

    def __init__(self, root: Path) -> None:
        self._root = root
        #: session id -> store id -> memory path -> sha256 of the content the sandbox was given
        self._baselines: dict[str, dict[str, dict[str, str]]] = {}
        #: session id -> (store id, path) -> a signature of a refused file (reported once)
        self._refused: dict[str, dict[tuple[str, str], tuple[int, int]]] = {}

    def host_dir(self, session_id: str, mount: MemoryMount) -> Path:
        return self._root / sanitize_name(session_id) / mount.slug

    def binds(self, session_id: str, mounts: Sequence[MemoryMount]) -> tuple[tuple[str, str, bool], ...]:
        """``(host path, path in the sandbox, read only)`` of each mount; the directories are
        made (empty) if missing, since Docker refuses a bind of a missing source."""
        for mount in mounts:
            self._make_dir(self.host_dir(session_id, mount), mount.read_only)
        return tuple(
            (str(self.host_dir(session_id, m)), f"{MOUNT_ROOT}/{m.slug}", m.read_only) for m in mounts
        )

    def has_baseline(self, session_id: str) -> bool:
        return session_id in self._baselines

    def apply(
        self, session_id: str, mounts: Sequence[MemoryMount], snapshots: Sequence[MemorySnapshot]
    ) -> None:
        """Make each mount's directory hold exactly its snapshot's files (a mount without a
        snapshot: none), and take them as the baseline."""
        by_store = {snap.store_id: snap for snap in snapshots}
        baseline: dict[str, dict[str, str]] = {}
        for mount in mounts:
            directory = self.host_dir(session_id, mount)
            self._make_dir(directory, mount.read_only)
            snapshot = by_store.get(mount.store_id, MemorySnapshot(mount.store_id))
            wanted: dict[str, bytes] = {}
            for item in snapshot.files:
                relative = item.path.lstrip("/")
                if relative and ".." not in relative.split("/"):
                    wanted[relative] = item.content.encode("utf-8")
            file_mode = 0o666  # read-only mounts are read-only by the mount (EROFS), not by modes
            for relative, data in wanted.items():
                self._write(directory, relative, data, file_mode, mount.read_only)
            for relative in self._stale(directory, wanted):
                with contextlib.suppress(OSError):
                    os.unlink(directory / relative)
            baseline[mount.store_id] = {"/" + rel: _sha(data) for rel, data in wanted.items()}
        self._baselines[session_id] = baseline
        self._refused[session_id] = {}

    def scan(self, session_id: str, mounts: Sequence[MemoryMount]) -> tuple[MemoryChange, ...]:
        """What changed in the session's read-write mounts since the baseline; the new state
        becomes the baseline (refused files are not part of it)."""
        baselines = self._baselines.get(session_id)
        if baselines is None:
            return ()
        refused = self._refused.setdefault(session_id, {})
        changes: list[MemoryChange] = []
        for mount in mounts:
            if mount.read_only:
                continue
            before = baselines.get(mount.store_id, {})
            found: dict[str, str] = {}
            for path, data, error, signature in self._walk(self.host_dir(session_id, mount)):
                key = (mount.store_id, path)
                if error:
                    if refused.get(key) != signature:
                        refused[key] = signature
                        changes.append(MemoryChange(mount.store_id, path, None, before.get(path, ""), error))
                    if path in before:
                        found[path] = before[path]  # unchanged as far as memory goes
                    continue
                refused.pop(key, None)
                assert data is not None
                digest = _sha(data)
                found[path] = digest
                if before.get(path) != digest:
                    changes.append(
                        MemoryChange(mount.store_id, path, data.decode("utf-8"), before.get(path, ""))
                    )
            for path, digest in before.items():
                if path not in found:
                    changes.append(MemoryChange(mount.store_id, path, None, digest))
            baselines[mount.store_id] = found
        return tuple(changes)

    def forget(self, session_id: str) -> None:
        """Drop the session's baseline and remove its directories (the sandbox is gone)."""
        self._baselines.pop(session_id, None)
        self._refused.pop(session_id, None)
        shutil.rmtree(self._root / sanitize_name(session_id), ignore_errors=True)

    # -- helpers ------------------------------------------------------------------------------

    def _make_dir(self, directory: Path, read_only: bool) -> None:
        self._root.mkdir(parents=True, exist_ok=True, mode=0o700)
        directory.parent.mkdir(exist_ok=True, mode=0o755)
        directory.mkdir(exist_ok=True)
        os.chmod(directory, 0o777)  # noqa: S103 - the sandbox user must write; parent is 0700

    def _write(self, directory: Path, relative: str, data: bytes, mode: int, read_only: bool) -> None:
        target = directory / relative
        parent = target.parent
        if parent != directory:
            parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):
                os.chmod(parent, 0o777)  # noqa: S103 - as above
        with contextlib.suppress(FileNotFoundError):
            info = os.lstat(target)
            if stat.S_ISREG(info.st_mode) and info.st_size == len(data) and target.read_bytes() == data:
                os.chmod(target, mode)
                return
            if stat.S_ISDIR(info.st_mode):
                shutil.rmtree(target, ignore_errors=True)
        temporary = parent / f".{target.name}.outpost-sync"
        temporary.write_bytes(data)
        os.chmod(temporary, mode)
        os.replace(temporary, target)

    def _stale(self, directory: Path, wanted: dict[str, bytes]) -> list[str]:
        stale: list[str] = []
        for top, dirs, files in os.walk(directory, followlinks=False):
            for name in [*files, *(d for d in dirs if os.path.islink(os.path.join(top, d)))]:
                relative = os.path.relpath(os.path.join(top, name), directory).replace(os.sep, "/")
                if relative not in wanted:
                    stale.append(relative)
        return stale

    def _walk(self, directory: Path) -> Iterator[tuple[str, bytes | None, str, tuple[int, int]]]:
        """``(memory path, content, error, signature)`` of every entry under ``directory``,
        never following a link; at most :data:`MAX_FILES` files are read."""
        try:
            fd = os.open(directory, _DIR_FLAGS)
        except OSError:
            return
        count = [0]
        try:
            yield from self._walk_fd(fd, "", count)
        finally:
            os.close(fd)

    def _walk_fd(
        self, fd: int, prefix: str, count: list[int]
    ) -> Iterator[tuple[str, bytes | None, str, tuple[int, int]]]:
        with os.scandir(fd) as entries:
            listed = sorted(entries, key=lambda e: e.name)
        for entry in listed:
            if entry.name.startswith(".") and entry.name.endswith(".outpost-sync"):
                continue
            path = f"{prefix}/{entry.name}"
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            signature = (info.st_size, info.st_mtime_ns)
            if stat.S_ISDIR(info.st_mode):
                try:
                    child = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    yield path, None, "a directory that cannot be opened (or a link) is not synced", signature
                    continue
                try:
                    yield from self._walk_fd(child, path, count)
                finally:
                    os.close(child)
                continue
            if stat.S_ISLNK(info.st_mode):
                yield path, None, "a symbolic link is not a memory: it was not saved", signature
                continue
            if not stat.S_ISREG(info.st_mode):
                yield path, None, "not a regular file: it was not saved", signature
                continue
            count[0] += 1
            if count[0] > MAX_FILES:
                yield path, None, f"more than {MAX_FILES} files in the store: not saved", signature
                continue
            yield self._read(fd, entry.name, path, signature)

    @staticmethod
    def _read(
        fd: int, name: str, path: str, signature: tuple[int, int]
    ) -> tuple[str, bytes | None, str, tuple[int, int]]:
        try:
            file_fd = os.open(name, _FILE_FLAGS, dir_fd=fd)
        except OSError as exc:
            return path, None, f"cannot be read ({exc.strerror}): it was not saved", signature
        with os.fdopen(file_fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return path, None, "not a regular file: it was not saved", signature
            data = handle.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            return path, None, f"larger than {MAX_FILE_BYTES:,} bytes: it was not saved", signature
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return path, None, "not UTF-8 text: it was not saved", signature
        return path, data, "", signature
