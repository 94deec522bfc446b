"""Scale bench: K sessions through the official async SDK, N light edges, R control-plane replicas.

    python bench/bench_scale.py [--sessions 200] [--edges 50] [--replicas 2] [--turns 3]
                                [--store-url postgresql://USER@HOST:PORT/DB --store-password-file F]
                                [--json FILE] [--keep]

    # the issue's sizes
    python bench/bench_scale.py --sessions 1000 --edges 500 --replicas 1
    python bench/bench_scale.py --sessions 200 --edges 10 --replicas 3

Processes, all on loopback, all started by this script and stopped (and their temp dir removed)
at the end, on an error or on Ctrl-C / SIGTERM:

* the local Messages-API server (``scripted_model``) with a responder that answers a prompt
  starting ``tool:`` with one ``bash`` tool_use (then, given its result, a text) and any other
  prompt with a text;
* R ``outpost-control serve`` replicas on one store, each with ``harness.follow_tunnels``: the
  shared data dir's SQLite file, or with ``--store-url`` a PostgreSQL database made for the run
  through that URL (its role needs CREATEDB) and dropped after it;
* light edges (``--edges-per-process`` per process): each enrolled with ``register`` like a real
  edge and running the edge's real ``Dialer`` + ``Link`` (gRPC mTLS tunnel, handshake, heartbeats
  with the shipped timings, reconnects) with an in-memory request handler instead of Docker: a
  "sandbox" is a set entry per session, a tool call answers at once. The heartbeats carry the
  number of sandboxes, as the real edge's do. Edge i dials replica ``i % R`` first, then the others;
* this process: the SDK driver. Session i is created on, sends to and streams from replica
  ``i % R``; for the first ``--cross-streams`` sessions a second stream is opened on replica
  ``(i + 1) % R`` (with R >= 2).

Phases: the replicas' CPU with no edge over ``--idle-window-s``; the same with the N edges
connected and idle (heartbeat cost per edge = the difference / N, as a share of one core); K
sessions, one unmeasured warm-up text turn each; then ``--turns`` measured turns per session,
all sessions at once, text-only and one-tool turns alternating (``--turn-kinds``); then
``--probe-turns`` turns one at a time on the sessions with a second stream (the stream delay at
rest).

It prints one line per figure: turns/s, control-plane CPU ms per turn (the replicas' user + system
time from ``/proc/PID/stat``, summed, over the measured turns), send→idle p50/p95 per turn kind,
RSS per replica, the stream delay (event ``processed_at`` → received by the SDK) on the replica
the turns were sent to and on another replica (under load and at rest: the turns run on the
replica they are sent to, which holds tunnels to the environment's edges), sandboxes per edge
(made over the run: min/max/spread), the heartbeat
cost, and what went wrong (failed turns, tool errors, events a second stream missed, edges that
reconnected). It exits 1 if anything went wrong.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import ctypes
import json
import math
import os
import resource
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import yaml

from outpost_wire.errors import ErrorCode
from outpost_wire.frames import (
    Destroy,
    Destroyed,
    Execute,
    Failure,
    Outcome,
    Provision,
    Provisioned,
    Request,
)
from outpost_wire.results import ToolResult

if TYPE_CHECKING:
    from edge_agent.connection import Link

ROOT = Path(__file__).resolve().parent.parent

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
TOOL_PREFIX = "tool:"


# --- small helpers ------------------------------------------------------------------------------


def pct(samples: Sequence[float], p: float) -> float:
    if not samples:
        return math.nan
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (every thread), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime (fields 14 and 15)


def rss_mb(pid: int) -> tuple[float, float]:
    """(current, peak) resident set size of ``pid`` in MB, from ``/proc/PID/status``."""
    values: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024  # kB
    return values.get("VmRSS", math.nan), values.get("VmHWM", math.nan)


def _die_with_parent() -> None:
    """In a child, before exec: get SIGTERM when this bench dies, even by SIGKILL (Linux)."""
    os.setsid()  # a Ctrl-C in the terminal reaches the bench only; it stops the children itself
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


# --- the model -----------------------------------------------------------------------------------


def bench_responder(request: Mapping[str, Any]) -> Any:
    """``tool: ...`` prompts: one bash call, then a text quoting its result; others: a text."""
    from scripted_model.responders import last_prompt_text, tool_result_text, tool_results_since_prompt
    from scripted_model.script import ToolUse, Turn

    prompt = last_prompt_text(request) or ""
    results = tool_results_since_prompt(request)
    if prompt.startswith(TOOL_PREFIX) and not results:
        return Turn([ToolUse("bash", {"command": "echo bench"})], stop_reason="tool_use")
    if results:
        return Turn.text(f"The tool said: {tool_result_text(results[-1]).strip()}")
    return Turn.text("A short answer from the bench model, a sentence or two long.")


async def serve_model() -> None:
    from scripted_model import LocalModelServer

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with LocalModelServer(bench_responder) as server:
        print(server.base_url, flush=True)
        await stop.wait()


# --- the light edges -----------------------------------------------------------------------------


class MemoryHandler:
    """The edge's request handler with sandboxes in memory: a tool call answers at once."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.sandboxes: set[str] = set()
        self.made: set[str] = set()
        self.calls = 0
        self.refused = 0
        self.link: Link | None = None  # set once the link exists: its heartbeats report len(sandboxes)

    def _sandbox(self, session_id: str) -> bool:
        if session_id not in self.sandboxes:
            if len(self.sandboxes) >= self.capacity:
                self.refused += 1
                return False
            self.sandboxes.add(session_id)
            self.made.add(session_id)
            if self.link is not None:
                self.link.session.sandboxes_in_use = len(self.sandboxes)
        return True

    async def handle(self, request: Request) -> Outcome:
        op = request.op
        if isinstance(op, Destroy):
            existed = request.session_id in self.sandboxes
            self.sandboxes.discard(request.session_id)
            if self.link is not None:
                self.link.session.sandboxes_in_use = len(self.sandboxes)
            return Destroyed(existed=existed)
        if isinstance(op, Execute | Provision):
            reused = request.session_id in self.sandboxes
            if not self._sandbox(request.session_id):
                return Failure(ErrorCode.CAPACITY_EXHAUSTED, f"all {self.capacity} sandboxes in use")
            if isinstance(op, Provision):
                return Provisioned(sandbox_id=f"mem-{request.session_id}", image="memory", reused=reused)
            self.calls += 1
            return ToolResult.text(f"bench {op.tool} ran\n")
        return Failure(ErrorCode.INVALID_REQUEST, f"light edge: no {type(op).__name__}")

    def cancel(self, request_id: str) -> bool:
        return False


