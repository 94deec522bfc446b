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

import anthropic
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


def run_session(url: str, key: str, environment_id: str) -> None:
    """Everything here goes through the official anthropic SDK, pointed at Outpost."""
    client = anthropic.Anthropic(base_url=url, api_key=key)
    step("creating an agent and a session with the official anthropic SDK")
    agent = client.beta.agents.create(
        name="demo-coder",
        model=os.environ.get("OUTPOST_DEMO_MODEL", "claude-sonnet-5-5"),
        system="You are a careful engineer. Use the tools to write and run code in /workspace.",
        tools=[{"type": "agent_toolset_20260401"}],
    )
    session = client.beta.sessions.create(agent=agent.id, environment_id=environment_id, title="demo")
    print(f"agent {agent.id} (v{agent.version}), session {session.id} ({session.status}); no sandbox yet")
    prompt = "Write a small Python program that prints the first ten squares and their sum, then run it."
    step(f"user: {prompt}")
    stream = client.beta.sessions.events.stream(session.id, event_deltas=["agent.message"])
    client.beta.sessions.events.send(
        session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": prompt}]}]
    )
    t0 = time.perf_counter()
    first_delta = None
    for event in stream:
        if event.type == "event_delta":
            if first_delta is None:
                first_delta = time.perf_counter() - t0
                print("agent: ", end="")
            print(event.delta.content.text, end="", flush=True)
        elif event.type == "agent.message":
            print()
        elif event.type == "agent.tool_use":
            summary = json.dumps(event.input)
            print(f"  → {event.name} {summary[:100]}{'…' if len(summary) > 100 else ''}")
        elif event.type == "agent.tool_result":
            text = "".join(getattr(b, "text", "") or "" for b in event.content or []).strip()
            mark = "✗" if event.is_error else "✓"
            for i, line in enumerate(text.splitlines()[:6]):
                print(f"  {mark if i == 0 else ' '} {line}")
        elif event.type == "session.error":
            print(f"  ! {event.error.type}: {event.error.message}")
        elif event.type == "session.status_idle":
            print(
                f"(session idle: {event.stop_reason.type}; first token after {first_delta or 0:.2f} s, turn took {time.perf_counter() - t0:.2f} s)"
            )
            break
    events = list(client.beta.sessions.events.list(session.id))
    print(f"the session log holds {len(events)} events: " + ", ".join(sorted({e.type for e in events})))
    step("deleting the session (its sandbox and workspace go with it)")
    client.beta.sessions.delete(session.id)


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="outpost-demo-"))
    cp_log, edge_log = work / "control-plane.log", work / "edge.log"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        model_args: list[str] = []
        if os.environ.get("ANTHROPIC_API_KEY"):
            step("ANTHROPIC_API_KEY is set: the agent is Claude")
        else:
            step("no ANTHROPIC_API_KEY: using the local scripted model (a Messages-API server on loopback)")
            model_log = work / "model.log"
            model = start(
                [PY, "-m", "scripted_model.local_server", "--port", "0", "--script", "demo"], model_log
            )
            procs.append(model)
            found = wait_for(
                lambda: re.search(r"(http://127\.0\.0\.1:\d+)", model_log.read_text()), "model server"
            )
            model_args = ["--model-base-url", found.group(1)]
            os.environ["ANTHROPIC_API_KEY"] = "local-scripted-model"
            print(f"model server {found.group(1)}")

        step("starting the control plane (API, harnesses, gRPC tunnel server, SQLite store)")
        serve = ["serve", "--data-dir", str(work / "cp"), "--http", "127.0.0.1:0", "--tunnel", "127.0.0.1:0"]
        cp = start([PY, "-m", "control_plane.cli", *serve, *model_args], cp_log)
        procs.append(cp)
        banner = wait_for(
            lambda: re.search(r"API (\S+?), tunnel (\S+)", cp_log.read_text()), "control plane start"
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

        step("starting the edge agent (dials out; health and metrics on 127.0.0.1:9464 only)")
        edge = start([PY, "-m", "edge_agent.cli", "run", "--config", str(config)], edge_log)
        procs.append(edge)
        status = wait_for(lambda: api.get("/v1/connected_edges").json()["data"], "edge connection")[0]
        print(
            f"edge {status['edge_id']} connected from {status['peer']}, policy {status['policy_digest'][:23]}…"
        )

        run_session(url, key, env["id"])

        step("one tool call by hand in another session (outpost-control exec does this)")
        t0 = time.perf_counter()
        r = api.post(
            "/v1/sandboxes/exec",
            json={
                "environment_id": env["id"],
                "session_id": "by-hand",
                "tool": "bash",
                "input": {
                    "command": "id; ls /proc/net/dev >/dev/null && tail -n +3 /proc/net/dev | cut -d: -f1"
                },
            },
        ).json()
        print("".join(b.get("text", "") for b in r["content"]).strip())
        print(
            f"({(time.perf_counter() - t0) * 1000:.0f} ms including giving the session its sandbox;"
            " only 'lo': no network)"
        )
        api.post("/v1/sandboxes/destroy", json={"environment_id": env["id"], "session_id": "by-hand"})

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
