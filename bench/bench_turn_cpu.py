"""Control-plane CPU per brain-only turn, and turns per second, on one process.

    python bench/bench_turn_cpu.py [--sessions 200] [--turns 5] [--profile FILE] [--cp-arg=ARG ...]

Three processes on loopback, so that the control plane's CPU time is its own:

* ``outpost-control serve`` (SQLite store, no edge: the turns are text only, no sandbox);
* the local Messages-API server (``python -m scripted_model.local_server --script echo``);
* this process: K sessions driven concurrently by the official async ``anthropic`` SDK. Each
  session keeps one event stream open and, ``--turns`` times, sends a ``user.message`` and waits
  for ``session.status_idle`` on its stream.

One warm-up turn per session is not measured. Over the measured turns it prints turns/s, the
control plane's CPU time (user + system, all threads, from ``/proc/PID/stat``) per turn and as a
share of one core, and send→idle p50/p95. ``--profile FILE`` records the control plane with
``py-spy`` (if installed) over the measured window, as collapsed stacks (``FILE``) plus a summary of
the hottest frames. ``--cp-arg`` adds ``serve`` arguments and ``--cp-env`` environment variables of
the control-plane process (e.g. ``--cp-arg=--event-loop=asyncio``, for a before/after comparison);
``--cp-root DIR`` runs the control plane from another source tree (e.g. ``git archive HEAD`` unpacked
in DIR: the code before a change); ``--baseline DIR`` measures that tree and this one in the same
run, alternating ``--rounds`` times, and prints the medians side by side with their ratio.
``--pin`` puts the control plane alone on the first core and the clients and model server on the
others, so that they do not take its core (on 2 cores the clients need about one core at 150
turns/s). Everything it creates is removed.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anthropic
import yaml

ROOT = Path(__file__).resolve().parent.parent
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (every thread), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime (fields 14 and 15)


def first_line(proc: subprocess.Popen[str], pattern: str, timeout_s: float = 60.0) -> re.Match[str]:
    """Read ``proc``'s stdout until a line matches ``pattern``."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"process exited before printing {pattern!r} (exit {proc.wait()})")
        found = re.search(pattern, line)
        if found:
            return found
    raise RuntimeError(f"no line matching {pattern!r} within {timeout_s} s")


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Session:
    """One session: its event stream, and a queue of the idles seen on it."""

    def __init__(self, client: anthropic.AsyncAnthropic, session_id: str) -> None:
        self.client = client
        self.id = session_id
        self.idle: asyncio.Queue[None] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None

    async def watch(self, opened: asyncio.Event) -> None:
        stream = await self.client.beta.sessions.events.stream(self.id)
        opened.set()
        async for event in stream:
            if event.type == "session.status_idle":
                self.idle.put_nowait(None)

    async def turn(self, text: str) -> float:
        t0 = time.perf_counter()
        await self.client.beta.sessions.events.send(
            self.id, events=[{"type": "user.message", "content": [{"type": "text", "text": text}]}]
        )
        await asyncio.wait_for(self.idle.get(), 120)
        return time.perf_counter() - t0


