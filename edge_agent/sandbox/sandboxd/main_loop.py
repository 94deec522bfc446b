"""The daemon: reads request frames from stdin, hands each to its tool, writes one response frame
per request to stdout (see the package docstring for the protocol)."""

from __future__ import annotations

import json
import os
import struct
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, BinaryIO

from .bash import BashTool
from .common import MOUNTS_ENV, NO_RG_ENV, QUOTA_ENV, ROOT_ENV, Block, text_block
from .file_tools import FILE_TOOLS, FileTools
from .paths import Workspace
from .quota import Quota

PROTOCOL_VERSION = 1
DEFAULT_ROOT = "/workspace"
DEFAULT_MOUNTS_ROOT = "/mnt"  # memory stores, skills, uploads: reached by absolute paths
MAX_FRAME_BYTES = 64 * 1024 * 1024
BASH_DEFAULT_TIMEOUT_MS = 120_000
FILE_WORKERS = 4


class Daemon:
    """Reads requests, runs tools, writes responses. One per sandbox (per held exec channel)."""

    def __init__(
        self,
        root: str,
        out_fd: int,
        *,
        use_rg: bool = True,
        quota_bytes: int = 0,
        mounts_root: str | None = None,
    ) -> None:
        self.workspace = Workspace(root, mounts_root=mounts_root)
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
                "mounts_root": self.workspace.mounts_root,
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
    daemon = Daemon(
        root,
        sys.stdout.fileno(),
        use_rg=not os.environ.get(NO_RG_ENV),
        quota_bytes=quota_bytes,
        mounts_root=os.environ.get(MOUNTS_ENV) or DEFAULT_MOUNTS_ROOT,
    )
    try:
        daemon.serve(sys.stdin.buffer)
    except (BrokenPipeError, KeyboardInterrupt):
        pass
    finally:
        daemon.shutdown()
    # Worker threads may be blocked in a read or a child process: leave without joining them.
    sys.stdout.flush()
    os._exit(0)
