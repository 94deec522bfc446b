"""sandboxd: the tool daemon that runs inside a sandbox container.

The edge starts it with a single ``docker exec`` per container, as the sandbox user, with a bootstrap
that reads this source from stdin (see :data:`BOOTSTRAP`), so it works in any image that has
``python3`` (3.9+): nothing is installed in or mounted into the image. It uses the standard library
only.

Protocol, over the exec's stdin/stdout (stderr is for diagnostics only):

* every frame is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON;
* edge → daemon: ``{"id": int, "tool": str, "input": {...}, "timeout_ms": int}`` runs a tool;
  ``{"cancel": int}`` cancels the request with that id (kills the running bash command);
* daemon → edge: first ``{"event": "hello", "protocol": 1, ...}`` once ready, then one
  ``{"id": int, "content": [block, ...], "is_error": bool}`` per request, in completion order.
  A block is ``{"type": "text", "text": str}`` or
  ``{"type": "image" | "document", "media_type": str, "data_b64": str}``.

The daemon writes nothing before it has read its own source, and it exits when stdin closes
(killing its shells). Bad input never kills it: every failure becomes an ``is_error`` response.

Tools follow ``agent_toolset_20260401``: ``bash`` (one persistent shell; calls are serialized),
``read``, ``write``, ``edit``, ``glob``, ``grep`` (file tools run concurrently, confined to the
workspace root; every path is resolved without a check-then-open race, see "Path policy" below).
``$SANDBOXD_QUOTA_BYTES`` sets a soft size quota on the workspace (see :class:`Quota`). The hello
also reports ``openat2`` (which resolver runs) and ``quota_bytes``.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import fnmatch
import json
import os
import queue
import re
import select
import shutil
import signal
import stat
import struct
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import PurePosixPath
from typing import Any, BinaryIO, Union

PROTOCOL_VERSION = 1
DEFAULT_ROOT = "/workspace"
ROOT_ENV = "SANDBOXD_ROOT"
NO_RG_ENV = "SANDBOXD_NO_RG"  # tests: force the pure-Python grep
QUOTA_ENV = "SANDBOXD_QUOTA_BYTES"  # the workspace size quota; unset or 0 = none

MAX_FRAME_BYTES = 64 * 1024 * 1024
BASH_OUTPUT_LIMIT = 100 * 1024
BASH_DEFAULT_TIMEOUT_MS = 120_000
FILE_BYTES_LIMIT = 256 * 1024
IMAGE_B64_LIMIT = 5 * 1024 * 1024
PDF_BYTES_LIMIT = 20 * 1024 * 1024
GLOB_RESULT_LIMIT = 200
WALK_MAX_ENTRIES = 50_000
GREP_OUTPUT_LIMIT = 100 * 1024
GREP_MAX_LINE_LENGTH = 2000
GREP_TIMEOUT_S = 30.0
FILE_WORKERS = 4
QUOTA_MAX_AGE_S = 5.0  # how stale the measured workspace usage may get between writes
QUOTA_CHEAP_WALK_S = 0.05  # after bash, measure again if the last walk took less than this ...
QUOTA_WALK_SHARE = 20  # ... or if it took less than 1/20 of the time since

TRUNCATED_MARKER = "[output truncated]"
NO_OUTPUT = "(no output)"
IMAGE_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}
PDF_TYPE = "application/pdf"
FILE_TOOLS = ("read", "write", "edit", "glob", "grep")

# The edge runs this as ``python3 -u -c BOOTSTRAP``, then writes "<len>\n<source>" and the frames.
BOOTSTRAP = (
    "import sys;n=int(sys.stdin.buffer.readline());exec(compile(sys.stdin.buffer.read(n),'sandboxd','exec'))"
)

_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI ... final byte
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC ... BEL or ST
    r"|\x1b[@-Z\\-_]"  # other two-byte escapes
)

Block = dict[str, Any]
Result = Union[str, list[Block]]  # noqa: UP007 - evaluated at run time, and 3.9 has no X | Y


class ToolError(Exception):
    """A tool failed in a way the model should see: the message becomes an ``is_error`` result."""


# ---------------------------------------------------------------------------------------------
# Helpers


def text_block(text: str) -> Block:
    # Undecodable file names arrive as lone surrogates (surrogateescape); make the text valid UTF-8.
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raw = text.encode("utf-8", "surrogatepass")
    return {"type": "text", "text": raw.decode("utf-8", "replace")}


def _fs_error(tool: str, shown: str, exc: OSError) -> ToolError:
    """Map an OSError to a stable message that names the path the model gave, not a host path."""
    if isinstance(exc, FileNotFoundError):
        reason = "no such file or directory"
    elif isinstance(exc, NotADirectoryError):
        reason = "not a directory"
    elif isinstance(exc, IsADirectoryError):
        reason = "is a directory"
    elif isinstance(exc, PermissionError):
        reason = "permission denied"
    elif isinstance(exc, FileExistsError):
        reason = "file already exists"
    else:
        reason = (exc.strerror or "i/o error").lower()
    return ToolError(f"{tool}: {shown}: {reason}")


def _req_str(tool: str, inp: dict[str, Any], key: str, *, required: bool = True) -> str | None:
    value = inp.get(key)
    if value is None:
        if required:
            raise ToolError(f"{tool}: missing required field '{key}'")
        return None
    if not isinstance(value, str):
        raise ToolError(f"{tool}: field '{key}' must be a string")
    return value


def _req_bool(tool: str, inp: dict[str, Any], key: str) -> bool:
    value = inp.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ToolError(f"{tool}: field '{key}' must be a boolean")
    return value


def _format_seconds(seconds: float) -> str:
    return f"{seconds:g}"


def _utf8_tail(data: bytes, limit: int) -> bytes:
    """The last ``limit`` bytes of ``data``, not starting in the middle of a UTF-8 sequence."""
    tail = data[-limit:]
    skip = 0
    while skip < 3 and skip < len(tail) and 0x80 <= tail[skip] <= 0xBF:
        skip += 1
    return tail[skip:]


def clean_output(raw: bytes, truncated: bool) -> str:
    """Decode, strip ANSI escapes and trailing newlines, and keep the tail within the byte limit."""
    if len(raw) > BASH_OUTPUT_LIMIT:
        raw = _utf8_tail(raw, BASH_OUTPUT_LIMIT)
        truncated = True
    elif truncated:
        raw = _utf8_tail(raw, len(raw))
    text = _ANSI.sub("", raw.decode("utf-8", "replace")).rstrip("\n")
    if truncated:
        text = f"{TRUNCATED_MARKER}\n{text}"
    return text


# ---------------------------------------------------------------------------------------------
# Path policy
#
# Every path a file tool touches is resolved without a check-then-open race: ``openat2`` with
# ``RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`` from a descriptor of the workspace root when the
# kernel offers it, else (and whenever ``openat2`` refuses, e.g. for an absolute symlink that points
# back into the workspace) a walk one component at a time: each directory is opened relative to
# the descriptor of its parent with ``O_NOFOLLOW | O_DIRECTORY``, symlinks are read with
# ``readlinkat`` and expanded by the walk itself, ``..`` pops the walk's own stack of descriptors
# (never past the root), and the last component is opened with ``O_NOFOLLOW``. A path swapped for a
# symlink between two steps is seen by the next step, never followed blindly.

_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_BENEATH = 0x08
_SYS_OPENAT2 = 437  # the same number on every Linux architecture that has it
MAX_SYMLINKS = 40
RESOLVE_RETRIES = 8
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class PathEscape(Exception):
    """A path (or a symlink on it) leads outside the workspace."""


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
            fd = probe.open(os.open("/", _DIR_FLAGS), ".", _DIR_FLAGS, 0, close_dir=True)
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
                    # Absolute: followed only when it names a place inside the workspace.
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
                fd = os.open(part, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=cur)
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
    """The directory the file tools are confined to (after following every symlink)."""

    def __init__(self, root: str, *, use_openat2: bool = True) -> None:
        self.root = os.path.realpath(root)
        self.openat2 = Openat2.load() if use_openat2 else None

    def within(self, path: str) -> bool:
        return path == self.root or path.startswith(self.root.rstrip("/") + "/")

    def relative(self, tool: str, given: str) -> str:
        """``given`` relative to the root (not yet resolved); refuses absolute paths elsewhere."""
        if not given:
            raise ToolError(f"{tool}: path must not be empty")
        if "\x00" in given:
            raise ToolError(f"{tool}: path must not contain NUL bytes")
        if given.startswith("/"):
            if not self.within(given):
                raise self.outside(tool, given)
            given_rel = given[len(self.root) :].lstrip("/") or "."
        else:
            given_rel = given
        # Plainly outside, whatever the symlinks on the way: refuse before touching anything.
        lexical = os.path.normpath(given_rel)
        if lexical == ".." or lexical.startswith("../"):
            raise self.outside(tool, given)
        return given_rel

    def outside(self, tool: str, given: str) -> ToolError:
        return ToolError(f"{tool}: path '{given}' is outside the session's working directory")

    def open(self, tool: str, given: str, flags: int, mode: int = 0o666, *, create_dirs: bool = False) -> int:
        """Open ``given`` (relative to the root, symlinks followed) without ever leaving the root.

        Raises :class:`ToolError` for a path outside the workspace, ``OSError`` otherwise.
        """
        rel = self.relative(tool, given)
        root_fd = os.open(self.root, _DIR_FLAGS)
        try:
            if self.openat2 is not None:
                with contextlib.suppress(OSError):  # the walk gives the definitive answer
                    return self.openat2.open(root_fd, rel, flags, mode)
            for _ in range(RESOLVE_RETRIES):
                try:
                    parent, name = walk_beneath(root_fd, self.root, rel, create_dirs=create_dirs)
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


# ---------------------------------------------------------------------------------------------
# Workspace quota


def _disk_bytes(size: int) -> int:
    """What a file of ``size`` bytes takes on disk, roughly (whole 4 KiB blocks)."""
    return (size + 4095) // 4096 * 4096


class Quota:
    """A soft size limit on the workspace: ``write`` and ``edit`` refuse to pass it, and a bash call
    that ends with the workspace over it is reported as an error (bash itself is not stopped).

    Usage is what ``du`` would count (allocated blocks; hard links once), found by walking the
    workspace at most every ``max_age_s`` seconds and kept current in between by the file tools'
    own writes. After a bash call it is measured again, except that a workspace whose walk takes
    longer than :data:`QUOTA_CHEAP_WALK_S` is walked at most 1/:data:`QUOTA_WALK_SHARE` of the time.
    ``limit_bytes`` 0 means no quota.
    """

    def __init__(self, root: str, limit_bytes: int, *, max_age_s: float = QUOTA_MAX_AGE_S) -> None:
        self.root = root
        self.limit_bytes = max(0, limit_bytes)
        self.max_age_s = max_age_s
        self._lock = threading.Lock()
        self._used: int | None = None
        self._measured_at = 0.0
        self._walk_s = 0.0

    @property
    def enabled(self) -> bool:
        return self.limit_bytes > 0

    def measure(self) -> int:
        """Walk the workspace now (never following symlinks)."""
        total = 0
        seen: set[tuple[int, int]] = set()
        stack = [self.root]
        while stack:
            try:
                with os.scandir(stack.pop()) as entries:
                    for entry in entries:
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
                            key = (st.st_dev, st.st_ino)
                            if key in seen:
                                continue
                            seen.add(key)
                        total += st.st_blocks * 512
                        if stat.S_ISDIR(st.st_mode):
                            stack.append(entry.path)
            except OSError:
                continue
        return total

    def used(self, *, fresh: bool = False) -> int:
        with self._lock:
            age = time.monotonic() - self._measured_at
            cheap = self._walk_s < QUOTA_CHEAP_WALK_S
            stale = age > self.max_age_s or (fresh and (cheap or age > self._walk_s * QUOTA_WALK_SHARE))
            if self._used is None or stale:
                started = time.monotonic()
                self._used = self.measure()
                self._measured_at = time.monotonic()
                self._walk_s = self._measured_at - started
            return self._used

    def check_room(self, tool: str, shown: str, new_size: int) -> None:
        """Refuse (ToolError) a new file of ``new_size`` bytes that cannot fit; counts nothing."""
        if self.enabled:
            used = self.used()
            if used + _disk_bytes(new_size) > self.limit_bytes:
                raise self._refusal(tool, shown, used + _disk_bytes(new_size))

    def _refusal(self, tool: str, shown: str, total: int) -> ToolError:
        return ToolError(
            f"{tool}: {shown}: refused, the workspace would exceed its size quota "
            f"({_mib(total)} of {_mib(self.limit_bytes)}); remove files to make room"
        )

    def check(self, tool: str, shown: str, old_disk: int, new_size: int) -> None:
        """Refuse (ToolError) a write that replaces ``old_disk`` bytes with ``new_size`` bytes if it
        would take the workspace past the quota; otherwise count it."""
        if not self.enabled:
            return
        delta = _disk_bytes(new_size) - old_disk
        used = self.used()
        if delta > 0 and used + delta > self.limit_bytes:
            raise self._refusal(tool, shown, used + delta)
        with self._lock:
            if self._used is not None:
                self._used = max(0, self._used + delta)

    def over_note(self) -> str | None:
        """After a bash call: a message if the workspace is now over the quota, else None."""
        if not self.enabled:
            return None
        used = self.used(fresh=True)
        if used <= self.limit_bytes:
            return None
        return (
            f"[the workspace is over its size quota ({_mib(used)} of {_mib(self.limit_bytes)}): "
            "remove files; write and edit are refused until it is back under]"
        )


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB"


# ---------------------------------------------------------------------------------------------
# bash


class ShellTimeout(Exception):
    pass


class ShellCancelled(Exception):
    pass


def _shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


class Shell:
    """One ``/bin/bash --noprofile --norc`` process in its own process group.

    Each command is passed to ``eval`` as a single-quoted word, so a command with a syntax error
    (an unbalanced quote, say) fails at once instead of swallowing the framing. Its stdin is
    ``/dev/null``; stderr is merged into stdout. Completion is detected by a per-call random
    sentinel followed by the exit status, printed after the command.
    """

    def __init__(self, root: str, wake_fd: int) -> None:
        env = dict(os.environ)
        for key in (ROOT_ENV, NO_RG_ENV, QUOTA_ENV):
            env.pop(key, None)
        env.update({"PS1": "", "PS2": "", "TERM": "dumb"})
        self._wake_fd = wake_fd
        self.proc = subprocess.Popen(
            ["/bin/bash", "--noprofile", "--norc"],
            cwd=root,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            bufsize=0,
            close_fds=True,
        )
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self._out_fd = self.proc.stdout.fileno()
        os.set_blocking(self._out_fd, False)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    def _discard_pending(self) -> None:
        """Drop output left over from a previous call (a background job, say)."""
        while True:
            try:
                if not os.read(self._out_fd, 65536):
                    return
            except BlockingIOError:
                return
            except OSError:
                return

    def run(self, command: str, deadline: float) -> tuple[bytes, bool, int, bool]:
        """Run one command; return (output, truncated, exit status, shell exited)."""
        self._discard_pending()
        sentinel = f"__OUTPOST_{uuid.uuid4().hex}_DONE__"
        split = f"{sentinel[:10]}''{sentinel[10:]}"  # the literal never appears in our input
        quoted = _shell_quote(command.replace("\0", ""))
        script = f"eval {quoted} </dev/null\nprintf '\\n{split}%d\\n' \"$?\"\n"
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(script.encode("utf-8", "surrogateescape"))
        except (BrokenPipeError, OSError):
            return b"", False, self.proc.wait(), True

        marker = re.compile(re.escape(b"\n" + sentinel.encode()) + rb"(-?\d+)\n")
        keep = BASH_OUTPUT_LIMIT + 4096
        buf = bytearray()
        truncated = False
        scan_from = 0
        while True:
            match = marker.search(buf, max(0, scan_from - len(sentinel) - 24))
            if match is not None:
                return bytes(buf[: match.start()]), truncated, int(match.group(1)), False
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ShellTimeout()
            ready, _, _ = select.select([self._out_fd, self._wake_fd], [], [], remaining)
            if self._wake_fd in ready:
                raise ShellCancelled()
            if not ready:
                continue
            try:
                chunk = os.read(self._out_fd, 65536)
            except BlockingIOError:
                continue
            if not chunk:  # the shell exited (``exit``, ``set -e`` ...)
                return bytes(buf), truncated, self.proc.wait(), True
            scan_from = len(buf)
            buf += chunk
            if len(buf) > 2 * keep:
                drop = len(buf) - keep
                del buf[:drop]
                scan_from = max(0, scan_from - drop)
                truncated = True


class BashTool:
    """The persistent shell of this sandbox; calls run one at a time, in arrival order."""

    def __init__(
        self, root: str, respond: Callable[[int, list[Block], bool], None], quota: Quota | None = None
    ) -> None:
        self._root = root
        self._respond = respond
        self._quota = quota
        self._shell: Shell | None = None
        self._queue: queue.Queue[tuple[int, dict[str, Any], float, float]] = queue.Queue()
        self._lock = threading.Lock()
        self._current: int | None = None
        self._cancelled: set[int] = set()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._thread = threading.Thread(target=self._loop, name="bash", daemon=True)
        self._thread.start()

    def submit(self, req_id: int, inp: dict[str, Any], timeout_s: float) -> None:
        self._queue.put((req_id, inp, timeout_s, time.monotonic() + timeout_s))

    def cancel(self, req_id: int) -> None:
        with self._lock:
            self._cancelled.add(req_id)
            if self._current == req_id:
                os.write(self._wake_w, b"x")

    def shutdown(self) -> None:
        if self._shell is not None:
            self._shell.kill()
            self._shell = None

    def _loop(self) -> None:
        while True:
            req_id, inp, timeout_s, deadline = self._queue.get()
            with self._lock:
                if req_id in self._cancelled:
                    self._cancelled.discard(req_id)
                    self._respond(req_id, [text_block("bash: command cancelled")], True)
                    continue
                self._current = req_id
                self._drain_wake()
            try:
                blocks, is_error = self._call(inp, timeout_s, deadline)
            except ToolError as exc:
                blocks, is_error = [text_block(str(exc))], True
            except Exception as exc:  # never let the loop die
                _log_exception("bash", exc)
                blocks, is_error = [text_block(f"bash: internal error: {type(exc).__name__}")], True
            with self._lock:
                self._current = None
                self._cancelled.discard(req_id)
            self._respond(req_id, blocks, is_error)

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_r, 64):
                pass
        except BlockingIOError:
            pass

    def _ensure_shell(self) -> Shell:
        if self._shell is not None and not self._shell.alive():
            self._shell.kill()
            self._shell = None
        if self._shell is None:
            try:
                self._shell = Shell(self._root, self._wake_r)
            except OSError as exc:
                reason = (exc.strerror or str(exc)).lower()
                raise ToolError(f"bash: could not start /bin/bash: {reason}") from None
        return self._shell

    def _call(self, inp: dict[str, Any], timeout_s: float, deadline: float) -> tuple[list[Block], bool]:
        if _req_bool("bash", inp, "restart"):
            self.shutdown()
            self._ensure_shell()
            return [text_block("bash session restarted")], False
        command = _req_str("bash", inp, "command", required=False)
        if not command:
            raise ToolError("bash: command is required")
        shell = self._ensure_shell()
        try:
            raw, truncated, code, exited = shell.run(command, deadline)
        except ShellTimeout:
            self.shutdown()  # kill the process group; the next call starts a new shell
            raise ToolError(f"bash: bash command timed out after {_format_seconds(timeout_s)}s") from None
        except ShellCancelled:
            self.shutdown()
            raise ToolError("bash: command cancelled") from None
        if exited:
            shell.kill()
            self._shell = None
        text = clean_output(raw, truncated) or NO_OUTPUT
        note = self._quota.over_note() if self._quota is not None else None
        if note is not None:
            return [text_block(f"{text}\n{note}")], True
        return [text_block(text)], code != 0


# ---------------------------------------------------------------------------------------------
# File tools


class FileTools:
    """read / write / edit / glob / grep, confined to a :class:`Workspace`; every path is opened
    through :meth:`Workspace.open` and then used only through its descriptor."""

    def __init__(self, workspace: Workspace, *, use_rg: bool = True, quota: Quota | None = None) -> None:
        self.ws = workspace
        self.quota = quota if quota is not None else Quota(workspace.root, 0)
        rg = shutil.which("rg") if use_rg else None
        # An rg that lives inside the workspace could be planted by the model: never run it.
        self.rg = rg if rg and not workspace.within(os.path.realpath(rg)) else None

    def run(self, tool: str, inp: dict[str, Any]) -> tuple[list[Block], bool]:
        """Run one file tool; returns (content blocks, is_error). Never raises."""
        func: Callable[[dict[str, Any]], Result] | None = (
            getattr(self, tool, None) if tool in FILE_TOOLS else None
        )
        if func is None:
            return [text_block(f"unknown tool '{tool}'")], True
        try:
            result = func(inp)
        except ToolError as exc:
            return [text_block(str(exc))], True
        except RecursionError:
            return [text_block(f"{tool}: input too deeply nested")], True
        except Exception as exc:
            _log_exception(tool, exc)
            return [text_block(f"{tool}: internal error: {type(exc).__name__}")], True
        if isinstance(result, str):
            return [text_block(result or NO_OUTPUT)], False
        return result, False

    def _open(self, tool: str, given: str, flags: int, *, create_dirs: bool = False) -> int:
        try:
            return self.ws.open(tool, given, flags | os.O_NONBLOCK, create_dirs=create_dirs)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # a FIFO without a reader
                raise ToolError(f"{tool}: {given}: not a regular file") from None
            raise _fs_error(tool, given, exc) from None

    # read ------------------------------------------------------------------------------------

    def read(self, inp: dict[str, Any]) -> Result:
        file_path = _req_str("read", inp, "file_path")
        assert file_path is not None
        view_range = inp.get("view_range")
        fd = self._open("read", file_path, os.O_RDONLY)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise ToolError(f"read: {file_path}: not a regular file")
        with os.fdopen(fd, "rb") as fh:
            suffix = os.path.splitext(self.ws.real_path(fd))[1].lower()
            if suffix in IMAGE_TYPES or suffix == ".pdf":
                if view_range is not None:
                    raise ToolError(f"read: view_range is not supported for {suffix} files")
                return self._read_binary(file_path, fh, st.st_size, suffix)
            if view_range is None:
                if st.st_size > FILE_BYTES_LIMIT:
                    raise ToolError(
                        f"read: {file_path} is {st.st_size} bytes, over the {FILE_BYTES_LIMIT}-byte limit "
                        "for a whole-file read; pass view_range [start_line, end_line] to read a slice"
                    )
                try:
                    data = fh.read(FILE_BYTES_LIMIT + 1)
                except OSError as exc:
                    raise _fs_error("read", file_path, exc) from None
                try:
                    return data.decode("utf-8")
                except UnicodeDecodeError:
                    raise ToolError(f"read: {file_path}: not valid UTF-8 text") from None
            start, end = _parse_view_range(view_range)
            return self._read_lines(file_path, fh, start, end)

    def _read_binary(self, file_path: str, fh: BinaryIO, size: int, suffix: str) -> Result:
        if suffix == ".pdf":
            kind, media_type = "document", PDF_TYPE
            if size > PDF_BYTES_LIMIT:
                raise ToolError(
                    f"read: {file_path} is {size} bytes, over the {PDF_BYTES_LIMIT}-byte PDF limit"
                )
        else:
            kind, media_type = "image", IMAGE_TYPES[suffix]
            if (size + 2) // 3 * 4 > IMAGE_B64_LIMIT:
                raise ToolError(
                    f"read: {file_path} is {size} bytes, over the image limit "
                    f"({IMAGE_B64_LIMIT} bytes once base64-encoded)"
                )
        try:
            data = fh.read()
        except OSError as exc:
            raise _fs_error("read", file_path, exc) from None
        return [{"type": kind, "media_type": media_type, "data_b64": base64.b64encode(data).decode("ascii")}]

    def _read_lines(self, file_path: str, fh: BinaryIO, start: int, end: int) -> str:
        """Lines start..end (1-indexed, inclusive; end <= 0 means EOF), streamed: any file size."""
        out: list[str] = []
        size = 0
        truncated = False
        line_no = 0
        ends_with_newline = True
        try:
            for line_no, raw in enumerate(fh, 1):
                ends_with_newline = raw.endswith(b"\n")
                if line_no < start:
                    continue
                if 0 < end < line_no:
                    break
                try:
                    line = raw.rstrip(b"\n").decode("utf-8")
                except UnicodeDecodeError:
                    raise ToolError(f"read: {file_path}: line {line_no} is not valid UTF-8 text") from None
                size += len(raw)
                if size > FILE_BYTES_LIMIT:
                    truncated = True
                    break
                out.append(line)
            else:
                # Like str.split("\n"): a file ending in a newline has an empty last line.
                if ends_with_newline and (line_no + 1) >= start and (end <= 0 or line_no + 1 <= end):
                    out.append("")
        except OSError as exc:
            raise _fs_error("read", file_path, exc) from None
        text = "\n".join(out)
        if truncated:
            text += f"\n[output truncated at {FILE_BYTES_LIMIT} bytes; narrow view_range]"
        return text

    # write / edit ----------------------------------------------------------------------------

    def _replace_contents(self, tool: str, file_path: str, fh: BinaryIO, old_disk: int, data: bytes) -> None:
        """Overwrite the open file with ``data`` if the quota allows it."""
        self.quota.check(tool, file_path, old_disk, len(data))
        try:
            fh.seek(0)
            fh.truncate()
            fh.write(data)
            fh.flush()
        except OSError as exc:
            raise _fs_error(tool, file_path, exc) from None

    def write(self, inp: dict[str, Any]) -> Result:
        file_path = _req_str("write", inp, "file_path")
        content = _req_str("write", inp, "content")
        assert file_path is not None and content is not None
        self.ws.relative("write", file_path)  # refuse a path outside before anything else
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError:
            raise ToolError("write: content is not valid UTF-8 text") from None
        try:
            fd = self.ws.open("write", file_path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            # New (or unopenable: the second open reports why). Refuse before creating anything.
            self.quota.check_room("write", file_path, len(data))
            fd = self._open("write", file_path, os.O_WRONLY | os.O_CREAT, create_dirs=True)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # a FIFO or device would block or worse
            os.close(fd)
            raise ToolError(f"write: {file_path}: not a regular file")
        with os.fdopen(fd, "wb") as fh:
            self._replace_contents("write", file_path, fh, st.st_blocks * 512, data)
        return f"wrote {len(data)} bytes to {file_path}"

    def edit(self, inp: dict[str, Any]) -> Result:
        file_path = _req_str("edit", inp, "file_path")
        old = _req_str("edit", inp, "old_string")
        new = _req_str("edit", inp, "new_string")
        replace_all = _req_bool("edit", inp, "replace_all")
        assert file_path is not None and old is not None and new is not None
        if not old:
            raise ToolError("edit: old_string must not be empty")
        fd = self._open("edit", file_path, os.O_RDWR)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise ToolError(f"edit: {file_path}: not a regular file")
        with os.fdopen(fd, "r+b") as fh:
            if st.st_size > FILE_BYTES_LIMIT:
                raise ToolError(
                    f"edit: {file_path} is {st.st_size} bytes, over the {FILE_BYTES_LIMIT}-byte limit; "
                    "use bash (sed, awk) to edit a large file"
                )
            try:
                raw = fh.read()
            except OSError as exc:
                raise _fs_error("edit", file_path, exc) from None
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise ToolError(f"edit: {file_path}: not valid UTF-8 text") from None
            count = text.count(old)
            if count == 0:
                raise ToolError(f"edit: old_string not found in {file_path}")
            if count > 1 and not replace_all:
                raise ToolError(f"edit: old_string appears {count} times in {file_path} (must be unique)")
            updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
            try:
                data = updated.encode("utf-8")
            except UnicodeEncodeError:
                raise ToolError("edit: new_string is not valid UTF-8 text") from None
            self._replace_contents("edit", file_path, fh, st.st_blocks * 512, data)
        replaced = count if replace_all else 1
        return f"edited {file_path} ({replaced} replacement(s))"

    # glob ------------------------------------------------------------------------------------

    def glob(self, inp: dict[str, Any]) -> Result:
        pattern = _req_str("glob", inp, "pattern")
        path = _req_str("glob", inp, "path", required=False)
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
            fd = self.ws.open_dir("glob", path)
        except OSError:
            raise ToolError(
                f"glob: {path}: not a directory" if path else "glob: workspace is missing"
            ) from None
        try:
            # Match below the opened directory itself, on descriptors, so no swap can move it.
            shown = self.ws.real_path(fd)
            globber = _Globber(self.ws, os.path.relpath(shown, self.ws.root))
            globber.run(fd, "", parts)
        finally:
            os.close(fd)
        if not globber.found:
            return "no matches"
        globber.found.sort(key=lambda match: match[1], reverse=True)
        return "\n".join(f"{shown}/{rel}" if rel else shown for rel, _ in globber.found[:GLOB_RESULT_LIMIT])

    # grep ------------------------------------------------------------------------------------

    def grep(self, inp: dict[str, Any]) -> Result:
        pattern = _req_str("grep", inp, "pattern")
        path = _req_str("grep", inp, "path", required=False)
        assert pattern is not None
        if not pattern:
            raise ToolError("grep: pattern must not be empty")
        try:
            fd = self.ws.open("grep", path or ".", os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            raise ToolError(f"grep: {path}: no such file or directory") from None
        try:
            # Search below the opened file or directory itself (rg inherits the descriptor).
            base = self.ws.fd_path(fd)
            shown = self.ws.real_path(fd)
            if self.rg is not None:
                return self._grep_rg(pattern, fd, base, shown)
            try:
                rx = re.compile(pattern)
            except re.error as exc:
                raise ToolError(f"grep: invalid regex: {exc}") from None
            return _walk_grep(rx, fd, shown)
        finally:
            os.close(fd)

    def _grep_rg(self, pattern: str, fd: int, base: str, shown: str) -> Result:
        assert self.rg is not None
        argv = [self.rg, "--no-config", "-n", "--no-heading", "--with-filename", "--color", "never"]
        argv += ["-e", pattern, "--", base]
        proc = subprocess.Popen(
            argv,
            cwd=self.ws.root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            pass_fds=(fd,),
        )
        out, err, timed_out = _collect(proc, GREP_OUTPUT_LIMIT + 1, GREP_TIMEOUT_S)
        if not out:
            if timed_out:
                raise ToolError(f"grep: timed out after {_format_seconds(GREP_TIMEOUT_S)}s")
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
            text = text.rstrip("\n") + f"\n[grep timed out after {_format_seconds(GREP_TIMEOUT_S)}s]"
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

    def __init__(self, ws: Workspace, base_rel: str) -> None:
        self.ws = ws
        self.base_rel = base_rel  # the search base, relative to the workspace root
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
                child_fd = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=dir_fd)
            except OSError:
                continue
            try:
                self._recursive(child_fd, f"{rel}/{name}" if rel else name, rest)
            finally:
                os.close(child_fd)

    def _follow(self, child: str, flags: int) -> int | None:
        """Open the symlink at ``child`` through the workspace's resolver; None if it leads outside."""
        try:
            return self.ws.open("glob", f"{self.base_rel}/{child}", flags)
        except (ToolError, OSError):
            return None

    def _open_dir(self, dir_fd: int, name: str, child: str) -> int | None:
        try:
            return os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno not in (errno.ENOTDIR, errno.ELOOP) or not _is_symlink(dir_fd, name):
                return None
        return self._follow(child, _DIR_FLAGS)

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


