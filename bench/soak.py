"""Soak: a control plane and two edges on their shipped defaults, through idle stretches, tool calls,
cut links and an edge restart.

    python bench/soak.py [--minutes 10] [--seed N] [--json FILE] [--keep]

Runs ``outpost-control serve`` and two ``outpost-edge run`` as subprocesses, enrolled with the
operator CLIs, with no timing setting changed: only addresses, directories and each edge's
transport (edge-a ``grpc``, edge-b ``websocket``; the default ``auto`` would move a gRPC edge onto
the WebSocket tunnel, around its relay). The control plane's model is the local Messages-API
server (:mod:`scripted_model.server`), run in this process. Each edge has its own
environment, and reaches the control plane through a TCP relay in this process (edge-a: the
tunnel port; edge-b: the API port, which carries the WebSocket tunnel).

For ``--minutes`` (plan drawn from ``--seed``):

* busy stretches with a tool call every 1-4 s, alternating with idle stretches long enough for
  sandboxes to pause (30 s by default). A call appends one line to a counter file named after it in
  its session's workspace and prints ``ok <id>``; it goes through ``outpost-control exec``, the HTTP
  exec API (both retried with the same idempotency key until answered), or a real session driven
  by the official ``anthropic`` SDK, whose model asks for the call with the ``bash`` tool;
* about one cut per edge and minute, at random moments: the relay resets every connection at once
  (RST both ways), as a NAT table flush or a firewall restart does;
* one edge restart, early (so that the restarted edge's growth is measured over most of the run):
  SIGTERM, wait for it to exit, start it again.

It prints:

* handshakes per edge, expected (the first, one per cut of an established tunnel, one per restart)
  against seen (in the edge's and the control plane's logs); any other is an unexpected reconnect;
* tool calls made, lost (never answered, or answered with an error although they ran), executed
  twice (a counter file with two lines), and timeouts (attempts answered "no edge" or timed out,
  retried with the same key; session calls answered with a tool error because no edge came in time);
* RSS and open file descriptors of each daemon after warm-up: the minimum of 10 readings from
  /proc just after the first quarter of the run, against the minimum of the last 10 (target: at
  most 5 % growth over 10 minutes).

Exit code 1 when a must-be-zero count is not zero (lost, executed twice, unexpected reconnects).
Needs Docker and the sandbox image (``packaging/sandbox/build.sh``); everything it creates is
removed (the work directory is kept, with the daemons' logs, when a count is not zero or with
``--keep``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import re
import shutil
import signal
import socket
import struct
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import docker
import httpx
import yaml

from scripted_model import LocalModelServer, Turn
from scripted_model.responders import last_prompt_text, tool_result_text, tool_results_since_prompt

BIN = Path(sys.executable).parent
EDGES = ("edge-a", "edge-b")
TRANSPORTS = {"edge-a": "grpc", "edge-b": "websocket"}
SESSIONS_PER_EDGE = 2  # exec sessions (sandboxes) per edge, plus one SDK session
CALL_DEADLINE_S = 180.0  # a call not answered by then is lost
START_S = 90.0  # daemon start-up on a loaded machine
RETRY_S = 1.0  # between attempts of an exec call
WINDOW = 10  # readings per window (start and end)
CUT_SPACING_S = 12.0  # between two disruptions of one edge
MIN_TUNNEL_AGE_S = 3.0  # a connection this old has finished its handshake

EDGE_HANDSHAKE = "tunnel up to control plane"
STARTED = re.compile(r"Outpost control plane \S+: API (http://[\d.:]+), tunnel [\d.]+:(\d+)")

log = logging.getLogger("soak")


# --- the plan -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """What happens when, in seconds from the start; drawn from the seed alone."""

    run_s: float
    busy: list[tuple[float, float]]  # busy stretches; the rest is idle
    cuts: list[tuple[float, str]]
    restart: tuple[float, str]

    @classmethod
    def draw(cls, minutes: float, rng: random.Random) -> Plan:
        run_s = minutes * 60
        busy: list[tuple[float, float]] = []
        t = 0.0
        while t < run_s:
            length = rng.uniform(min(20, run_s / 4), min(60, run_s / 3))
            busy.append((t, min(run_s, t + length)))
            t += length + rng.uniform(min(35, run_s / 5), min(70, run_s / 4))  # idle: sandboxes pause
        restart = (rng.uniform(0.08, 0.15) * run_s, rng.choice(EDGES))
        cuts: list[tuple[float, str]] = []
        for edge in EDGES:
            taken = [restart[0]] if restart[1] == edge else []
            for _ in range(max(1, round(minutes))):
                for _attempt in range(100):
                    at = rng.uniform(0.05, 0.9) * run_s
                    if all(abs(at - other) >= CUT_SPACING_S for other in taken):
                        taken.append(at)
                        cuts.append((at, edge))
                        break
        return cls(run_s, busy, sorted(cuts), restart)

    def busy_at(self, t: float) -> bool:
        return any(start <= t < end for start, end in self.busy)


# --- processes ----------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    """This process's environment minus what would change the daemons from outside (proxies,
    Outpost and model settings): everything stays on loopback."""
    drop = ("proxy", "outpost_", "anthropic_")
    return {
        **{k: v for k, v in os.environ.items() if not any(d in k.lower() for d in drop)},
        "PYTHONUNBUFFERED": "1",
    }


class Daemon:
    """A daemon subprocess; its output goes to a log file it appends to across restarts."""

    def __init__(self, name: str, argv: list[str], log_path: Path) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        with self.log_path.open("ab") as out:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out, env=_env()
            )

    async def stop(self, timeout_s: float = 90.0) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), timeout_s)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.returncode is None else None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    async def wait_for_log(self, pattern: re.Pattern[str] | str, count: int = 1) -> None:
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            text = self.log()
            found = len(pattern.findall(text)) if isinstance(pattern, re.Pattern) else text.count(pattern)
            if found >= count:
                return
            if self.pid is None:
                raise RuntimeError(f"{self.name} exited:\n{text[-3000:]}")
            await asyncio.sleep(0.2)
        raise RuntimeError(f"{self.name}: no {pattern!r} (x{count}) within {START_S:g} s")


async def _cli(*argv: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=_env(),
    )
    out, err = await asyncio.wait_for(proc.communicate(), CALL_DEADLINE_S)
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


async def _cli_ok(*argv: str) -> str:
    code, out, err = await _cli(*argv)
    if code != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {code}:\n{out}{err}")
    return out


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- the relay ----------------------------------------------------------------------------------


@dataclass(eq=False)
class _Connection:
    opened_at: float
    writers: tuple[asyncio.StreamWriter, asyncio.StreamWriter]


class CutRelay:
    """A TCP relay in front of one edge's path to the control plane. :meth:`cut` resets every
    connection through it at once (RST both ways); new connections go through as before."""

    def __init__(self, target_port: int) -> None:
        self._target_port = target_port
        self._server: asyncio.Server | None = None
        self._connections: set[_Connection] = set()
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self.cut()

    def ages(self) -> list[float]:
        now = time.monotonic()
        return [now - c.opened_at for c in self._connections]

    def cut(self) -> int:
        """Reset every connection; returns how many there were."""
        cut = list(self._connections)
        for connection in cut:
            for writer in connection.writers:
                with contextlib.suppress(OSError):
                    sock = writer.get_extra_info("socket")
                    if sock is not None:
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.transport.abort()
        self._connections.clear()
        return len(cut)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._target_port)
        except OSError:
            writer.transport.abort()
            return
        connection = _Connection(time.monotonic(), (writer, up_writer))
        self._connections.add(connection)
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            self._connections.discard(connection)
            for w in connection.writers:
                w.transport.abort()


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
    dst.transport.abort()


# --- the model ----------------------------------------------------------------------------------

_CALL = re.compile(r"soak call (\S+)")


def counter_command(call_id: str) -> str:
    """The tool call: one line in the call's counter file, then ``ok <id>``."""
    return f"mkdir -p /workspace/.soak && echo x >> /workspace/.soak/{call_id} && echo ok {call_id}"