class LoopLag:
    """The longest this process's event loop was late for a 0.1 s timer: a starved edge process
    would miss heartbeats of its own, and the control plane would be blamed for them."""

    def __init__(self) -> None:
        self.max_s = 0.0

    async def run(self) -> None:
        while True:
            t0 = time.monotonic()
            await asyncio.sleep(0.1)
            self.max_s = max(self.max_s, time.monotonic() - t0 - 0.1)


async def run_edges(spec_path: Path) -> None:
    """Run the light edges of ``spec_path``; print ``connected N`` once all are up, then answer
    ``report`` lines on stdin with a JSON line; stop at ``stop`` or end of input."""
    from edge_agent.config import ConnectionConfig
    from edge_agent.connection import Dialer, Link
    from edge_agent.connection.dialer import Endpoint
    from edge_agent.identity import Identity
    from outpost_wire.frames import PROTOCOL_VERSION, Hello
    from outpost_wire.session import SessionConfig

    spec = json.loads(spec_path.read_text())
    config = ConnectionConfig(transport="grpc")  # the shipped heartbeat and backoff timings
    edges: list[tuple[Link, MemoryHandler, str]] = []
    tasks: list[asyncio.Task[None]] = []
    for entry in spec["edges"]:
        state_dir = Path(entry["state_dir"])
        identity = Identity.load(state_dir)
        endpoints = [Endpoint(tunnel_address=t, control_plane_url=u) for t, u in entry["endpoints"]]
        dialer = Dialer(
            identity=identity,
            config=config,
            tunnel_address=endpoints[0].tunnel_address,
            control_plane_url=endpoints[0].control_plane_url,
            more_endpoints=endpoints[1:],
            state_dir=state_dir,
            max_frame_bytes=SessionConfig().max_frame_bytes,
            remember=False,
        )
        handler = MemoryHandler(spec["capacity"])

        def hello(identity: Identity = identity, handler: MemoryHandler = handler) -> Hello:
            return Hello(
                edge_id=identity.edge_id,
                software_version="bench-light-edge",
                protocol_version=PROTOCOL_VERSION,
                capabilities=("provision", "destroy", "tool:bash"),
                policy_digest="sha256:bench",
                sandbox_capacity=handler.capacity,
                sandboxes_in_use=len(handler.sandboxes),
                environment_id=identity.environment_id,
            )

        link = Link(
            connect=dialer.connect,
            hello=hello,
            handler=handler,
            config=config,
            on_peer_drain=dialer.rotate,
            session_config=SessionConfig(
                heartbeat_interval_s=config.heartbeat_interval_s,
                heartbeat_timeout_s=config.heartbeat_timeout_s,
            ),
        )
        handler.link = link
        edges.append((link, handler, identity.edge_id))
        tasks.append(asyncio.create_task(link.run()))
        await asyncio.sleep(0)

    async def all_connected() -> None:
        await asyncio.gather(*(link.connected.wait() for link, _, _ in edges))

    lag = LoopLag()
    lag_task = asyncio.create_task(lag.run())
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(all_connected(), spec["connect_timeout_s"])
    print(f"connected {sum(link.connected.is_set() for link, _, _ in edges)}", flush=True)

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := (await reader.readline()).decode().strip():
        if line == "stop":
            break
        if line == "report":
            report = [
                {
                    "edge_id": edge_id,
                    "connected": link.connected.is_set(),
                    "connections": link.connections,
                    "control_plane": link.control_plane_id,
                    "sandboxes": len(handler.sandboxes),
                    "made": len(handler.made),
                    "calls": handler.calls,
                    "refused": handler.refused,
                }
                for link, handler, edge_id in edges
            ]
            print(json.dumps({"edges": report, "loop_lag_max_s": lag.max_s}), flush=True)
    await asyncio.gather(*(link.drain(0) for link, _, _ in edges), return_exceptions=True)
    for task in [*tasks, lag_task]:
        task.cancel()
    await asyncio.gather(*tasks, lag_task, return_exceptions=True)