def _parse_view_range(value: Any) -> tuple[int, int]:
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        raise ToolError("read: view_range must be [start_line, end_line]")
    start, end = max(1, value[0]), value[1]
    if 0 < end < start:
        raise ToolError(f"read: view_range end ({end}) is before start ({start})")
    return start, end


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


# ---------------------------------------------------------------------------------------------
# The daemon


def _log_exception(where: str, exc: BaseException) -> None:
    try:
        sys.stderr.write(f"sandboxd: {where}: {type(exc).__name__}: {exc}\n")
        traceback.print_exc(file=sys.stderr)
        sys.stderr.flush()
    except Exception:  # noqa: S110 - diagnostics must never take the daemon down
        pass


class Daemon:
    """Reads requests, runs tools, writes responses. One per sandbox (per held exec channel)."""

    def __init__(self, root: str, out_fd: int, *, use_rg: bool = True, quota_bytes: int = 0) -> None:
        self.workspace = Workspace(root)
        self.quota = Quota(self.workspace.root, quota_bytes)
        self.files = FileTools(self.workspace, use_rg=use_rg, quota=self.quota)
        self._out_fd = out_fd
        self._write_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=FILE_WORKERS, thread_name_prefix="files")
        self.bash = BashTool(self.workspace.root, self.respond, self.quota)

    # output ----------------------------------------------------------------------------------

    def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "replace")
        if len(data) > MAX_FRAME_BYTES:
            fallback = {
                "id": message.get("id"),
                "content": [text_block("sandboxd: result too large to return")],
                "is_error": True,
            }
            data = json.dumps(fallback).encode("utf-8")
        frame = struct.pack(">I", len(data)) + data
        with self._write_lock:
            view = memoryview(frame)
            while view:
                written = os.write(self._out_fd, view)
                view = view[written:]

    def respond(self, req_id: Any, content: list[Block], is_error: bool) -> None:
        try:
            self.send({"id": req_id, "content": content, "is_error": is_error})
        except (BrokenPipeError, OSError):
            os._exit(0)  # the edge went away

    def hello(self) -> None:
        self.send(
            {
                "event": "hello",
                "protocol": PROTOCOL_VERSION,
                "pid": os.getpid(),
                "python": ".".join(str(v) for v in sys.version_info[:3]),
                "root": self.workspace.root,
                "rg": self.files.rg is not None,
                "openat2": self.workspace.openat2 is not None,
                "quota_bytes": self.quota.limit_bytes,
            }
        )

    # input -----------------------------------------------------------------------------------

    def handle_frame(self, payload: bytes) -> None:
        """Dispatch one request frame; never raises."""
        try:
            message = json.loads(payload.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            self.respond(None, [text_block("sandboxd: malformed request (not UTF-8 JSON)")], True)
            return
        if not isinstance(message, dict):
            self.respond(None, [text_block("sandboxd: malformed request (not an object)")], True)
            return
        if "cancel" in message:
            target = message["cancel"]
            if isinstance(target, int):
                self.bash.cancel(target)
            return
        req_id = message.get("id")
        tool = message.get("tool")
        inp = message.get("input")
        if not isinstance(req_id, int) or isinstance(req_id, bool):
            self.respond(None, [text_block("sandboxd: malformed request (id must be an integer)")], True)
            return
        if not isinstance(inp, dict):
            self.respond(req_id, [text_block(f"{tool}: input must be an object")], True)
            return
        timeout_ms = message.get("timeout_ms")
        if not isinstance(timeout_ms, (int, float)) or isinstance(timeout_ms, bool) or timeout_ms <= 0:
            timeout_ms = BASH_DEFAULT_TIMEOUT_MS
        if tool == "bash":
            self.bash.submit(req_id, inp, timeout_ms / 1000.0)
        elif tool in FILE_TOOLS:
            self._pool.submit(self._run_file_tool, req_id, tool, inp)
        else:
            self.respond(req_id, [text_block(f"unknown tool '{tool}'")], True)

    def _run_file_tool(self, req_id: int, tool: str, inp: dict[str, Any]) -> None:
        content, is_error = self.files.run(tool, inp)
        self.respond(req_id, content, is_error)

    def serve(self, stdin: BinaryIO) -> None:
        """Read frames until EOF."""
        self.hello()
        while True:
            header = stdin.read(4)
            if len(header) < 4:
                return
            (length,) = struct.unpack(">I", header)
            if length > MAX_FRAME_BYTES:
                # Cannot trust anything after this; skip the payload and report it.
                remaining = length
                while remaining > 0:
                    chunk = stdin.read(min(remaining, 1 << 20))
                    if not chunk:
                        return
                    remaining -= len(chunk)
                self.respond(None, [text_block("sandboxd: request frame too large")], True)
                continue
            payload = stdin.read(length)
            if len(payload) < length:
                return
            self.handle_frame(payload)

    def shutdown(self) -> None:
        self.bash.shutdown()


def main(argv: list[str]) -> int:
    root = os.environ.get(ROOT_ENV) or DEFAULT_ROOT
    if len(argv) >= 2 and argv[0] == "--root":
        root = argv[1]
    os.umask(0o022)
    try:
        quota_bytes = int(os.environ.get(QUOTA_ENV) or 0)
    except ValueError:
        raise SystemExit(f"sandboxd: {QUOTA_ENV} must be an integer") from None
    daemon = Daemon(root, sys.stdout.fileno(), use_rg=not os.environ.get(NO_RG_ENV), quota_bytes=quota_bytes)
    try:
        daemon.serve(sys.stdin.buffer)
    except (BrokenPipeError, KeyboardInterrupt):
        pass
    finally:
        daemon.shutdown()
    # Worker threads may be blocked in a read or a child process: leave without joining them.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
