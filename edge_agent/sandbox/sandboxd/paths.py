"""The path policy: every path a file tool touches is resolved without a check-then-open race.

A path names one of two roots: the workspace (``/workspace``; relative paths are relative to it)
or the mounts root (``/mnt``: the session's memory stores, skills and uploads; absolute paths
only). It is resolved beneath that root and never leaves it, by a symlink or ``..``:
``openat2`` with ``RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`` from a descriptor of the root
when the kernel offers it, else (and whenever ``openat2`` refuses, e.g. for an absolute symlink that
points back into the workspace) a walk one component at a time: each directory is opened relative
to the descriptor of its parent with ``O_NOFOLLOW | O_DIRECTORY``, symlinks are read with
``readlinkat`` and expanded by the walk itself, ``..`` pops the walk's own stack of descriptors
(never past the root), and the last component is opened with ``O_NOFOLLOW``. A path swapped for a
symlink between two steps is seen by the next step, never followed blindly.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import sys
from typing import Any

from .common import ToolError

_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_BENEATH = 0x08
_SYS_OPENAT2 = 437  # the same number on every Linux architecture that has it
MAX_SYMLINKS = 40
RESOLVE_RETRIES = 8
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class PathEscape(Exception):
    """A path (or a symlink on it) leads outside its root."""


class Openat2:
    """``openat2(2)`` through ctypes; :meth:`load` returns None where it is missing or blocked."""

    def __init__(self, syscall: Any, how_type: Any, ctypes_mod: Any) -> None:
        self._syscall = syscall
        self._how_type = how_type
        self._ctypes = ctypes_mod

    @classmethod
    def load(cls) -> Openat2 | None:
        if not sys.platform.startswith("linux"):
            return None
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            syscall = libc.syscall
        except (ImportError, OSError, AttributeError):
            return None
        syscall.restype = ctypes.c_long

        class OpenHow(ctypes.Structure):
            _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]

        probe = cls(syscall, OpenHow, ctypes)
        try:
            fd = probe.open(os.open("/", DIR_FLAGS), ".", DIR_FLAGS, 0, close_dir=True)
        except OSError:
            return None  # ENOSYS (old kernel) or EPERM (a seccomp profile that blocks it)
        os.close(fd)
        return probe

    def open(self, dir_fd: int, path: str, flags: int, mode: int, *, close_dir: bool = False) -> int:
        how = self._how_type(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0, 0)
        how.resolve = _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS
        try:
            fd = int(
                self._syscall(
                    _SYS_OPENAT2,
                    self._ctypes.c_int(dir_fd),
                    os.fsencode(path),
                    self._ctypes.byref(how),
                    self._ctypes.c_size_t(self._ctypes.sizeof(how)),
                )
            )
        finally:
            if close_dir:
                os.close(dir_fd)
        if fd < 0:
            err = self._ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return fd


def walk_beneath(root_fd: int, root: str, rel: str, *, create_dirs: bool = False) -> tuple[int, str]:
    """Resolve ``rel`` beneath the directory ``root_fd`` (whose canonical path is ``root``).

    Returns ``(fd, name)``: an open descriptor of the directory that holds the last component and
    that component's name, which is not a symlink (or did not exist) when it was looked at; the
    caller opens it with ``O_NOFOLLOW`` and resolves again if it became one. ``name`` is "" when the
    path ends at a directory reached through ``.``/``..`` (or is the root); ``fd`` is that directory.
    The caller closes ``fd``. Raises :class:`PathEscape` for any way out of the root (``..`` past it,
    a symlink to an absolute path elsewhere), ``OSError`` for everything else.
    """
    stack = [os.dup(root_fd)]
    todo = [part for part in rel.split("/") if part not in ("", ".")]
    todo.reverse()  # a stack: the next component is last
    links = 0
    try:
        while todo:
            part = todo.pop()
            if part in ("", "."):
                continue
            if part == "..":
                if len(stack) == 1:
                    raise PathEscape(rel)
                os.close(stack.pop())
                continue
            cur = stack[-1]
            try:
                target: str | None = os.readlink(part, dir_fd=cur)
            except OSError as exc:
                if exc.errno not in (errno.EINVAL, errno.ENOENT):
                    raise
                target = None
            if target is not None:
                links += 1
                if links > MAX_SYMLINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
                if target.startswith("/"):
                    # Absolute: followed only when it names a place inside the root.
                    if target != root and not target.startswith(root.rstrip("/") + "/"):
                        raise PathEscape(rel)
                    target = target[len(root) :]
                    while len(stack) > 1:
                        os.close(stack.pop())
                todo.extend(reversed([p for p in target.split("/") if p not in ("", ".")]))
                continue
            if not todo:
                result = (stack.pop(), part)
                return result
            try:
                fd = os.open(part, DIR_FLAGS | os.O_NOFOLLOW, dir_fd=cur)
            except FileNotFoundError:
                if not create_dirs:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o777, dir_fd=cur)
                todo.append(part)  # look again: it may be anything by now
                continue
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    todo.append(part)  # became a symlink since readlink: look again
                    links += 1
                    if links > MAX_SYMLINKS:
                        raise
                    continue
                raise
            stack.append(fd)
        return stack.pop(), ""
    finally:
        for fd in stack:
            os.close(fd)


class Workspace:
    """The directories the file tools are confined to (after following every symlink): the
    workspace (``root``; relative paths are relative to it) and, when given, the mounts root
    (``mounts_root``, ``/mnt`` in a sandbox: memory stores, skills, uploads), reached by absolute
    paths only. A path is resolved beneath the one of them it names; a symlink (or ``..``) never
    leads from one to the other or anywhere else."""

    def __init__(self, root: str, *, mounts_root: str | None = None, use_openat2: bool = True) -> None:
        self.root = os.path.realpath(root)
        self.mounts_root = os.path.realpath(mounts_root) if mounts_root else None
        self.openat2 = Openat2.load() if use_openat2 else None

    @staticmethod
    def _beneath(path: str, root: str) -> bool:
        return path == root or path.startswith(root.rstrip("/") + "/")

    def within(self, path: str) -> bool:
        """``path`` (absolute) names the workspace or something in it."""
        return self._beneath(path, self.root)

    def within_mounts(self, path: str) -> bool:
        """``path`` (absolute) names the mounts root or something in it."""
        return self.mounts_root is not None and self._beneath(path, self.mounts_root)

    def within_any(self, path: str) -> bool:
        return self.within(path) or self.within_mounts(path)

    def locate(self, tool: str, given: str) -> tuple[str, str]:
        """``(root, path relative to it)`` for ``given`` (not yet resolved); refuses paths elsewhere."""
        if not given:
            raise ToolError(f"{tool}: path must not be empty")
        if "\x00" in given:
            raise ToolError(f"{tool}: path must not contain NUL bytes")
        root = self.root
        if given.startswith("/"):
            # The longer root wins, should one lie inside the other.
            candidates = [r for r in (self.root, self.mounts_root) if r and self._beneath(given, r)]
            if not candidates:
                raise self.outside(tool, given)
            root = max(candidates, key=len)
            given_rel = given[len(root) :].lstrip("/") or "."
        else:
            given_rel = given
        # Plainly outside, whatever the symlinks on the way: refuse before touching anything.
        lexical = os.path.normpath(given_rel)
        if lexical == ".." or lexical.startswith("../"):
            raise self.outside(tool, given)
        return root, given_rel

    def relative(self, tool: str, given: str) -> str:
        """``given`` relative to its root (see :meth:`locate`)."""
        return self.locate(tool, given)[1]

    def in_workspace(self, tool: str, given: str) -> bool:
        """``given`` is resolved beneath the workspace (not the mounts): the quota applies."""
        return self.locate(tool, given)[0] == self.root

    def outside(self, tool: str, given: str) -> ToolError:
        where = "the session's working directory"
        if self.mounts_root is not None:
            where += f" ({self.root}) and its mounts ({self.mounts_root})"
        return ToolError(f"{tool}: path '{given}' is outside {where}")

    def open(self, tool: str, given: str, flags: int, mode: int = 0o666, *, create_dirs: bool = False) -> int:
        """Open ``given`` (symlinks followed) without ever leaving the root it names.

        Raises :class:`ToolError` for a path outside the workspace and the mounts, ``OSError``
        otherwise.
        """
        root, rel = self.locate(tool, given)
        root_fd = os.open(root, DIR_FLAGS)
        try:
            if self.openat2 is not None:
                with contextlib.suppress(OSError):  # the walk gives the definitive answer
                    return self.openat2.open(root_fd, rel, flags, mode)
            for _ in range(RESOLVE_RETRIES):
                try:
                    parent, name = walk_beneath(root_fd, root, rel, create_dirs=create_dirs)
                except PathEscape:
                    raise self.outside(tool, given) from None
                try:
                    if not name:
                        return os.open(".", flags | os.O_CLOEXEC, mode, dir_fd=parent)
                    return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=parent)
                except OSError as exc:
                    if exc.errno != errno.ELOOP:
                        raise
                    # The last component became a symlink after it was looked at: resolve again.
                finally:
                    os.close(parent)
            raise ToolError(f"{tool}: {given}: the path kept changing while it was opened; try again")
        finally:
            os.close(root_fd)

    def read_only(self, tool: str, given: str) -> ToolError:
        """The error for a write the kernel refused with ``EROFS``, naming the read-only mount."""
        root, rel = self.locate(tool, given)
        lexical = os.path.normpath(os.path.join(root, rel))
        mount = mount_point_of(lexical)
        if mount is not None and mount not in ("/", root) and self.within_any(mount):
            return ToolError(f"{tool}: {given}: read-only: {mount} is mounted read-only")
        return ToolError(f"{tool}: {given}: read-only file system")

    def open_dir(self, tool: str, given: str | None) -> int:
        return self.open(tool, given or ".", os.O_RDONLY | os.O_DIRECTORY)

    @staticmethod
    def fd_path(fd: int) -> str:
        """A path that names exactly what ``fd`` is open on (for a child process, pass the fd)."""
        return f"/proc/self/fd/{fd}"

    @staticmethod
    def real_path(fd: int) -> str:
        """The canonical path of what ``fd`` is open on, for messages and output."""
        return os.readlink(f"/proc/self/fd/{fd}")


def _unescape_mountinfo(field: str) -> str:
    """``/proc/self/mountinfo`` escapes space, tab, newline and backslash as ``\\ooo``."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mount_point_of(path: str, mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """The mount point ``path`` (absolute, normalised) lies on, from ``mountinfo``; None if unknown."""
    try:
        with open(mountinfo, encoding="utf-8", errors="surrogateescape") as fh:
            points = [_unescape_mountinfo(line.split(" ")[4]) for line in fh if line.count(" ") >= 5]
    except OSError:
        return None
    best: str | None = None
    for point in points:
        if (path == point or path.startswith(point.rstrip("/") + "/")) and (
            best is None or len(point) > len(best)
        ):
            best = point
    return best