# --- processes -----------------------------------------------------------------------------------


@dataclass
class Child:
    name: str
    proc: asyncio.subprocess.Process
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class Children:
    """Everything this bench started; ``stop_all`` ends each (SIGTERM, then SIGKILL)."""

    work: Path
    children: list[Child] = field(default_factory=list)

    async def start(
        self, name: str, argv: Sequence[str], *, env: Mapping[str, str], pipes: bool = False
    ) -> Child:
        log = self.work / f"{name}.log"
        out: IO[bytes] = log.open("ab")
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                cwd=ROOT,
                env={**env, "PYTHONUNBUFFERED": "1"},
                stdin=asyncio.subprocess.PIPE if pipes else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE if pipes else out,
                stderr=out,
                preexec_fn=_die_with_parent,
            )
        finally:
            out.close()
        child = Child(name, proc, log)
        self.children.append(child)
        return child

    async def stop_all(self) -> None:
        async def stop(child: Child) -> None:
            proc = child.proc
            if proc.returncode is not None:
                return
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()

        await asyncio.gather(*(stop(c) for c in reversed(self.children)), return_exceptions=True)


async def line_in_log(child: Child, prefix: str, timeout_s: float = 90.0) -> str:
    """The first line of ``child``'s log starting with ``prefix`` (waits for it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in child.log.read_text(errors="replace").splitlines():
            if line.startswith(prefix):
                return line
        if child.proc.returncode is not None:
            break
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{child.name} printed no line starting {prefix!r}; its log ends:\n{child.tail()}")


@dataclass
class Replica:
    child: Child
    url: str
    tunnel: str


async def start_replica(
    children: Children, index: int, args: argparse.Namespace, model_url: str, env: Mapping[str, str]
) -> Replica:
    config: dict[str, Any] = {
        "data_dir": str(children.work / "cp"),
        "http_port": 0,
        "tunnel_port": 0,
        "model_base_url": model_url,
        "stream_max_per_key": 2 * args.sessions + 100,
        "stream_max_total": 2 * args.sessions + 200,
        "http_limit_concurrency": 4 * args.sessions + 400,
        "drain_grace_s": 2.0,  # the bench stops replicas with nothing in flight
        "harness": {"follow_tunnels": True},
    }
    if args.store_url:
        config["store_url"] = args.replica_store_url
        if args.store_password_file is not None:
            config["store_password_file"] = str(args.store_password_file)
    path = children.work / f"replica{index}.yaml"
    path.write_text(yaml.safe_dump(config))
    argv = [
        sys.executable,
        "-m",
        "control_plane.cli",
        "serve",
        "--config",
        str(path),
        "--log-level",
        "warning",
    ]
    child = await children.start(f"replica{index}", argv, env={**env, "ANTHROPIC_API_KEY": "bench"})
    line = await line_in_log(child, "Outpost control plane ")
    # "Outpost control plane ID: API http://HOST:PORT, tunnel HOST:PORT"
    api = line.split(" API ", 1)[1].split(",", 1)[0]
    tunnel = line.rsplit(" tunnel ", 1)[1].strip()
    return Replica(child, api, tunnel)


async def idle_cpu_share(replicas: Sequence[Replica], window_s: float) -> float:
    """The replicas' summed CPU over ``window_s`` of wall time, as a share of one core."""
    pids = [r.child.pid for r in replicas]
    cpu0, t0 = sum(map(cpu_seconds, pids)), time.perf_counter()
    await asyncio.sleep(window_s)
    return (sum(map(cpu_seconds, pids)) - cpu0) / (time.perf_counter() - t0)


class HealthProbe(threading.Thread):
    """GET ``/healthz`` of every replica every 0.5 s, from a thread of its own (so this process's
    busy event loop does not delay it): how long a replica's event loop leaves a request waiting,
    e.g. a stall long enough to miss the edges' heartbeats."""

    def __init__(self, urls: Sequence[str]) -> None:
        super().__init__(name="bench-health-probe", daemon=True)
        self.urls = list(urls)
        self.latencies: list[float] = []  # seconds; a failed or timed-out probe counts its time
        self.failures = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        import httpx

        with httpx.Client(timeout=30) as http:
            while True:
                for url in self.urls:
                    t0 = time.perf_counter()
                    try:
                        http.get(f"{url}/healthz").raise_for_status()
                    except httpx.HTTPError:
                        self.failures += 1
                    self.latencies.append(time.perf_counter() - t0)
                if self.stopping.wait(0.5):
                    return

    def stop(self) -> None:
        self.stopping.set()
        self.join(60)