COUNT_COMMAND = (
    'cd /workspace/.soak 2>/dev/null && for f in *; do echo "count $f $(wc -l < "$f")"; done; true'
)


def soak_responder(request: Mapping[str, Any]) -> Turn:
    """Asked ``soak call <id>``: run the counter command with ``bash``, then say what it printed."""
    match = _CALL.search(last_prompt_text(request) or "")
    if match is None:
        return Turn.text("Nothing to do.")
    results = tool_results_since_prompt(request)
    if not results:
        return Turn.tool_use("bash", {"command": counter_command(match.group(1))})
    return Turn.text(f"done: {tool_result_text(results[-1]).strip()}")


# --- calls --------------------------------------------------------------------------------------


@dataclass
class Call:
    call_id: str
    kind: str  # "cli", "http" or "sdk"
    edge: str
    session: str
    answered: bool = False  # exec: a success; sdk: a tool_result (maybe an error)
    error: str | None = None  # sdk: the tool error the model got
    timeouts: int = 0  # exec: attempts refused or timed out; sdk: 1 if the tool result was an error
    lost_reason: str | None = None


@dataclass
class EdgeState:
    name: str
    environment_id: str
    edge_id: str
    daemon: Daemon
    relay: CutRelay
    exec_sessions: list[str]
    sdk_session: str = ""
    sdk_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    cuts: int = 0
    cuts_skipped: int = 0
    restarts: int = 0

    @property
    def expected_handshakes(self) -> int:
        return 1 + self.cuts + self.restarts


