"""The ``bash`` tool: one persistent shell per sandbox (:class:`Shell`), its calls run one at a
time in arrival order on a thread of their own (:class:`BashTool`), cancellable by request id."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import select
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from .common import (
    MOUNTS_ENV,
    NO_OUTPUT,
    NO_RG_ENV,
    QUOTA_ENV,
    ROOT_ENV,
    Block,
    ToolError,
    format_seconds,
    log_exception,
    req_bool,
    req_str,
    text_block,
)
from .quota import Quota

BASH_OUTPUT_LIMIT = 100 * 1024
TRUNCATED_MARKER = "[output truncated]"

_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI ... final byte
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC ... BEL or ST
    r"|\x1b[@-Z\\-_]"  # other two-byte escapes
)


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
        for key in (ROOT_ENV, NO_RG_ENV, QUOTA_ENV, MOUNTS_ENV):
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
                log_exception("bash", exc)
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
        if req_bool("bash", inp, "restart"):
            self.shutdown()
            self._ensure_shell()
            return [text_block("bash session restarted")], False
        command = req_str("bash", inp, "command", required=False)
        if not command:
            raise ToolError("bash: command is required")
        shell = self._ensure_shell()
        try:
            raw, truncated, code, exited = shell.run(command, deadline)
        except ShellTimeout:
            self.shutdown()  # kill the process group; the next call starts a new shell
            raise ToolError(f"bash: bash command timed out after {format_seconds(timeout_s)}s") from None
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