@contextlib.asynccontextmanager
async def fresh_database(args: argparse.Namespace) -> AsyncIterator[None]:
    """With a PostgreSQL ``--store-url``: a new database for this run (``CREATE DATABASE`` through
    that URL, whose role needs CREATEDB), in ``args.replica_store_url``; dropped at the end."""
    if not args.store_url:
        yield
        return
    import asyncpg

    password = args.store_password_file.read_text().strip() if args.store_password_file else None
    name = f"outpost_bench_{secrets.token_hex(4)}"
    conn = await asyncpg.connect(dsn=args.store_url, password=password, timeout=10)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    args.replica_store_url = urlunsplit(urlsplit(args.store_url)._replace(path=f"/{name}"))
    try:
        yield
    finally:
        conn = await asyncpg.connect(dsn=args.store_url, password=password, timeout=10)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()


# --- the edges, from this side -------------------------------------------------------------------


@dataclass
class EdgeProcess:
    child: Child
    count: int

    async def command(self, line: str) -> str:
        proc = self.child.proc
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(f"{line}\n".encode())
        await proc.stdin.drain()
        return (await asyncio.wait_for(proc.stdout.readline(), 120)).decode()


async def enroll_edges(
    args: argparse.Namespace, work: Path, replicas: Sequence[Replica], admin_key: str, env_id: str
) -> list[dict[str, Any]]:
    """Register N edges (one single-use token each), as ``outpost-edge register`` does."""
    import httpx

    from edge_agent.enroll import register

    sem = asyncio.Semaphore(16)
    headers = {"authorization": f"Bearer {admin_key}"}
    async with httpx.AsyncClient(base_url=replicas[0].url, headers=headers, timeout=60) as http:

        async def one(i: int) -> dict[str, Any]:
            async with sem:
                home = replicas[i % len(replicas)]
                r = await http.post(f"{home.url}/v1/environments/{env_id}/enrollment_tokens", json={})
                r.raise_for_status()
                token = r.json()
                state_dir = work / "edges" / f"e{i}"
                await register(
                    home.url,
                    token["token"],
                    state_dir,
                    name=f"bench-edge-{i}",
                    ca_fingerprint=token["ca_fingerprint"],
                )
            order = [replicas[(i + k) % len(replicas)] for k in range(len(replicas))]
            return {"state_dir": str(state_dir), "endpoints": [[r.tunnel, r.url] for r in order]}

        return list(await asyncio.gather(*(one(i) for i in range(args.edges))))


async def start_edges(
    children: Children, args: argparse.Namespace, specs: Sequence[dict[str, Any]], env: Mapping[str, str]
) -> tuple[list[EdgeProcess], int]:
    """Start the edge processes; returns them and how many edges connected."""
    processes: list[EdgeProcess] = []
    per = max(1, args.edges_per_process)
    for n, start in enumerate(range(0, len(specs), per)):
        chunk = list(specs[start : start + per])
        spec_path = children.work / f"edges{n}.json"
        spec_path.write_text(
            json.dumps({"edges": chunk, "capacity": args.edge_capacity, "connect_timeout_s": 120})
        )
        argv = [sys.executable, str(Path(__file__).resolve()), "--role", "edges", "--spec", str(spec_path)]
        child = await children.start(f"edges{n}", argv, env=env, pipes=True)
        processes.append(EdgeProcess(child, len(chunk)))
    connected = 0
    for process in processes:
        assert process.child.proc.stdout is not None
        line = (await asyncio.wait_for(process.child.proc.stdout.readline(), 180)).decode()
        if not line.startswith("connected "):
            raise RuntimeError(f"{process.child.name} did not start; its log ends:\n{process.child.tail()}")
        connected += int(line.split()[1])
    return processes, connected


async def edge_report(processes: Sequence[EdgeProcess]) -> tuple[list[dict[str, Any]], float]:
    """Every edge's figures, and the edge processes' longest event-loop lag (seconds)."""
    report: list[dict[str, Any]] = []
    lag = 0.0
    for process in processes:
        answer = json.loads(await process.command("report"))
        report.extend(answer["edges"])
        lag = max(lag, answer["loop_lag_max_s"])
    return report, lag


# --- the sessions --------------------------------------------------------------------------------


def _received_delay_ms(event: Any) -> float | None:
    processed = getattr(event, "processed_at", None)
    if isinstance(processed, str):
        processed = datetime.fromisoformat(processed.replace("Z", "+00:00"))
    if not isinstance(processed, datetime):
        return None
    return (time.time() - processed.timestamp()) * 1000