@dataclass
class Reading:
    at: float
    pid: int
    rss_kb: int
    fds: int
    sockets: int  # of the fds: they come and go with API clients' connections


def _read_proc(pid: int) -> tuple[int, int, int] | None:
    """RSS (kB), open fds and how many of them are sockets."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    sockets = 0
    for fd in fds:
        with contextlib.suppress(OSError):  # closed since the listing
            sockets += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
    match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    return (int(match.group(1)), len(fds), sockets) if match else None


class Soak:
    def __init__(self, minutes: float, seed: int, work: Path) -> None:
        self.rng = random.Random(seed)
        self.plan = Plan.draw(minutes, self.rng)
        self.minutes = minutes
        self.seed = seed
        self.work = work
        self.edges: dict[str, EdgeState] = {}
        self.calls: list[Call] = []
        self.tasks: set[asyncio.Task[None]] = set()
        self.readings: dict[str, list[Reading]] = {}
        self.url = ""
        self.admin_key = ""
        self.cp: Daemon | None = None
        self.started_at = 0.0
        self.sample_s = max(1.0, self.plan.run_s / 200)

    # -- set-up ----------------------------------------------------------------------------------
    async def start_control_plane(self, model_url: str) -> int:
        key_file = self.work / "model-api-key"
        key_file.write_text("soak-local-model\n")
        key_file.chmod(0o600)
        self.cp = Daemon(
            "control plane",
            [
                str(BIN / "outpost-control"),
                "serve",
                "--data-dir",
                str(self.work / "cp"),
                "--http",
                "127.0.0.1:0",
                "--tunnel",
                "127.0.0.1:0",
                "--model-base-url",
                model_url,
                "--model-api-key-file",
                str(key_file),
            ],
            self.work / "control-plane.log",
        )
        await self.cp.start()
        await self.cp.wait_for_log(STARTED)
        match = STARTED.search(self.cp.log())
        assert match is not None
        self.url = match.group(1)
        self.admin_key = (self.work / "cp" / "admin-api-key").read_text().strip()
        return int(match.group(2))

    def _client_args(self) -> list[str]:
        return ["--url", self.url, "--data-dir", str(self.work / "cp")]

    async def enroll_and_start_edges(self, tunnel_port: int) -> None:
        http_port = int(self.url.rsplit(":", 1)[1])
        for name in EDGES:
            env = json.loads(
                await _cli_ok(
                    str(BIN / "outpost-control"),
                    "environments",
                    "create",
                    "--name",
                    f"soak-{name}",
                    *self._client_args(),
                )
            )
            tokens = json.loads(
                await _cli_ok(
                    str(BIN / "outpost-control"),
                    "tokens",
                    "create",
                    "--environment",
                    env["id"],
                    "--out-dir",
                    str(self.work / "tokens"),
                    *self._client_args(),
                )
            )
            state_dir = self.work / name
            await _cli_ok(
                str(BIN / "outpost-edge"),
                "register",
                "--control-plane",
                self.url,
                "--token-file",
                tokens["tokens"][0]["file"],
                "--ca-fingerprint",
                tokens["ca_fingerprint"],
                "--state-dir",
                str(state_dir),
                "--name",
                name,
            )
            edge_id = json.loads((state_dir / "identity" / "identity.json").read_text())["edge_id"]
            transport = TRANSPORTS[name]
            relay = CutRelay(tunnel_port if transport == "grpc" else http_port)
            await relay.start()
            config: dict[str, Any] = {"state_dir": str(state_dir), "connection": {"transport": transport}}
            if transport == "grpc":
                config["control_plane"] = {"tunnel_address": f"127.0.0.1:{relay.port}"}
            else:  # the WebSocket tunnel is on the API port; 9464 (the default) is edge-a's
                config["control_plane"] = {"url": f"http://127.0.0.1:{relay.port}"}
                config["observability"] = {"listen": f"127.0.0.1:{_free_port()}"}
            config_path = self.work / f"{name}.yaml"
            config_path.write_text(yaml.safe_dump(config))
            daemon = Daemon(
                name,
                [str(BIN / "outpost-edge"), "run", "--config", str(config_path)],
                self.work / f"{name}.log",
            )
            await daemon.start()
            self.edges[name] = EdgeState(
                name,
                env["id"],
                edge_id,
                daemon,
                relay,
                [f"soak-{name}-{i}" for i in range(SESSIONS_PER_EDGE)],
            )
        for edge in self.edges.values():
            await edge.daemon.wait_for_log(EDGE_HANDSHAKE)

    async def create_sdk_sessions(self, client: anthropic.AsyncAnthropic) -> None:
        agent = await client.beta.agents.create(
            name="soak", model="claude-sonnet-5-5", tools=[{"type": "agent_toolset_20260401"}]
        )
        for edge in self.edges.values():
            session = await client.beta.sessions.create(agent=agent.id, environment_id=edge.environment_id)
            edge.sdk_session = session.id

    # -- load ------------------------------------------------------------------------------------
    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def workload(self, http: httpx.AsyncClient, client: anthropic.AsyncAnthropic) -> None:
        n = 0
        while (t := self._elapsed()) < self.plan.run_s:
            if not self.plan.busy_at(t):
                await asyncio.sleep(0.5)
                continue
            n += 1
            edge = self.edges[self.rng.choice(EDGES)]
            roll = self.rng.random()
            if n <= 3:  # one of each kind first, however short the run
                roll = (0.3, 0.7, 0.0)[n - 1]
            call_id = f"c{n:05d}-{uuid.uuid4().hex[:8]}"
            if roll < 0.25 and not edge.sdk_lock.locked():
                call = Call(call_id, "sdk", edge.name, edge.sdk_session)
                self._spawn(self._sdk_call(client, edge, call))
            else:
                kind = "cli" if roll < 0.625 else "http"
                call = Call(call_id, kind, edge.name, self.rng.choice(edge.exec_sessions))
                self._spawn(self._exec_call(http, edge, call))
            self.calls.append(call)
            await asyncio.sleep(self.rng.uniform(1.0, 4.0))

    async def _exec_call(self, http: httpx.AsyncClient, edge: EdgeState, call: Call) -> None:
        key = f"soak-{call.call_id}"
        deadline = time.monotonic() + CALL_DEADLINE_S
        while time.monotonic() < deadline:
            if call.kind == "cli":
                ok = await self._exec_cli(edge, call, key)
            else:
                ok = await self._exec_http(http, edge, call, key)
            if ok:
                call.answered = True
                return
            call.timeouts += 1
            await asyncio.sleep(RETRY_S)
        call.lost_reason = f"no answer within {CALL_DEADLINE_S:g} s"

    async def _exec_cli(self, edge: EdgeState, call: Call, key: str) -> bool:
        code, out, _err = await _cli(
            str(BIN / "outpost-control"),
            "exec",
            *self._client_args(),
            "--environment",
            edge.environment_id,
            "--session",
            call.session,
            "--idempotency-key",
            key,
            "bash",
            counter_command(call.call_id),
        )
        return code == 0 and f"ok {call.call_id}" in out

    async def _exec_http(self, http: httpx.AsyncClient, edge: EdgeState, call: Call, key: str) -> bool:
        body = {
            "environment_id": edge.environment_id,
            "session_id": call.session,
            "tool": "bash",
            "input": {"command": counter_command(call.call_id)},
            "idempotency_key": key,
        }
        try:
            response = await http.post("/v1/sandboxes/exec", json=body)
        except httpx.HTTPError:
            return False
        if response.status_code != 200:
            return False
        data = response.json()
        text = "".join(b.get("text", "") for b in data["content"])
        return not data["is_error"] and f"ok {call.call_id}" in text

    async def _sdk_call(self, client: anthropic.AsyncAnthropic, edge: EdgeState, call: Call) -> None:
        async with edge.sdk_lock:
            try:
                async with asyncio.timeout(CALL_DEADLINE_S):
                    stream = await client.beta.sessions.events.stream(call.session)
                    await client.beta.sessions.events.send(
                        call.session,
                        events=[
                            {
                                "type": "user.message",
                                "content": [{"type": "text", "text": f"soak call {call.call_id}"}],
                            }
                        ],
                    )
                    answered = False
                    async for event in stream:
                        if event.type in ("agent.tool_result", "agent.message"):
                            answered = True
                        if event.type == "session.status_idle" and answered:
                            break
                    await stream.close()
            except (TimeoutError, anthropic.APIError) as exc:
                call.lost_reason = f"session turn did not end: {exc!r}"
                return
            events = [e async for e in client.beta.sessions.events.list(call.session)]
            uses = [
                e
                for e in events
                if e.type == "agent.tool_use" and call.call_id in json.dumps(getattr(e, "input", {}) or {})
            ]
            if len(uses) != 1:
                call.lost_reason = f"{len(uses)} tool_use events for the call"
                return
            results = [e for e in events if e.type == "agent.tool_result" and e.tool_use_id == uses[0].id]
            if not results:
                call.lost_reason = "no tool_result for the call"
                return
            call.answered = True
            if results[-1].is_error:
                call.timeouts = 1
                call.error = "".join(getattr(b, "text", "") or "" for b in results[-1].content or [])[:200]

    # -- disruptions -----------------------------------------------------------------------------
    async def disrupt(self) -> None:
        events: list[tuple[float, str, str]] = [(t, "cut", edge) for t, edge in self.plan.cuts]
        events.append((self.plan.restart[0], "restart", self.plan.restart[1]))
        for at, what, name in sorted(events):
            await asyncio.sleep(max(0.0, at - self._elapsed()))
            edge = self.edges[name]
            if what == "restart":
                await edge.daemon.stop()
                await edge.daemon.start()
                edge.restarts += 1
                continue
            await self._cut(edge)

    async def _cut(self, edge: EdgeState) -> None:
        """Cut the edge's tunnel once it is established (every connection through the relay at
        least ``MIN_TUNNEL_AGE_S`` old), waiting up to ``CUT_SPACING_S`` for that."""
        deadline = time.monotonic() + CUT_SPACING_S
        while time.monotonic() < deadline:
            ages = edge.relay.ages()
            if len(ages) == 1 and ages[0] >= MIN_TUNNEL_AGE_S:
                edge.relay.cut()
                edge.cuts += 1
                return
            await asyncio.sleep(0.2)
        edge.cuts_skipped += 1

    # -- readings --------------------------------------------------------------------------------
    def _daemons(self) -> dict[str, Daemon]:
        assert self.cp is not None
        return {"control plane": self.cp, **{name: e.daemon for name, e in self.edges.items()}}

    async def sample(self) -> None:
        while True:
            for name, daemon in self._daemons().items():
                pid = daemon.pid
                read = _read_proc(pid) if pid is not None else None
                if pid is not None and read is not None:
                    self.readings.setdefault(name, []).append(Reading(self._elapsed(), pid, *read))
            await asyncio.sleep(self.sample_s)

    def growth(self, name: str) -> dict[str, float] | None:
        daemon = self._daemons()[name]
        warm = self.plan.run_s / 4
        readings = [r for r in self.readings.get(name, []) if r.pid == daemon.pid and r.at >= warm]
        if len(readings) < 2 * WINDOW:
            return None
        start, end = readings[:WINDOW], readings[-WINDOW:]
        rss0, rss1 = min(r.rss_kb for r in start), min(r.rss_kb for r in end)
        fd0, fd1 = min(r.fds for r in start), min(r.fds for r in end)
        return {
            "rss_start_mb": rss0 / 1024,
            "rss_end_mb": rss1 / 1024,
            "rss_growth_pct": 100 * (rss1 - rss0) / rss0,
            "fds_start": fd0,
            "fds_end": fd1,
            "sockets_start": min(r.sockets for r in start),
            "sockets_end": min(r.sockets for r in end),
            "fds_growth_pct": 100 * (fd1 - fd0) / fd0,
            "minutes": (end[-1].at - start[0].at) / 60,
        }

    def _elapsed(self) -> float:
        return time.monotonic() - self.started_at

    # -- the end ---------------------------------------------------------------------------------
    async def settle(self) -> None:
        """Wait for the calls still running, and for every edge's last expected handshake."""
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=CALL_DEADLINE_S + 30)
        for edge in self.edges.values():
            with contextlib.suppress(RuntimeError):
                await edge.daemon.wait_for_log(EDGE_HANDSHAKE, edge.expected_handshakes)

    async def count_executions(self, http: httpx.AsyncClient) -> dict[str, int]:
        counts: dict[str, int] = {}
        for edge in self.edges.values():
            for session in [*edge.exec_sessions, edge.sdk_session]:
                body = {
                    "environment_id": edge.environment_id,
                    "session_id": session,
                    "tool": "bash",
                    "input": {"command": COUNT_COMMAND},
                    "idempotency_key": f"soak-count-{uuid.uuid4().hex}",
                }
                for _ in range(30):
                    response = await http.post("/v1/sandboxes/exec", json=body)
                    if response.status_code == 200 and not response.json()["is_error"]:
                        break
                    await asyncio.sleep(RETRY_S)
                else:
                    raise RuntimeError(f"could not read the counters of {session}: {response.text}")
                text = "".join(b.get("text", "") for b in response.json()["content"])
                for call_id, lines in re.findall(r"^count (\S+) (\d+)$", text, re.MULTILINE):
                    counts[call_id] = counts.get(call_id, 0) + int(lines)
        return counts

    def handshakes(self) -> dict[str, dict[str, int]]:
        assert self.cp is not None
        cp_log = self.cp.log()
        out: dict[str, dict[str, int]] = {}
        for name, edge in self.edges.items():
            seen_edge = edge.daemon.log().count(EDGE_HANDSHAKE)
            seen_cp = len(re.findall(rf"edge {edge.edge_id} \(.*?\) connected from", cp_log))
            out[name] = {
                "expected": edge.expected_handshakes,
                "seen_edge": seen_edge,
                "seen_control_plane": seen_cp,
                "unexpected": max(seen_edge, seen_cp) - edge.expected_handshakes,
                "cuts": edge.cuts,
                "cuts_skipped": edge.cuts_skipped,
                "restarts": edge.restarts,
            }
        return out

    async def cleanup(self, http: httpx.AsyncClient) -> None:
        for edge in self.edges.values():
            for session in [*edge.exec_sessions, edge.sdk_session]:
                with contextlib.suppress(httpx.HTTPError):
                    await http.post(
                        "/v1/sandboxes/destroy",
                        json={"environment_id": edge.environment_id, "session_id": session},
                    )


