"""The ``glob`` and ``grep`` tools: both run below a directory (or file) opened through the
:class:`~.paths.Workspace` (in the workspace, or under the mounts root when given such a path),
on descriptors, so no rename or symlink swap can lead them outside."""

from __future__ import annotations

import errno
import fnmatch
import os
import re
import select
import signal
import stat
import subprocess
import time
from pathlib import PurePosixPath
from typing import Any

from .common import Result, ToolError, format_seconds, req_str
from .paths import DIR_FLAGS, Workspace

GLOB_RESULT_LIMIT = 200
WALK_MAX_ENTRIES = 50_000
GREP_OUTPUT_LIMIT = 100 * 1024
GREP_MAX_LINE_LENGTH = 2000
GREP_TIMEOUT_S = 30.0


def run_glob(ws: Workspace, inp: dict[str, Any]) -> Result:
    """``glob``: matches below ``path`` (the root by default), newest first, at most
    :data:`GLOB_RESULT_LIMIT` of them."""
    pattern = req_str("glob", inp, "pattern")
    path = req_str("glob", inp, "path", required=False)
    assert pattern is not None
    if not pattern:
        raise ToolError("glob: pattern must not be empty")
    if pattern.startswith("/"):
        raise ToolError("glob: absolute pattern not permitted")
    parts = PurePosixPath(pattern).parts
    if ".." in parts:
        raise ToolError("glob: '..' is not permitted in the pattern")
    if not parts:
        raise ToolError(f"glob: invalid pattern: {pattern!r}")
    try:
        fd = ws.open_dir("glob", path)
    except OSError:
        raise ToolError(f"glob: {path}: not a directory" if path else "glob: workspace is missing") from None
    try:
        # Match below the opened directory itself, on descriptors, so no swap can move it.
        shown = ws.real_path(fd)
        globber = _Globber(ws, shown)
        globber.run(fd, "", parts)
    finally:
        os.close(fd)
    if not globber.found:
        return "no matches"
    globber.found.sort(key=lambda match: match[1], reverse=True)
    return "\n".join(f"{shown}/{rel}" if rel else shown for rel, _ in globber.found[:GLOB_RESULT_LIMIT])


