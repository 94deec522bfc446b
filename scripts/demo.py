"""The offline demo: a control plane and an edge as real processes, tool calls in a Docker sandbox.

control plane (outpost-control serve) ◄── mTLS gRPC tunnel ── edge (outpost-edge run) ── Docker
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

PY = sys.executable


def step(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        args, stdout=log.open("wb"), stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
    )


def wait_for(predicate: Any, what: str, timeout_s: float = 30) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise SystemExit(f"demo: timed out waiting for {what}")


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="outpost-demo-"))
    cp_log, edge_log = work / "control-plane.log", work / "edge.log"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        step("starting the control plane (API + gRPC tunnel server, SQLite store)")
        cp = start(
            [
                PY,
                "-m",
                "control_plane.cli",
                "serve",
                "--data-dir",
                str(work / "cp"),
                "--http",
                "127.0.0.1:0",
                "--tunnel",
                "127.0.0.1:0",
            ],
            cp_log,
        )
        procs.append(cp)
        banner = wait_for(
            lambda: re.search(r"API (\S+), tunnel (\S+)", cp_log.read_text()), "control plane start"
        )
        url, tunnel = banner.group(1), banner.group(2)
        key = (work / "cp" / "admin-api-key").read_text().strip()
        api = httpx.Client(base_url=url, headers={"authorization": f"Bearer {key}"}, timeout=120)
        print(f"API {url}, tunnel {tunnel}")

        step("creating an environment and a single-use enrollment token")
        env = api.post("/v1/environments", json={"name": "demo", "config": {"type": "self_hosted"}}).json()
        token = api.post(f"/v1/environments/{env['id']}/enrollment_tokens", json={"ttl_seconds": 600}).json()
        print(
            f"environment {env['id']}; token expires {token['expires_at']}; CA {token['ca_fingerprint'][:16]}…"
        )

        step("registering the edge (key pair made locally; CSR → client certificate)")
        token_file = work / "token"
        token_file.write_text(token["token"])
        token_file.chmod(0o600)
        edge_dir = work / "edge"
        subprocess.run(
            [
                PY,
                "-m",
                "edge_agent.cli",
                "register",
                "--control-plane",
                url,
                "--token-file",
                str(token_file),
                "--ca-fingerprint",
                token["ca_fingerprint"],
                "--state-dir",
                str(edge_dir),
                "--name",
                "demo-edge",
            ],
            check=True,
        )
        token_file.unlink()
        config = edge_dir / "config.yaml"
        config.write_text(
            yaml.safe_dump(
                {"state_dir": str(edge_dir), "name": "demo-edge", "sandbox": {"name_prefix": "outpost-demo"}}
            )
        )

        step("starting the edge agent (dials out; listens on nothing)")
        edge = start([PY, "-m", "edge_agent.cli", "run", "--config", str(config)], edge_log)
        procs.append(edge)
        status = wait_for(lambda: api.get("/v1/connected_edges").json()["data"], "edge connection")[0]
        print(
            f"edge {status['edge_id']} connected from {status['peer']}, policy {status['policy_digest'][:23]}…"
        )

        session = "demo-session"
        calls: list[tuple[str, dict[str, Any]]] = [
            ("bash", {"command": "cd /tmp && export GREETING=hello"}),
            ("bash", {"command": "echo $GREETING from $(pwd) as $(id -un)"}),
            (
                "write",
                {
                    "file_path": "fib.py",
                    "content": "a, b = 0, 1\nfor _ in range(10):\n    print(a, end=' ')\n    a, b = b, a + b\nprint()\n",
                },
            ),
            ("bash", {"command": "cd /workspace && python3 fib.py"}),
            ("edit", {"file_path": "fib.py", "old_string": "range(10)", "new_string": "range(15)"}),
            ("grep", {"pattern": "range"}),
            ("glob", {"pattern": "*.py"}),
            ("read", {"file_path": "/etc/shadow"}),
            (
                "bash",
                {
                    "command": "ip -o link 2>/dev/null | cut -d: -f2 || cat /proc/net/dev | tail -n +3 | cut -d: -f1"
                },
            ),
        ]
        step(f"running tool calls in session {session!r} (the first one provisions the sandbox)")
        for tool, tool_input in calls:
            t0 = time.perf_counter()
            r = api.post(
                "/v1/sandboxes/exec",
                json={"environment_id": env["id"], "session_id": session, "tool": tool, "input": tool_input},
            ).json()
            ms = (time.perf_counter() - t0) * 1000
            text = "".join(b.get("text", "") for b in r["content"]).strip()
            mark = "✗" if r["is_error"] else "✓"
            print(f"{mark} {tool:5} {json.dumps(tool_input)[:70]:72} {ms:7.1f} ms")
            for line in text.splitlines()[:4]:
                print(f"      {line}")

        step("destroying the session's sandbox and workspace")
        print(
            api.post(
                "/v1/sandboxes/destroy", json={"environment_id": env["id"], "session_id": session}
            ).json()
        )
        step("stopping the edge (SIGTERM drains) and the control plane")
        return 0
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
        print(f"logs: {cp_log}  {edge_log}")


if __name__ == "__main__":
    sys.exit(main())