def _figures(soak: Soak, counts: dict[str, int]) -> dict[str, Any]:
    per_kind: dict[str, dict[str, int]] = {}
    lost: list[str] = []
    doubled: list[str] = []
    for call in soak.calls:
        ran = counts.get(call.call_id, 0)
        row = per_kind.setdefault(
            call.kind, {"made": 0, "ok": 0, "lost": 0, "executed_twice": 0, "timeouts": 0}
        )
        row["made"] += 1
        row["timeouts"] += call.timeouts
        reason = call.lost_reason
        if reason is None and not call.answered:
            reason = "never answered"
        elif reason is None and call.error is None and ran == 0:
            reason = "answered ok but never ran"
        elif reason is None and call.error is not None and ran > 0:
            reason = f"ran, but the session got an error: {call.error}"
        if reason is not None:
            row["lost"] += 1
            lost.append(f"{call.call_id} ({call.kind}, {call.edge}): {reason}")
        elif call.error is None:
            row["ok"] += 1
        if ran > 1:
            row["executed_twice"] += 1
            doubled.append(f"{call.call_id} ({call.kind}, {call.edge}): ran {ran} times")
    handshakes = soak.handshakes()
    return {
        "minutes": soak.minutes,
        "seed": soak.seed,
        "calls": per_kind,
        "lost": len(lost),
        "executed_twice": len(doubled),
        "unexpected_reconnects": sum(abs(h["unexpected"]) for h in handshakes.values()),
        "timeouts": sum(row["timeouts"] for row in per_kind.values()),
        "executions_counted": sum(counts.values()),
        "handshakes": handshakes,
        "resources": {name: soak.growth(name) for name in soak._daemons()},
        "lost_calls": lost,
        "doubled_calls": doubled,
    }