def run_grep(ws: Workspace, rg: str | None, inp: dict[str, Any]) -> Result:
    """``grep``: ``path:line:text`` hits below ``path``, with ``rg`` when there is one (a walk in
    Python otherwise)."""
    pattern = req_str("grep", inp, "pattern")
    path = req_str("grep", inp, "path", required=False)
    assert pattern is not None
    if not pattern:
        raise ToolError("grep: pattern must not be empty")
    try:
        fd = ws.open("grep", path or ".", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        raise ToolError(f"grep: {path}: no such file or directory") from None
    try:
        # Search below the opened file or directory itself (rg inherits the descriptor).
        base = ws.fd_path(fd)
        shown = ws.real_path(fd)
        if rg is not None:
            return _grep_rg(ws, rg, pattern, fd, base, shown)
        try:
            rx = re.compile(pattern)
        except re.error as exc:
            raise ToolError(f"grep: invalid regex: {exc}") from None
        return _walk_grep(rx, fd, shown)
    finally:
        os.close(fd)


def _grep_rg(ws: Workspace, rg: str, pattern: str, fd: int, base: str, shown: str) -> Result:
    argv = [rg, "--no-config", "-n", "--no-heading", "--with-filename", "--color", "never"]
    argv += ["-e", pattern, "--", base]
    proc = subprocess.Popen(
        argv,
        cwd=ws.root,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        pass_fds=(fd,),
    )
    out, err, timed_out = _collect(proc, GREP_OUTPUT_LIMIT + 1, GREP_TIMEOUT_S)
    if not out:
        if timed_out:
            raise ToolError(f"grep: timed out after {format_seconds(GREP_TIMEOUT_S)}s")
        if proc.returncode == 1:
            return "no matches"
        if proc.returncode not in (0, None):
            message = err.decode("utf-8", "replace").strip().splitlines()
            first = message[0] if message else f"exit status {proc.returncode}"
            if "regex parse error" in first or "error parsing regex" in " ".join(message):
                raise ToolError(f"grep: invalid regex: {' '.join(line.strip() for line in message[1:])}")
            raise ToolError(f"grep: rg failed: {first}")
        return "no matches"
    rebased = "\n".join(_rebase(line, base, shown) for line in out.decode("utf-8", "replace").split("\n"))
    raw = rebased.encode("utf-8")
    truncated = len(raw) > GREP_OUTPUT_LIMIT
    text = raw[:GREP_OUTPUT_LIMIT].decode("utf-8", "ignore")
    if truncated:
        text = text[: text.rfind("\n") + 1] if "\n" in text else text
        text = text.rstrip("\n") + f"\n[output truncated at {GREP_OUTPUT_LIMIT} bytes]"
    elif timed_out:
        text = text.rstrip("\n") + f"\n[grep timed out after {format_seconds(GREP_TIMEOUT_S)}s]"
    return text.rstrip("\n")


def _rebase(line: str, base: str, shown: str) -> str:
    """Show a path under ``/proc/self/fd/N`` as the workspace path it stood for."""
    if line == base or line.startswith(base + "/") or line.startswith(base + ":"):
        return shown + line[len(base) :]
    return line


class _Globber:
    """``pathlib``-style glob (``*``, ``?``, ``[...]``, ``**``) run on directory descriptors.

    Entries are listed with ``scandir`` on an open descriptor and directories entered with
    ``O_NOFOLLOW``; a symlink is followed (for ``*/x``, or to date a match) only through
    :meth:`Workspace.open`, so it never leads outside; ``**`` does not enter symlinked directories
    (as ``pathlib``). Results are paths relative to the search base, with their mtimes.
    """

    def __init__(self, ws: Workspace, base: str) -> None:
        self.ws = ws
        self.base = base  # the search base, an absolute path beneath the workspace or the mounts
        self.found: list[tuple[str, float]] = []
        self._seen: set[str] = set()

    def run(self, dir_fd: int, rel: str, parts: tuple[str, ...]) -> None:
        if len(self.found) >= WALK_MAX_ENTRIES:
            return
        part, rest = parts[0], parts[1:]
        if part == "**":
            self._recursive(dir_fd, rel, rest)
            return
        if any(c in part for c in "*?["):
            try:
                with os.scandir(dir_fd) as entries:
                    names = sorted(e.name for e in entries if fnmatch.fnmatchcase(e.name, part))
            except OSError:
                return
        else:
            names = [part]
        for name in names:
            child = f"{rel}/{name}" if rel else name
            if rest:
                child_fd = self._open_dir(dir_fd, name, child)
                if child_fd is not None:
                    try:
                        self.run(child_fd, child, rest)
                    finally:
                        os.close(child_fd)
            else:
                self._add(dir_fd, name, child)

    def _recursive(self, dir_fd: int, rel: str, rest: tuple[str, ...]) -> None:
        """``**``: this directory and every one below it (symlinked directories are not entered)."""
        if rest:
            self.run(dir_fd, rel, rest)
        elif rel not in self._seen:
            self._seen.add(rel)
            self.found.append((rel, os.fstat(dir_fd).st_mtime))
        try:
            with os.scandir(dir_fd) as entries:
                names = sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
        except OSError:
            return
        for name in names:
            if len(self.found) >= WALK_MAX_ENTRIES:
                return
            try:
                child_fd = os.open(name, DIR_FLAGS | os.O_NOFOLLOW, dir_fd=dir_fd)
            except OSError:
                continue
            try:
                self._recursive(child_fd, f"{rel}/{name}" if rel else name, rest)
            finally:
                os.close(child_fd)

    def _follow(self, child: str, flags: int) -> int | None:
        """Open the symlink at ``child`` through the workspace's resolver; None if it leads outside
        the root it is under."""
        try:
            return self.ws.open("glob", f"{self.base}/{child}", flags)
        except (ToolError, OSError):
            return None

    def _open_dir(self, dir_fd: int, name: str, child: str) -> int | None:
        try:
            return os.open(name, DIR_FLAGS | os.O_NOFOLLOW, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno not in (errno.ENOTDIR, errno.ELOOP) or not _is_symlink(dir_fd, name):
                return None
        return self._follow(child, DIR_FLAGS)

    def _add(self, dir_fd: int, name: str, child: str) -> None:
        if child in self._seen:
            return
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            return
        mtime = st.st_mtime
        if stat.S_ISLNK(st.st_mode):
            fd = self._follow(child, getattr(os, "O_PATH", os.O_RDONLY | os.O_NONBLOCK))
            if fd is None:
                return  # dangling, or pointing outside the workspace
            try:
                mtime = os.fstat(fd).st_mtime
            finally:
                os.close(fd)
        self._seen.add(child)
        self.found.append((child, mtime))


def _is_symlink(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _collect(proc: subprocess.Popen[bytes], limit: int, timeout_s: float) -> tuple[bytes, bytes, bool]:
    """Read a child's stdout up to ``limit`` bytes (then kill it) within ``timeout_s``."""
    assert proc.stdout is not None and proc.stderr is not None
    out = bytearray()
    err = bytearray()
    deadline = time.monotonic() + timeout_s
    streams = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    timed_out = False
    while streams:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out = True
            break
        ready, _, _ = select.select(list(streams), [], [], remaining)
        for fd in ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                del streams[fd]
                continue
            target = streams[fd]
            if len(target) < limit:
                target += chunk
        if len(out) >= limit:
            break
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            proc.kill()
    proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    return bytes(out), bytes(err), timed_out


def _walk_grep(rx: re.Pattern[str], search_fd: int, shown: str) -> str:
    """The fallback when rg is absent: skips .git, node_modules, symlinks, binaries, long lines.
    ``search_fd`` is the opened file or directory; hits name the workspace path ``shown`` it is."""
    hits: list[str] = []
    budget = GREP_OUTPUT_LIMIT

    def scan(fd: int, shown_path: str) -> bool:
        nonlocal budget
        try:
            with os.fdopen(fd, "rb", closefd=True) as fh:
                if b"\x00" in fh.read(1024):
                    return True
                fh.seek(0)
                for i, raw in enumerate(fh, 1):
                    if len(raw) > GREP_MAX_LINE_LENGTH:
                        continue
                    line = raw.decode("utf-8", "replace").rstrip("\r\n")
                    if rx.search(line):
                        hit = f"{shown_path}:{i}:{line}"
                        budget -= len(hit.encode("utf-8", "replace")) + 1
                        if budget < 0:
                            hits.append(f"[output truncated at {GREP_OUTPUT_LIMIT} bytes]")
                            return False
                        hits.append(hit)
        except OSError:
            pass
        return True

    def open_file(name: str, dir_fd: int) -> int | None:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError:
            return None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        return fd

    if stat.S_ISREG(os.fstat(search_fd).st_mode):
        single = os.dup(search_fd)
        os.lseek(single, 0, os.SEEK_SET)
        scan(single, shown)
        return "\n".join(hits) if hits else "no matches"
    seen = 0
    # fwalk descends through directory descriptors and never follows symlinks: race-free.
    for dirpath, dirnames, filenames, dir_fd in os.fwalk(".", dir_fd=search_fd):
        dirnames[:] = sorted(d for d in dirnames if d not in (".git", "node_modules"))
        for name in sorted(filenames):
            seen += 1
            if seen > WALK_MAX_ENTRIES:
                return "\n".join(hits) if hits else "no matches"
            fd = open_file(name, dir_fd)
            if fd is None:
                continue
            if not scan(fd, shown + os.path.join(dirpath, name)[1:]):
                return "\n".join(hits) if hits else "no matches"
    return "\n".join(hits) if hits else "no matches"