@dataclass
class Stream:
    """One SSE stream of a session, opened with the SDK: delays and ids of the events it got."""

    client: Any
    session_id: str
    record: bool = True
    delays: list[float] = field(default_factory=list)
    ids: set[str] = field(default_factory=set)
    idle: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    events: list[Any] = field(default_factory=list)
    task: asyncio.Task[None] | None = None
    error: str | None = None  # why the stream ended, if it did before the bench closed it

    async def run(self, opened: asyncio.Event) -> None:
        try:
            await self._read(opened)
        except Exception as exc:  # a stream that ends early: counted (and turns on it time out)
            self.error = f"{type(exc).__name__}: {exc}"
        else:
            self.error = "the stream ended"

    async def _read(self, opened: asyncio.Event) -> None:
        stream = await self.client.beta.sessions.events.stream(self.session_id)
        opened.set()
        async for event in stream:
            if event.type == "ping" or not getattr(event, "id", None):
                continue
            if self.record:
                delay = _received_delay_ms(event)
                if delay is not None:
                    self.delays.append(delay)
            self.ids.add(event.id)
            self.events.append(event)
            if event.type == "session.status_idle":
                self.idle.put_nowait(event)

    async def open(self) -> None:
        opened = asyncio.Event()
        self.task = asyncio.create_task(self.run(opened))
        waiter = asyncio.create_task(opened.wait())
        await asyncio.wait([self.task, waiter], timeout=60, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if not opened.is_set():
            self.task.cancel()
            raise RuntimeError(f"stream of {self.session_id} did not open within 60 s: {self.error}")


@dataclass
class BenchSession:
    id: str
    client: Any
    home: int
    stream: Stream
    cross: Stream | None = None


@dataclass
class TurnResult:
    kind: str
    seconds: float
    ok: bool
    tool_errors: int = 0
    why: str = ""


async def turn(session: BenchSession, kind: str, timeout_s: float) -> TurnResult:
    text = f"{TOOL_PREFIX} run echo" if kind == "tool" else "text: answer in a sentence"
    while not session.stream.idle.empty():  # a late idle of a turn that timed out
        session.stream.idle.get_nowait()
    first = len(session.stream.events)
    t0 = time.perf_counter()
    try:
        await session.client.beta.sessions.events.send(
            session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": text}]}]
        )
        idle = await asyncio.wait_for(session.stream.idle.get(), timeout_s)
    except TimeoutError:
        return TurnResult(kind, time.perf_counter() - t0, False, why="no idle in time")
    except Exception as exc:  # any failure of the SDK call: a failed turn
        return TurnResult(kind, time.perf_counter() - t0, False, why=f"{type(exc).__name__}: {exc}")
    seconds = time.perf_counter() - t0
    events = session.stream.events[first:]
    stop = getattr(getattr(idle, "stop_reason", None), "type", None)
    errors = [e for e in events if e.type == "session.error"]
    tool_errors = sum(1 for e in events if e.type == "agent.tool_result" and getattr(e, "is_error", False))
    tool_results = sum(1 for e in events if e.type == "agent.tool_result")
    ok = stop == "end_turn" and not errors and (kind == "text" or tool_results == 1)
    why = "" if ok else f"stop {stop}, {tool_results} tool results, {len(errors)} session.error"
    for e in errors[:1]:
        error = getattr(e, "error", None)
        why += f": {getattr(error, 'type', '?')}: {str(getattr(error, 'message', ''))[:300]}"
    return TurnResult(kind, seconds, ok, tool_errors, why)


def turn_kind(args: argparse.Namespace, session_index: int, turn_index: int) -> str:
    if args.turn_kinds != "mixed":
        return str(args.turn_kinds)
    return "tool" if (session_index + turn_index) % 2 == 0 else "text"


async def drive(
    args: argparse.Namespace,
    replicas: Sequence[Replica],
    clients: Sequence[Sequence[Any]],
    agent_id: str,
    env_id: str,
    others: Mapping[str, Sequence[int]],
) -> dict[str, Any]:
    """Create the sessions, run the warm-up and the measured turns; ``others``: the pids of the
    rest of the bench by role (driver, model, edges), whose CPU over the measured turns is shown
    too, to tell where a bottleneck is."""
    sem = asyncio.Semaphore(32)
    r = len(replicas)

    async def new_session(i: int) -> BenchSession:
        home = i % r
        client = clients[home][(i // r) % len(clients[home])]
        async with sem:
            created = await client.beta.sessions.create(agent=agent_id, environment_id=env_id)
            stream = Stream(client, created.id, record=False)
            await stream.open()
            cross = None
            if r > 1 and i < args.cross_streams:
                other = clients[(home + 1) % r][(i // r) % len(clients[(home + 1) % r])]
                cross = Stream(other, created.id, record=False)
                await cross.open()
        return BenchSession(created.id, client, home, stream, cross)

    probe_health = HealthProbe([rep.url for rep in replicas])
    probe_health.start()
    sessions = list(await asyncio.gather(*(new_session(i) for i in range(args.sessions))))
    warm = await asyncio.gather(*(turn(s, "text", args.turn_timeout_s) for s in sessions))
    for s in sessions:
        s.stream.record = True
        if s.cross is not None:
            s.cross.record = True
    pids = [rep.child.pid for rep in replicas]
    results: list[TurnResult] = []

    async def run(i: int, session: BenchSession) -> None:
        for j in range(args.turns):
            results.append(await turn(session, turn_kind(args, i, j), args.turn_timeout_s))

    others0 = {role: sum(map(cpu_seconds, p)) for role, p in others.items()}
    cpu0, t0 = sum(map(cpu_seconds, pids)), time.perf_counter()
    await asyncio.gather(*(run(i, s) for i, s in enumerate(sessions)))
    cpu1, t1 = sum(map(cpu_seconds, pids)), time.perf_counter()
    await asyncio.to_thread(probe_health.stop)
    others_share = {
        role: (sum(map(cpu_seconds, p)) - others0[role]) / (t1 - t0) for role, p in others.items()
    }
    await asyncio.sleep(1.0)  # let the second streams catch up
    crossed = [s for s in sessions if s.cross is not None]
    load_same = [d for s in crossed for d in s.stream.delays]
    load_cross = [d for s in crossed if s.cross is not None for d in s.cross.delays]
    # At rest: one turn at a time on the sessions with a second stream.
    for s in crossed:
        s.stream.delays.clear()
        if s.cross is not None:
            s.cross.delays.clear()
    probe: list[TurnResult] = []
    for n in range(args.probe_turns if crossed else 0):
        probe.append(await turn(crossed[n % len(crossed)], "tool" if n % 2 else "text", args.turn_timeout_s))
    await asyncio.sleep(1.0)
    stream_errors = sorted(
        {st.error for st in [s.stream for s in sessions] + [s.cross for s in crossed] if st and st.error}
    )
    lost = sum(len(s.stream.ids - s.cross.ids) for s in crossed if s.cross is not None)
    streams = [s.stream for s in sessions] + [s.cross for s in crossed if s.cross is not None]
    for stream in streams:
        if stream.task is not None:
            stream.task.cancel()
    await asyncio.gather(*(st.task for st in streams if st.task is not None), return_exceptions=True)
    return {
        "warmup_failed": sum(not w.ok for w in warm),
        "results": results,
        "probe_failed": sum(not p.ok for p in probe),
        "seconds": t1 - t0,
        "cpu_s": cpu1 - cpu0,
        "others_share": others_share,
        "same_delays": load_same,
        "cross_delays": load_cross,
        "rest_same_delays": [d for s in crossed for d in s.stream.delays],
        "rest_cross_delays": [d for s in crossed if s.cross is not None for d in s.cross.delays],
        "cross_lost": lost,
        "healthz_ms": [x * 1000 for x in probe_health.latencies],
        "healthz_failures": probe_health.failures,
        "stream_errors": stream_errors,
        "cross_sessions": len(crossed),
    }


# --- the whole bench -----------------------------------------------------------------------------


async def bench(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import anthropic

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    children = Children(work)
    clients: list[list[Any]] = []
    try:
        model = await children.start(
            "model", [sys.executable, str(Path(__file__).resolve()), "--role", "model"], env=env
        )
        model_url = (await line_in_log(model, "http://")).strip()
        replicas = [await start_replica(children, 0, args, model_url, env)]  # makes the store, CA, key
        replicas += await asyncio.gather(
            *(start_replica(children, i, args, model_url, env) for i in range(1, args.replicas))
        )
        admin_key = (work / "cp" / "admin-api-key").read_text().strip()
        per_replica = max(1, math.ceil(args.sessions / args.replicas / 50))  # one SDK client per 50 sessions
        clients = [
            [
                anthropic.AsyncAnthropic(base_url=rep.url, api_key=admin_key, max_retries=2, timeout=300)
                for _ in range(per_replica)
            ]
            for rep in replicas
        ]
        environment = await clients[0][0].beta.environments.create(
            name="bench-scale", config={"type": "self_hosted"}
        )
        agent = await clients[0][0].beta.agents.create(
            name="bench-scale", model="claude-sonnet-4-5", tools=[{"type": "agent_toolset_20260401"}]
        )
        log(f"{len(replicas)} replica(s) up; idle window without edges ({args.idle_window_s:.0f} s)")
        idle_0 = await idle_cpu_share(replicas, args.idle_window_s)

        t_enroll = time.perf_counter()
        specs = await enroll_edges(args, work, replicas, admin_key, environment.id)
        enroll_s = time.perf_counter() - t_enroll
        edge_procs, connected = await start_edges(children, args, specs, env)
        log(f"{args.edges} edges enrolled in {enroll_s:.1f} s, {connected} connected")
        await asyncio.sleep(min(5.0, args.idle_window_s))  # handshakes and the first heartbeats settle
        idle_n = await idle_cpu_share(replicas, args.idle_window_s)

        log(f"{args.sessions} sessions, a warm-up turn, then {args.turns} measured turns each")
        others = {
            "driver": [os.getpid()],
            "model": [model.pid],
            "edges": [p.child.pid for p in edge_procs],
        }
        driven = await drive(args, replicas, clients, agent.id, environment.id, others)
        edges, edge_lag = await edge_report(edge_procs)
        rss = [rss_mb(rep.child.pid) for rep in replicas]
        return {
            "idle_0": idle_0,
            "idle_n": idle_n,
            "connected_at_start": connected,
            "edges": edges,
            "edge_loop_lag_s": edge_lag,
            "rss": rss,
            "enroll_s": enroll_s,
            **driven,
        }
    finally:
        for group in clients:
            for client in group:
                with contextlib.suppress(Exception):
                    await client.close()
        await children.stop_all()


def log(message: str) -> None:
    print(f"# {message}", file=sys.stderr, flush=True)


def summarize(args: argparse.Namespace, out: dict[str, Any]) -> tuple[list[str], dict[str, Any], bool]:
    results: list[TurnResult] = out["results"]
    ok = [r for r in results if r.ok]
    failed = [r for r in results if not r.ok]
    turns = len(results)
    text = [r.seconds * 1000 for r in ok if r.kind == "text"]
    tool = [r.seconds * 1000 for r in ok if r.kind == "tool"]
    every = text + tool
    edges: list[dict[str, Any]] = out["edges"]
    made = [e["made"] for e in edges] or [0]
    reconnects = sum(max(0, e["connections"] - 1) for e in edges)
    disconnected = sum(not e["connected"] for e in edges)
    refused = sum(e["refused"] for e in edges)
    tool_errors = sum(r.tool_errors for r in results)
    per_edge = (out["idle_n"] - out["idle_0"]) / args.edges if args.edges else math.nan
    store = "postgresql" if args.store_url else "sqlite"
    figures: dict[str, Any] = {
        "sessions": args.sessions,
        "edges": args.edges,
        "replicas": args.replicas,
        "store": store,
        "turns": turns,
        "seconds": out["seconds"],
        "turns_per_s": turns / out["seconds"],
        "cpu_ms_per_turn": out["cpu_s"] * 1000 / max(1, turns),
        "cpu_share": out["cpu_s"] / out["seconds"],
        "others_share": out["others_share"],
        "p50_ms": pct(every, 50),
        "p95_ms": pct(every, 95),
        "text_p50_ms": pct(text, 50),
        "text_p95_ms": pct(text, 95),
        "tool_p50_ms": pct(tool, 50),
        "tool_p95_ms": pct(tool, 95),
        "rss_mb": [r[0] for r in out["rss"]],
        "rss_peak_mb": [r[1] for r in out["rss"]],
        "same_stream_p50_ms": pct(out["same_delays"], 50),
        "same_stream_p95_ms": pct(out["same_delays"], 95),
        "cross_stream_p50_ms": pct(out["cross_delays"], 50),
        "cross_stream_p95_ms": pct(out["cross_delays"], 95),
        "cross_stream_events": len(out["cross_delays"]),
        "rest_same_stream_p50_ms": pct(out["rest_same_delays"], 50),
        "rest_same_stream_p95_ms": pct(out["rest_same_delays"], 95),
        "rest_cross_stream_p50_ms": pct(out["rest_cross_delays"], 50),
        "rest_cross_stream_p95_ms": pct(out["rest_cross_delays"], 95),
        "rest_cross_stream_events": len(out["rest_cross_delays"]),
        "failed_probe_turns": out["probe_failed"],
        "cross_stream_lost": out["cross_lost"],
        "sandboxes_min": min(made),
        "sandboxes_max": max(made),
        "sandboxes_total": sum(made),
        "edges_per_replica": sorted(
            collections.Counter(e["control_plane"] for e in edges if e["connected"]).values(), reverse=True
        ),
        "edge_capacity": args.edge_capacity,
        "healthz_p50_ms": pct(out["healthz_ms"], 50),
        "healthz_max_ms": max(out["healthz_ms"], default=math.nan),
        "healthz_failures": out["healthz_failures"],
        "heartbeat_idle_0_share": out["idle_0"],
        "heartbeat_idle_n_share": out["idle_n"],
        "heartbeat_per_edge_share": per_edge,
        "failed_turns": len(failed),
        "failed_warmup": out["warmup_failed"],
        "failure_examples": sorted({r.why for r in failed})[:5],
        "stream_errors": out["stream_errors"],
        "tool_errors": tool_errors,
        "refused_sandboxes": refused,
        "edge_reconnects": reconnects,
        "edges_disconnected": disconnected,
        "edges_connected_at_start": out["connected_at_start"],
        "edge_process_loop_lag_max_s": out["edge_loop_lag_s"],
    }
    f = figures
    rss = "  ".join(f"r{i} {cur:.0f} MB (peak {peak:.0f})" for i, (cur, peak) in enumerate(out["rss"]))
    if args.replicas > 1:
        load = (
            f"other replica p50 {f['cross_stream_p50_ms']:.0f} p95 {f['cross_stream_p95_ms']:.0f} ms | "
            f"same replica p50 {f['same_stream_p50_ms']:.0f} p95 {f['same_stream_p95_ms']:.0f} ms  "
            f"({f['cross_stream_events']} events on {out['cross_sessions']} sessions, during the turns above)"
        )
        rest = (
            f"other replica p50 {f['rest_cross_stream_p50_ms']:.0f} "
            f"p95 {f['rest_cross_stream_p95_ms']:.0f} ms | "
            f"same replica p50 {f['rest_same_stream_p50_ms']:.0f} p95 {f['rest_same_stream_p95_ms']:.0f} ms  "
            f"({f['rest_cross_stream_events']} events, {args.probe_turns} turns one at a time)"
        )
    else:
        load = rest = "n/a (one replica)"
    lines = [
        f"bench_scale: K={args.sessions} sessions x {args.turns} turns ({args.turn_kinds}), "
        f"N={args.edges} edges "
        f"(capacity {args.edge_capacity}), R={args.replicas} replicas, store {store}",
        f"  turns/s               {f['turns_per_s']:.1f}  ({turns} turns in {f['seconds']:.1f} s)",
        f"  CPU per turn          {f['cpu_ms_per_turn']:.2f} ms  (sum of the replicas; "
        f"{100 * f['cpu_share']:.0f}% of a core; meanwhile "
        + ", ".join(f"{role} {100 * share:.0f}%" for role, share in out["others_share"].items())
        + ")",
        f"  send→idle             all p50 {f['p50_ms']:.0f} p95 {f['p95_ms']:.0f} ms | text p50 "
        f"{f['text_p50_ms']:.0f} p95 {f['text_p95_ms']:.0f} | tool p50 {f['tool_p50_ms']:.0f} "
        f"p95 {f['tool_p95_ms']:.0f}",
        f"  RSS per replica       {rss}",
        f"  stream delay (load)   {load}",
        f"  stream delay (rest)   {rest}",
        f"  sandboxes per edge    min {f['sandboxes_min']} max {f['sandboxes_max']} spread "
        f"{f['sandboxes_max'] - f['sandboxes_min']}  ({f['sandboxes_total']} on {len(edges)} edges, "
        f"{refused} refused; edges per replica {'/'.join(map(str, f['edges_per_replica']))})",
        f"  /healthz latency      p50 {f['healthz_p50_ms']:.0f} ms, max {f['healthz_max_ms']:.0f} ms, "
        f"{f['healthz_failures']} failed  (every replica every 0.5 s, sessions created to last turn)",
        f"  heartbeat cost        {100 * f['heartbeat_idle_0_share']:.1f}% of a core with 0 edges, "
        f"{100 * f['heartbeat_idle_n_share']:.1f}% with {args.edges}: {100 * per_edge:.3f}% per edge",
        f"  problems              {len(failed)} failed turns, {out['warmup_failed']} failed warm-ups, "
        f"{out['probe_failed']} failed rest turns, "
        f"{tool_errors} tool errors, {f['cross_stream_lost']} events missed by a second stream, "
        f"{len(out['stream_errors'])} kinds of stream error, "
        f"{out['connected_at_start']}/{args.edges} edges connected at start, {reconnects} edge reconnects, "
        f"{disconnected} edges down at the end (edge processes' loop lag at most "
        f"{out['edge_loop_lag_s']:.1f} s)",
    ]
    for why in figures["failure_examples"]:
        lines.append(f"    failed turn: {why}")
    for why in out["stream_errors"][:5]:
        lines.append(f"    stream ended: {why}")
    healthy = (
        not failed
        and not out["warmup_failed"]
        and not out["probe_failed"]
        and not out["stream_errors"]
        and not tool_errors
        and not f["cross_stream_lost"]
        and out["connected_at_start"] == args.edges
        and not reconnects
        and not disconnected
    )
    return lines, figures, healthy


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", "-K", type=int, default=200, help="concurrent sessions (default 200)")
    parser.add_argument("--edges", "-N", type=int, default=50, help="light edges (default 50)")
    parser.add_argument("--replicas", "-R", type=int, default=2, help="control-plane replicas (default 2)")
    parser.add_argument("--turns", type=int, default=3, help="measured turns per session (default 3)")
    parser.add_argument(
        "--turn-kinds", choices=("mixed", "text", "tool"), default="mixed", help="default: alternate"
    )
    parser.add_argument(
        "--store-url",
        help="PostgreSQL (postgresql://user@host:port/database): the replicas share a new database made "
        "through this URL for the run and dropped after it; default: the data dir's SQLite file",
    )
    parser.add_argument(
        "--store-password-file", type=Path, help="the PostgreSQL role's password (never in the URL or argv)"
    )
    parser.add_argument(
        "--edge-capacity", type=int, help="sandboxes per edge (default max(8, 1.5 K / N), so none is refused)"
    )
    parser.add_argument("--edges-per-process", type=int, default=250, help="light edges per process")
    parser.add_argument(
        "--cross-streams", type=int, default=50, help="sessions with a second stream on another replica"
    )
    parser.add_argument(
        "--idle-window-s", type=float, default=10.0, help="heartbeat-cost window (default 10)"
    )
    parser.add_argument(
        "--probe-turns", type=int, default=20, help="turns one at a time for the stream delay at rest"
    )
    parser.add_argument("--turn-timeout-s", type=float, default=300.0)
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (the daemons' logs)")
    parser.add_argument(
        "--role", choices=("bench", "model", "edges"), default="bench", help=argparse.SUPPRESS
    )
    parser.add_argument("--spec", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.edge_capacity is None:
        args.edge_capacity = max(8, math.ceil(1.5 * args.sessions / max(1, args.edges)))
    if args.role == "bench" and (args.sessions < 1 or args.edges < 1 or args.replicas < 1 or args.turns < 1):
        parser.error("--sessions, --edges, --replicas and --turns must be at least 1")
    return args


async def main_async(args: argparse.Namespace) -> int:
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # a socket per stream, edge and client
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))
    work = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    try:
        async with fresh_database(args):
            out = await bench(args, work)
    finally:
        if args.keep:
            print(f"bench_scale: kept {work} (logs, configs, the SQLite store)", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    lines, figures, healthy = summarize(args, out)
    print("\n".join(lines), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0 if healthy else 1


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.role == "model":
        asyncio.run(serve_model())
        return 0
    if args.role == "edges":
        import logging

        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        asyncio.run(run_edges(args.spec))
        return 0
    try:
        return asyncio.run(main_async(args))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("bench_scale: interrupted; everything it started is stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