def _print(figures: dict[str, Any]) -> None:
    print(
        f"\nSoak: {figures['minutes']:g} min, seed {figures['seed']}, a control plane and two edges on "
        "their shipped defaults (edge-a gRPC, edge-b WebSocket), links cut at random, one edge restart"
    )
    print(f"\n{'handshakes':22} {'expected':>8} {'seen (edge / cp)':>18} {'unexpected':>11}   disruptions")
    for name, h in figures["handshakes"].items():
        seen = f"{h['seen_edge']} / {h['seen_control_plane']}"
        skipped = f", {h['cuts_skipped']} cut(s) skipped" if h["cuts_skipped"] else ""
        print(
            f"  {name + ' (' + TRANSPORTS[name] + ')':20} {h['expected']:8d} {seen:>18} {h['unexpected']:11d}"
            f"   {h['cuts']} cut(s), {h['restarts']} restart(s){skipped}"
        )
    print(f"\n{'tool calls':22} {'made':>6} {'ok':>6} {'lost':>6} {'twice':>6} {'timeouts':>9}")
    labels = {"cli": "outpost-control exec", "http": "HTTP exec API", "sdk": "SDK sessions"}
    for kind in ("cli", "http", "sdk"):
        row = figures["calls"].get(kind, {"made": 0, "ok": 0, "lost": 0, "executed_twice": 0, "timeouts": 0})
        print(
            f"  {labels[kind]:20} {row['made']:6d} {row['ok']:6d} {row['lost']:6d} "
            f"{row['executed_twice']:6d} {row['timeouts']:9d}"
        )
    print("  (timeouts: attempts answered 'no edge' or timed out, retried with the same key; session")
    print("   calls answered with a tool error because no edge came in time)")
    print(f"  executions counted in the sandboxes' counter files: {figures['executions_counted']}")
    print("\nafter warm-up, min of 10 readings at start vs end (target: <= 5 % growth over 10 min)")
    header = f"{'RSS MB start -> end':>22} {'growth':>8} {'open fds (sockets)':>22} {'growth':>8} {'over':>8}"
    print(f"  {'daemon':14} {header}")
    for name, g in figures["resources"].items():
        if g is None:
            print(f"  {name:14} (too few readings after warm-up)")
            continue
        print(
            f"  {name:14} {g['rss_start_mb']:9.1f} -> {g['rss_end_mb']:8.1f} {g['rss_growth_pct']:+7.1f}% "
            f"{g['fds_start']:5d} ({g['sockets_start']:2d}) -> {g['fds_end']:4d} ({g['sockets_end']:2d}) "
            f"{g['fds_growth_pct']:+7.1f}% {g['minutes']:6.1f} min"
        )
    for line in figures["lost_calls"] + figures["doubled_calls"]:
        print(f"  ! {line}")
    verdict = "OK" if not _failures(figures) else "FAILED"
    print(
        f"\nlost {figures['lost']}, executed twice {figures['executed_twice']}, "
        f"unexpected reconnects {figures['unexpected_reconnects']}: {verdict}"
    )