async def drive(args: argparse.Namespace, api_url: str, admin_key: str, cp_pid: int) -> dict[str, Any]:
    # One SDK client per 50 sessions: each has its own connection pool, as separate callers would.
    clients = [
        anthropic.AsyncAnthropic(base_url=api_url, api_key=admin_key, max_retries=2, timeout=120)
        for _ in range(max(1, args.sessions // 50))
    ]
    env = await clients[0].beta.environments.create(name="bench-turn-cpu", config={"type": "self_hosted"})
    agent = await clients[0].beta.agents.create(name="bench-turn-cpu", model="claude-sonnet-4-5")
    sem = asyncio.Semaphore(32)

    async def new_session(i: int) -> Session:
        async with sem:
            client = clients[i % len(clients)]
            created = await client.beta.sessions.create(agent=agent.id, environment_id=env.id)
            session = Session(client, created.id)
            opened = asyncio.Event()
            session.task = asyncio.create_task(session.watch(opened))
            await asyncio.wait_for(opened.wait(), 60)
            return session

    sessions = await asyncio.gather(*(new_session(i) for i in range(args.sessions)))
    prompt = "hello from the bench: please answer this message with a short sentence or two"
    await asyncio.gather(*(s.turn(prompt) for s in sessions))  # warm-up

    profiler: subprocess.Popen[str] | None = None
    if args.profile is not None:
        py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        profiler = subprocess.Popen(
            [py_spy, "record", "--pid", str(cp_pid), "--format", "raw", "--rate", "200",
             "--output", str(args.profile), "--nonblocking"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        await asyncio.sleep(1.0)
    latencies: list[float] = []

    async def run(session: Session) -> None:
        for _ in range(args.turns):
            latencies.append(await session.turn(prompt))

    cpu0, t0 = cpu_seconds(cp_pid), time.perf_counter()
    await asyncio.gather(*(run(s) for s in sessions))
    cpu1, t1 = cpu_seconds(cp_pid), time.perf_counter()
    if profiler is not None:
        profiler.send_signal(signal.SIGINT)
        profiler.wait(60)
    for s in sessions:
        assert s.task is not None
        s.task.cancel()
    await asyncio.gather(*(s.task for s in sessions if s.task is not None), return_exceptions=True)
    for client in clients:
        await client.close()
    turns = len(latencies)
    return {
        "turns": turns,
        "seconds": t1 - t0,
        "turns_per_s": turns / (t1 - t0),
        "cpu_ms_per_turn": (cpu1 - cpu0) * 1000 / turns,
        "cpu_share": (cpu1 - cpu0) / (t1 - t0),
        "p50_ms": pct(latencies, 50) * 1000,
        "p95_ms": pct(latencies, 95) * 1000,
    }


def summarize_profile(path: Path, top: int = 25) -> None:
    """Print the frames with the most samples (self and inclusive) from py-spy's collapsed stacks."""
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [re.sub(r"\s*\(/[^)]*?/(site-packages|work/main)/", " (", f) for f in stack.split(";")]
        for frame in set(frames):
            inclusive[frame] += n
        own[frames[-1]] += n
    print(f"\nprofile: {total} samples ({path})")
    print("  inclusive:")
    for frame, n in inclusive.most_common(top):
        print(f"    {100 * n / total:5.1f}%  {frame}")
    print("  self:")
    for frame, n in own.most_common(top):
        print(f"    {100 * n / total:5.1f}%  {frame}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=200, help="concurrent sessions (default 200)")
    parser.add_argument("--turns", type=int, default=5, help="measured turns per session (default 5)")
    parser.add_argument(
        "--pin",
        action="store_true",
        help="the control plane alone on the first core, the clients and the model server on the others",
    )
    parser.add_argument("--profile", type=Path, help="record the control plane with py-spy into FILE")
    parser.add_argument(
        "--cp-env", action="append", default=[], metavar="KEY=VALUE", help="environment of the control plane"
    )
    parser.add_argument(
        "--cp-root", type=Path, default=ROOT, help="run the control plane from this source tree (a baseline)"
    )
    parser.add_argument(
        "--cp-arg", action="append", default=[], metavar="ARG", help="more `serve` arguments (--cp-arg=--x)"
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="DIR",
        help="also measure the control plane of this tree (e.g. the last release, unpacked), in the "
        "same run, alternating with --cp-root, and print both with their ratio",
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="measurements per tree (alternating with --baseline; default 1)"
    )
    args = parser.parse_args()
    pin_cp: list[str] = []
    if args.pin:
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) < 2:
            parser.error("--pin needs at least two cores")
        pin_cp = ["taskset", "-c", str(cores[0])]
        os.sched_setaffinity(0, cores[1:])  # this process and the model server (started below)
    trees = [("baseline", args.baseline)] if args.baseline is not None else []
    trees.append(("this tree" if args.baseline is not None else "", args.cp_root))
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in trees}
    for _ in range(max(1, args.rounds)):
        for name, root in trees:
            result = measure(args, root, pin_cp)
            results[name].append(result)
            print(f"{name + ': ' if name else ''}{describe(args, result)}", flush=True)
    if args.baseline is not None:
        base, this = (_median(results[name]) for name, _ in trees)
        print(
            f"median of {max(1, args.rounds)}: CPU per turn {base['cpu_ms_per_turn']:.2f} → "
            f"{this['cpu_ms_per_turn']:.2f} ms ({this['cpu_ms_per_turn'] / base['cpu_ms_per_turn']:.2f}x), "
            f"turns/s {base['turns_per_s']:.0f} → {this['turns_per_s']:.0f} "
            f"({this['turns_per_s'] / base['turns_per_s']:.2f}x)"
        )
    if args.profile is not None and args.profile.exists():
        summarize_profile(args.profile)


def _median(runs: list[dict[str, Any]]) -> dict[str, float]:
    return {key: statistics.median(run[key] for run in runs) for key in ("cpu_ms_per_turn", "turns_per_s")}


def describe(args: argparse.Namespace, result: dict[str, Any]) -> str:
    return (
        f"sessions {args.sessions}, turns {result['turns']} in {result['seconds']:.1f} s: "
        f"{result['turns_per_s']:.1f} turns/s, control-plane CPU {result['cpu_ms_per_turn']:.2f} ms/turn "
        f"({100 * result['cpu_share']:.0f}% of a core), send→idle p50 {result['p50_ms']:.0f} ms "
        f"p95 {result['p95_ms']:.0f} ms"
    )


def measure(args: argparse.Namespace, cp_root: Path, pin_cp: list[str]) -> dict[str, Any]:
    """One control plane (from ``cp_root``) and one model server, driven by ``drive``."""
    with tempfile.TemporaryDirectory(prefix="bench-turn-cpu-") as tmp:
        work = Path(tmp)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        model = subprocess.Popen(
            [sys.executable, "-m", "scripted_model.local_server", "--port", "0", "--script", "echo",
             "--keep-alive-s", "75"],
            stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT,
        )  # fmt: skip
        cp: subprocess.Popen[str] | None = None
        try:
            model_url = first_line(model, r"^(http://\S+)").group(1)
            config = work / "control.yaml"
            config.write_text(
                yaml.safe_dump(
                    {
                        "data_dir": str(work / "cp"),
                        "http_port": 0,
                        "tunnel_port": 0,
                        "model_base_url": model_url,
                        "stream_max_per_key": args.sessions + 50,
                        "stream_max_total": args.sessions + 100,
                        "http_limit_concurrency": 4 * args.sessions + 200,
                        # Idle connections between turns stay open (as with a real model endpoint and
                        # SDK clients) even when a loaded machine stretches turns past 5 s.
                        "http_timeout_keep_alive_s": 75,
                        # No edge: text-only turns need no sandbox; do not try to warm one.
                        "harness": {"speculative_provision": False},
                    }
                )
            )
            cp_env = {**env, "PYTHONPATH": str(cp_root), "ANTHROPIC_API_KEY": "bench"}
            for pair in args.cp_env:
                key, _, value = pair.partition("=")
                cp_env[key] = value
            cp = subprocess.Popen(
                [*pin_cp, sys.executable, "-m", "control_plane.cli", "serve", "--config", str(config),
                 "--log-level", "warning", *args.cp_arg],
                stdout=subprocess.PIPE, text=True, env=cp_env, cwd=cp_root,
            )  # fmt: skip
            api_url = first_line(cp, r"API (http://\S+),").group(1)
            key_path = first_line(cp, r"admin API key: (\S+)").group(1)
            admin_key = Path(key_path).read_text().strip()
            return asyncio.run(drive(args, api_url, admin_key, cp.pid))
        finally:
            if cp is not None:
                stop(cp)
            stop(model)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
