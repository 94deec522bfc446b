"""Run sandboxd as a local subprocess, started exactly as the edge starts it in a container
(the bootstrap reads the script from stdin), against a temporary workspace. The interpreter is
isolated (``-I -S``: no environment, no site-packages, not even the working directory on its path),
so only the standard library and the script itself can be imported."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

from edge_agent.sandbox.channel import daemon_source
from edge_agent.sandbox.protocol import bootstrap_payload
from edge_agent.sandbox.sandboxd import BOOTSTRAP, NO_RG_ENV, ROOT_ENV


class LocalDaemon:
    def __init__(self, root: Path, *, use_rg: bool = False, cwd: Path | None = None) -> None:
        env = {**os.environ, ROOT_ENV: str(root)}
        if not use_rg:
            env[NO_RG_ENV] = "1"
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-u", "-c", BOOTSTRAP],
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