def _failures(figures: dict[str, Any]) -> int:
    return int(figures["lost"]) + int(figures["executed_twice"]) + int(figures["unexpected_reconnects"])


async def _remove_leftovers(edge_ids: list[str]) -> None:
    def remove() -> None:
        client = docker.from_env()
        try:
            for edge_id in edge_ids:
                label = {"label": f"outpost.edge_id={edge_id}"}
                for container in client.containers.list(all=True, filters=label):
                    container.remove(force=True)
                for volume in client.volumes.list(filters=label):
                    volume.remove(force=True)
        finally:
            client.close()

    await asyncio.to_thread(remove)


async def main(minutes: float, seed: int, json_path: Path | None, keep: bool) -> int:
    logging.basicConfig(level=logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="outpost-soak-"))
    soak = Soak(minutes, seed, work)
    failures = 1
    async with contextlib.AsyncExitStack() as stack:
        model = await stack.enter_async_context(LocalModelServer(soak_responder))
        tunnel_port = await soak.start_control_plane(model.base_url)
        assert soak.cp is not None
        stack.push_async_callback(soak.cp.stop)
        stack.push_async_callback(lambda: _remove_leftovers([e.edge_id for e in soak.edges.values()]))
        try:
            await soak.enroll_and_start_edges(tunnel_port)
        finally:
            for edge in soak.edges.values():
                stack.push_async_callback(edge.relay.close)
                stack.push_async_callback(edge.daemon.stop)
        http = await stack.enter_async_context(
            httpx.AsyncClient(
                base_url=soak.url,
                headers={"authorization": f"Bearer {soak.admin_key}"},
                timeout=CALL_DEADLINE_S,
                trust_env=False,
            )
        )
        client = anthropic.AsyncAnthropic(base_url=soak.url, api_key=soak.admin_key)
        stack.push_async_callback(client.close)
        await soak.create_sdk_sessions(client)
        stack.push_async_callback(soak.cleanup, http)

        print(f"soak: {minutes:g} min from now; work directory {work}", file=sys.stderr, flush=True)
        soak.started_at = time.monotonic()
        sampler = asyncio.create_task(soak.sample())
        disruptions = asyncio.create_task(soak.disrupt())
        await soak.workload(http, client)
        await disruptions
        await soak.settle()
        sampler.cancel()
        counts = await soak.count_executions(http)
        figures = _figures(soak, counts)
        _print(figures)
        if json_path is not None:
            json_path.write_text(json.dumps(figures, indent=2))
        failures = _failures(figures)
    if failures == 0 and not keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"logs and state kept in {work}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="how long the load runs (default 10)")
    parser.add_argument("--seed", type=int, default=1, help="seeds the plan: stretches, calls, cuts, restart")
    parser.add_argument("--json", type=Path, help="also write the figures to this file as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, state)")
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.minutes, args.seed, args.json, args.keep)))
