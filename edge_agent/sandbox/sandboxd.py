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
workspace root after resolving symlinks).
"""

from __future__ import annotations

import base64
import contextlib
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
from itertools import islice
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO, Union

PROTOCOL_VERSION = 1
DEFAULT_ROOT = "/workspace"
ROOT_ENV = "SANDBOXD_ROOT"
NO_RG_ENV = "SANDBOXD_NO_RG"  # tests: force the pure-Python grep

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


class Workspace:
    """The directory the file tools are confined to (after following every symlink)."""

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)

    def within(self, path: str) -> bool:
        return path == self.root or path.startswith(self.root.rstrip("/") + "/")

    def resolve(self, tool: str, given: str) -> str:
        """Canonicalize ``given`` (relative to the root) and refuse anything outside the root."""
        if not given:
            raise ToolError(f"{tool}: path must not be empty")
        if "\x00" in given:
            raise ToolError(f"{tool}: path must not contain NUL bytes")
        joined = given if os.path.isabs(given) else os.path.join(self.root, given)
        full = os.path.realpath(joined)
        if not self.within(full):
            raise ToolError(f"{tool}: path '{given}' is outside the session's working directory")
        return full


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
        for key in (ROOT_ENV, NO_RG_ENV):
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

    def __init__(self, root: str, respond: Callable[[int, list[Block], bool], None]) -> None:
        self._root = root
        self._respond = respond
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
        text = clean_output(raw, truncated)
        return [text_block(text or NO_OUTPUT)], code != 0


# ---------------------------------------------------------------------------------------------
# File tools


class FileTools:
    """read / write / edit / glob / grep, confined to a :class:`Workspace`."""

    def __init__(self, workspace: Workspace, *, use_rg: bool = True) -> None:
        self.ws = workspace
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

    # read ------------------------------------------------------------------------------------

    def read(self, inp: dict[str, Any]) -> Result:
        file_path = _req_str("read", inp, "file_path")
        assert file_path is not None
        view_range = inp.get("view_range")
        target = self.ws.resolve("read", file_path)
        try:
            st = os.stat(target)
        except OSError as exc:
            raise _fs_error("read", file_path, exc) from None
        if not stat.S_ISREG(st.st_mode):
            raise ToolError(f"read: {file_path}: not a regular file")
        suffix = os.path.splitext(target)[1].lower()
        if suffix in IMAGE_TYPES or suffix == ".pdf":
            if view_range is not None:
                raise ToolError(f"read: view_range is not supported for {suffix} files")
            return self._read_binary(file_path, target, st.st_size, suffix)
        if view_range is None:
            if st.st_size > FILE_BYTES_LIMIT:
                raise ToolError(
                    f"read: {file_path} is {st.st_size} bytes, over the {FILE_BYTES_LIMIT}-byte limit "
                    "for a whole-file read; pass view_range [start_line, end_line] to read a slice"
                )
            try:
                with open(target, "rb") as fh:
                    data = fh.read(FILE_BYTES_LIMIT + 1)
            except OSError as exc:
                raise _fs_error("read", file_path, exc) from None
            try:
                return data.decode("utf-8")
            except UnicodeDecodeError:
                raise ToolError(f"read: {file_path}: not valid UTF-8 text") from None
        start, end = _parse_view_range(view_range)
        return self._read_lines(file_path, target, start, end)

    def _read_binary(self, file_path: str, target: str, size: int, suffix: str) -> Result:
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
            with open(target, "rb") as fh:
                data = fh.read()
        except OSError as exc:
            raise _fs_error("read", file_path, exc) from None
        return [{"type": kind, "media_type": media_type, "data_b64": base64.b64encode(data).decode("ascii")}]

    def _read_lines(self, file_path: str, target: str, start: int, end: int) -> str:
        """Lines start..end (1-indexed, inclusive; end <= 0 means EOF), streamed: any file size."""
        out: list[str] = []
        size = 0
        truncated = False
        line_no = 0
        ends_with_newline = True
        try:
            with open(target, "rb") as fh:
                for line_no, raw in enumerate(fh, 1):
                    ends_with_newline = raw.endswith(b"\n")
                    if line_no < start:
                        continue
                    if 0 < end < line_no:
                        break
                    try:
                        line = raw.rstrip(b"\n").decode("utf-8")
                    except UnicodeDecodeError:
                        raise ToolError(
                            f"read: {file_path}: line {line_no} is not valid UTF-8 text"
                        ) from None
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

    def write(self, inp: dict[str, Any]) -> Result:
        file_path = _req_str("write", inp, "file_path")
        content = _req_str("write", inp, "content")
        assert file_path is not None and content is not None
        target = self.ws.resolve("write", file_path)
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError:
            raise ToolError("write: content is not valid UTF-8 text") from None
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            try:
                mode = os.stat(target).st_mode
            except FileNotFoundError:
                mode = stat.S_IFREG
            if stat.S_ISDIR(mode):
                raise IsADirectoryError(target)
            if not stat.S_ISREG(mode):  # a FIFO or device would block or worse
                raise ToolError(f"write: {file_path}: not a regular file")
            with open(target, "wb") as fh:
                fh.write(data)
        except OSError as exc:
            raise _fs_error("write", file_path, exc) from None
        return f"wrote {len(data)} bytes to {file_path}"

    def edit(self, inp: dict[str, Any]) -> Result:
        file_path = _req_str("edit", inp, "file_path")
        old = _req_str("edit", inp, "old_string")
        new = _req_str("edit", inp, "new_string")
        replace_all = _req_bool("edit", inp, "replace_all")
        assert file_path is not None and old is not None and new is not None
        if not old:
            raise ToolError("edit: old_string must not be empty")
        target = self.ws.resolve("edit", file_path)
        try:
            st = os.stat(target)
            if not stat.S_ISREG(st.st_mode):
                raise ToolError(f"edit: {file_path}: not a regular file")
            if st.st_size > FILE_BYTES_LIMIT:
                raise ToolError(
                    f"edit: {file_path} is {st.st_size} bytes, over the {FILE_BYTES_LIMIT}-byte limit; "
                    "use bash (sed, awk) to edit a large file"
                )
            with open(target, "rb") as fh:
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
        try:
            with open(target, "wb") as fh:
                fh.write(data)
        except OSError as exc:
            raise _fs_error("edit", file_path, exc) from None
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
        if ".." in PurePosixPath(pattern).parts:
            raise ToolError("glob: '..' is not permitted in the pattern")
        root = self.ws.resolve("glob", path) if path else self.ws.root
        if not os.path.isdir(root):
            raise ToolError(f"glob: {path}: not a directory" if path else "glob: workspace is missing")
        try:
            found = list(islice(Path(root).glob(pattern), WALK_MAX_ENTRIES))
        except (ValueError, OSError) as exc:
            raise ToolError(f"glob: invalid pattern: {exc}") from None
        # A symlink followed mid-pattern must not let a result escape the workspace.
        matches = [str(m) for m in found if self.ws.within(os.path.realpath(m))]
        if not matches:
            return "no matches"
        matches.sort(key=_mtime_or_zero, reverse=True)
        return "\n".join(matches[:GLOB_RESULT_LIMIT])

    # grep ------------------------------------------------------------------------------------

    def grep(self, inp: dict[str, Any]) -> Result:
        pattern = _req_str("grep", inp, "pattern")
        path = _req_str("grep", inp, "path", required=False)
        assert pattern is not None
        if not pattern:
            raise ToolError("grep: pattern must not be empty")
        search = self.ws.resolve("grep", path) if path else self.ws.root
        if not os.path.exists(search):
            raise ToolError(f"grep: {path}: no such file or directory")
        if self.rg is not None:
            return self._grep_rg(pattern, search)
        try:
            rx = re.compile(pattern)
        except re.error as exc:
            raise ToolError(f"grep: invalid regex: {exc}") from None
        return _walk_grep(rx, search)

    def _grep_rg(self, pattern: str, search: str) -> Result:
        assert self.rg is not None
        argv = [self.rg, "--no-config", "-n", "--no-heading", "--with-filename", "--color", "never"]
        argv += ["-e", pattern, "--", search]
        proc = subprocess.Popen(
            argv,
            cwd=self.ws.root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        out, err, timed_out = _collect(proc, GREP_OUTPUT_LIMIT + 1, GREP_TIMEOUT_S)
        truncated = len(out) > GREP_OUTPUT_LIMIT
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
        text = out[:GREP_OUTPUT_LIMIT].decode("utf-8", "replace")
        if truncated:
            text = text[: text.rfind("\n") + 1] if "\n" in text else text
            text = text.rstrip("\n") + f"\n[output truncated at {GREP_OUTPUT_LIMIT} bytes]"
        elif timed_out:
            text = text.rstrip("\n") + f"\n[grep timed out after {_format_seconds(GREP_TIMEOUT_S)}s]"
        return text.rstrip("\n")


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


def _mtime_or_zero(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


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


def _walk_grep(rx: re.Pattern[str], search: str) -> str:
    """The fallback when rg is absent: skips .git, node_modules, symlinks, binaries, long lines."""
    hits: list[str] = []
    budget = GREP_OUTPUT_LIMIT

    def scan(full: str) -> bool:
        nonlocal budget
        try:
            with open(full, "rb") as fh:
                if b"\x00" in fh.read(1024):
                    return True
                fh.seek(0)
                for i, raw in enumerate(fh, 1):
                    if len(raw) > GREP_MAX_LINE_LENGTH:
                        continue
                    line = raw.decode("utf-8", "replace").rstrip("\r\n")
                    if rx.search(line):
                        hit = f"{full}:{i}:{line}"
                        budget -= len(hit.encode("utf-8", "replace")) + 1
                        if budget < 0:
                            hits.append(f"[output truncated at {GREP_OUTPUT_LIMIT} bytes]")
                            return False
                        hits.append(hit)
        except OSError:
            pass
        return True

    if os.path.isfile(search):
        scan(search)
    else:
        seen = 0
        for dirpath, dirnames, filenames in os.walk(search):
            dirnames[:] = sorted(
                d
                for d in dirnames
                if d not in (".git", "node_modules") and not os.path.islink(os.path.join(dirpath, d))
            )
            for name in sorted(filenames):
                full = os.path.join(dirpath, name)
                if os.path.islink(full):
                    continue
                seen += 1
                if seen > WALK_MAX_ENTRIES or not scan(full):
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

    def __init__(self, root: str, out_fd: int, *, use_rg: bool = True) -> None:
        self.workspace = Workspace(root)
        self.files = FileTools(self.workspace, use_rg=use_rg)
        self._out_fd = out_fd
        self._write_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=FILE_WORKERS, thread_name_prefix="files")
        self.bash = BashTool(self.workspace.root, self.respond)

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
    daemon = Daemon(root, sys.stdout.fileno(), use_rg=not os.environ.get(NO_RG_ENV))
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
