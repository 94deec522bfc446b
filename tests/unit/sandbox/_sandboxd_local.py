"""Run sandboxd as a local subprocess, started exactly as the edge starts it in a container
(the bootstrap reads the script from stdin), against a temporary workspace. The interpreter is
isolated (``-I -S``: no environment, no site-packages, not even the working directory on its path),
so only the standard library and the script itself can be imported.

``mounts_root`` stands in for the sandbox's ``/mnt``; each of ``read_only`` (directories, under it)
is made a read-only bind mount of itself, as a sandbox's read-only memory store is: the daemon then
runs in its own user and mount namespaces (``unshare -rm``), so the host's mounts are untouched."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edge_agent.sandbox.channel import daemon_source
from edge_agent.sandbox.protocol import bootstrap_payload
from edge_agent.sandbox.sandboxd import BOOTSTRAP, MOUNTS_ENV, NO_RG_ENV, ROOT_ENV

# Bind each directory named before "--" onto itself read-only, then run the rest.
_READ_ONLY_MOUNTS = (
    'while [ "$1" != -- ]; do'
    ' mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" || exit 97; shift;'
    ' done; shift; exec "$@"'
)


class LocalDaemon:
    def __init__(
        self,
        root: Path,
        *,
        use_rg: bool = False,
        cwd: Path | None = None,
        mounts_root: Path | None = None,
        read_only: Sequence[Path] = (),
    ) -> None:
        env = {**os.environ, ROOT_ENV: str(root)}
        if not use_rg:
            env[NO_RG_ENV] = "1"
        if mounts_root is not None:
            env[MOUNTS_ENV] = str(mounts_root)
        argv = [sys.executable, "-I", "-S", "-u", "-c", BOOTSTRAP]
        if read_only:
            unshare = ["unshare", "-rm", "--propagation", "private", "sh", "-c", _READ_ONLY_MOUNTS, "sh"]
            argv = [*unshare, *(str(d) for d in read_only), "--", *argv]
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd if cwd is not None else root,
        )
        self.stderr = b""
        self._next_id = 1
        self.write(bootstrap_payload(daemon_source()))
        self.hello = self.read()

    def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message).encode()
        self.write(struct.pack(">I", len(data)) + data)

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        header = self.proc.stdout.read(4)
        assert len(header) == 4, "daemon closed its stdout"
        (length,) = struct.unpack(">I", header)
        message: dict[str, Any] = json.loads(self.proc.stdout.read(length))
        return message

    def submit(self, tool: str, tool_input: dict[str, Any], timeout_ms: int = 10_000) -> int:
        req_id = self._next_id
        self._next_id += 1
        self.send({"id": req_id, "tool": tool, "input": tool_input, "timeout_ms": timeout_ms})
        return req_id

    def call(self, tool: str, tool_input: dict[str, Any], timeout_ms: int = 10_000) -> tuple[str, bool]:
        req_id = self.submit(tool, tool_input, timeout_ms)
        response = self.read()
        assert response["id"] == req_id
        return "".join(b.get("text", "") for b in response["content"]), response["is_error"]

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        code = self.proc.wait(timeout=10)
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        return code
