"""Both daemons on their shipped defaults, started and enrolled the way an operator does it.

Every other end-to-end test tunes heartbeats, backoff or grace periods to run fast; this one sets
no timing at all, only addresses, directories and the transport: ``--data-dir`` and
``--http``/``--tunnel`` on port 0 for the control plane; each edge's ``state_dir`` and
``connection.transport`` (``grpc`` for one, ``websocket`` for the other: ``auto`` would move a
gRPC edge whose path went silent onto the WebSocket tunnel); the gRPC edge dials through a relay so
the test can take its network path away and keeps the default ``/readyz`` address, 127.0.0.1:9464,
so the WebSocket edge's ``observability.listen`` is another free port. This test caught the timers
that did not follow the session: on the defaults an idle tunnel dropped every 7.5 s.

One control plane (``outpost-control serve``) and two edges (``outpost-edge run``), all
subprocesses, enrolled with ``outpost-control environments create``, ``tokens create`` and
``outpost-edge register``:

* idle for two minutes: exactly one handshake per edge (counted in both daemons' logs) and each
  edge's ``/readyz`` ready every time it is polled (once a second);
* then the gRPC edge's path goes silent (no FIN, no RST): the edge's ``/readyz`` turns within the
  documented 10 s and the control plane drops the edge within its heartbeat timeout, while the
  WebSocket edge stays up; when the path comes back the edge is ready again within 10 s.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import docker
import httpx
import pytest
import yaml

from tests.e2e.relay import SilentRelay

pytestmark = pytest.mark.docker

BIN = Path(sys.executable).parent
IDLE_S = 120.0
POLL_S = 1.0
START_S = 60.0  # start-up of a daemon on a loaded machine (not a property under test)
EDGE_DROP_S = 10.0  # documented: /readyz turns within 10 s of a silent partition
EDGE_BACK_S = 10.0  # documented: /readyz comes back within 10 s of the control plane's return
# Documented: the control plane drops an edge after heartbeat_timeout_s (9 s) without a frame from
# it; its last frame came at most one heartbeat interval before the path went silent, so the drop
# comes within 9 s of it. The extra 3 s are for polling the log on a loaded machine.
CP_DROP_S = 9.0 + 3.0
DEFAULT_READYZ = "http://127.0.0.1:9464/readyz"

# What the daemons log: one line per completed handshake on each side, and the drops.
EDGE_HANDSHAKE = "tunnel up to control plane"
EDGE_DROP = "no heartbeat from the control plane; dropping the tunnel"


def _cp_handshake(edge_id: str) -> re.Pattern[str]:
    """Group 1: the transport (``ipv4``/``ipv6`` for gRPC, ``ws`` for WebSocket)."""
    return re.compile(rf"edge {edge_id} \(.*?\) connected from (\w+):")


def _cp_drop(edge_id: str) -> str:
    return f"edge {edge_id} stopped sending heartbeats; dropping it"


def _env() -> dict[str, str]:
    """The test's environment minus anything that would change the daemons' behaviour from the
    outside (proxies, Outpost and model settings): traffic stays on loopback."""
    drop = ("proxy", "outpost_", "anthropic_")
    return {
        **{k: v for k, v in os.environ.items() if not any(d in k.lower() for d in drop)},
        "PYTHONUNBUFFERED": "1",
    }


@dataclass
class Daemon:
    """A daemon subprocess with its output in a log file."""

    name: str
    argv: list[str]
    log_path: Path
    proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        with self.log_path.open("wb") as out:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out, env=_env()
            )

    async def stop(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), 60)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def wait_for_log(self, what: Callable[[str], bool], timeout_s: float, describe: str) -> float:
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if what(self.log()):
                return time.monotonic() - started
            assert self.alive(), f"{self.name} exited:\n{self.log()[-4000:]}"
            await asyncio.sleep(0.1)
        raise AssertionError(f"{self.name}: no {describe} within {timeout_s:g} s:\n{self.log()[-4000:]}")


async def _cli(*argv: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=_env(),
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, f"{' '.join(argv)} exited {proc.returncode}:\n{out.decode()}{err.decode()}"
    return out.decode()


async def _status(url: str) -> int:
    async with httpx.AsyncClient(timeout=2.0, trust_env=False) as client:
        try:
            return (await client.get(url)).status_code
        except httpx.HTTPError:
            return -1


async def _within(url: str, status: int, timeout_s: float) -> float:
    """Seconds until ``url`` answers ``status``; fails after ``timeout_s``."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if await _status(url) == status:
            return time.monotonic() - started
        await asyncio.sleep(0.1)
    raise AssertionError(f"{url} did not answer {status} within {timeout_s:g} s")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@dataclass
class Poller:
    """Polls a /readyz once a second and keeps every answer that was not 200."""

    url: str
    polls: int = 0
    misses: list[tuple[float, int]] = field(default_factory=list)
    _started: float = field(default_factory=time.monotonic)

    async def run(self) -> None:
        while True:
            status = await _status(self.url)
            self.polls += 1
            if status != 200:
                self.misses.append((round(time.monotonic() - self._started, 1), status))
            await asyncio.sleep(POLL_S)


@asynccontextmanager
async def _polling(poller: Poller) -> AsyncIterator[Poller]:
    task = asyncio.create_task(poller.run())
    try:
        yield poller
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@dataclass
class Edge:
    name: str
    edge_id: str
    daemon: Daemon
    readyz: str

    def handshakes(self) -> int:
        return self.daemon.log().count(EDGE_HANDSHAKE)


async def _control_plane(work: Path) -> tuple[Daemon, str, int]:
    """``outpost-control serve`` on its defaults; returns it, its API URL and its tunnel port."""
    cp = Daemon(
        "control plane",
        [
            str(BIN / "outpost-control"),
            "serve",
            "--data-dir",
            str(work / "cp"),
            "--http",
            "127.0.0.1:0",
            "--tunnel",
            "127.0.0.1:0",
        ],
        work / "cp.log",
    )
    await cp.start()
    pattern = re.compile(r"Outpost control plane \S+: API (http://[\d.:]+), tunnel [\d.]+:(\d+)")
    await cp.wait_for_log(lambda text: pattern.search(text) is not None, START_S, "start-up line")
    match = pattern.search(cp.log())
    assert match is not None
    return cp, match.group(1), int(match.group(2))


async def _enroll(work: Path, url: str, names: list[str]) -> dict[str, tuple[Path, str]]:
    """Enroll one edge per name with the operator CLIs; returns each one's state dir and edge id."""
    client = ["--url", url, "--data-dir", str(work / "cp")]
    env = json.loads(
        await _cli(str(BIN / "outpost-control"), "environments", "create", "--name", "defaults", *client)
    )
    tokens = json.loads(
        await _cli(
            str(BIN / "outpost-control"),
            "tokens",
            "create",
            "--environment",
            env["id"],
            "--count",
            str(len(names)),
            "--out-dir",
            str(work / "tokens"),
            *client,
        )
    )
    enrolled: dict[str, tuple[Path, str]] = {}
    for name, token in zip(names, tokens["tokens"], strict=True):
        state_dir = work / name
        await _cli(
            str(BIN / "outpost-edge"),
            "register",
            "--control-plane",
            url,
            "--token-file",
            token["file"],
            "--ca-fingerprint",
            tokens["ca_fingerprint"],
            "--state-dir",
            str(state_dir),
            "--name",
            name,
        )
        identity = json.loads((state_dir / "identity" / "identity.json").read_text())
        enrolled[name] = (state_dir, identity["edge_id"])
    return enrolled


async def _start_edge(
    work: Path, name: str, state_dir: Path, edge_id: str, config: dict[str, object]
) -> Edge:
    config_path = work / f"{name}.yaml"
    config_path.write_text(yaml.safe_dump({"state_dir": str(state_dir), **config}))
    daemon = Daemon(
        name, [str(BIN / "outpost-edge"), "run", "--config", str(config_path)], work / f"{name}.log"
    )
    await daemon.start()
    observability = config.get("observability")
    listen = observability["listen"] if isinstance(observability, dict) else "127.0.0.1:9464"
    return Edge(name, edge_id, daemon, f"http://{listen}/readyz")


# 120 s of idle tunnels on the shipped timings is the point of the test, then a silent path.
@pytest.mark.timeout(600)
async def test_idle_tunnels_hold_and_a_silent_path_drops_on_shipped_defaults(
    tmp_path: Path,
    docker_client: docker.DockerClient,  # the edges need Docker, though they run no sandbox here
) -> None:
    assert _port_free(9464), "127.0.0.1:9464 (the edge's default /readyz) is taken by another process"
    async with AsyncExitStack() as stack:
        cp, url, tunnel_port = await _control_plane(tmp_path)
        stack.push_async_callback(cp.stop)
        enrolled = await _enroll(tmp_path, url, ["edge-grpc", "edge-ws"])
        relay = await stack.enter_async_context(SilentRelay(tunnel_port))

        grpc_dir, grpc_id = enrolled["edge-grpc"]
        grpc = await _start_edge(
            tmp_path,
            "edge-grpc",
            grpc_dir,
            grpc_id,
            {
                "control_plane": {"tunnel_address": f"127.0.0.1:{relay.port}"},  # through the relay
                "connection": {"transport": "grpc"},
            },
        )
        stack.push_async_callback(grpc.daemon.stop)
        ws_dir, ws_id = enrolled["edge-ws"]
        ws = await _start_edge(
            tmp_path,
            "edge-ws",
            ws_dir,
            ws_id,
            {
                "connection": {"transport": "websocket"},
                "observability": {"listen": f"127.0.0.1:{_free_port()}"},  # 9464 is edge-grpc's
            },
        )
        stack.push_async_callback(ws.daemon.stop)
        assert grpc.readyz == DEFAULT_READYZ

        for edge in (grpc, ws):
            await edge.daemon.wait_for_log(lambda text: EDGE_HANDSHAKE in text, START_S, "handshake")
            took = await _within(edge.readyz, 200, START_S)
            assert "observability endpoint not started" not in edge.daemon.log()
            print(f"{edge.name}: ready {took:.1f} s after its handshake")
        for edge, transport in ((grpc, "ipv4"), (ws, "ws")):
            handshake = _cp_handshake(edge.edge_id).search(cp.log())
            assert handshake is not None and handshake.group(1) == transport, cp.log()[-4000:]

        # Idle: nothing but heartbeats for two minutes, both edges polled once a second.
        ws_poller = await stack.enter_async_context(_polling(Poller(ws.readyz)))
        async with _polling(Poller(grpc.readyz)) as grpc_poller:
            await asyncio.sleep(IDLE_S)
        for edge, poller in ((grpc, grpc_poller), (ws, ws_poller)):
            print(f"{edge.name}: {poller.polls} polls of /readyz, not ready at {poller.misses}")
            assert poller.polls >= IDLE_S / (2 * POLL_S)
            assert poller.misses == [], f"{edge.name} was not ready at (s, status): {poller.misses}"
            assert edge.handshakes() == 1, edge.daemon.log()[-4000:]
            assert len(_cp_handshake(edge.edge_id).findall(cp.log())) == 1, cp.log()[-4000:]
            assert EDGE_DROP not in edge.daemon.log()
            assert _cp_drop(edge.edge_id) not in cp.log()

        # The gRPC edge's path goes silent: both sides drop it within their heartbeat timeouts.
        relay.go_silent()
        silent_at = time.monotonic()
        took = await _within(grpc.readyz, 503, EDGE_DROP_S)
        print(f"edge-grpc: not ready {took:.1f} s after its path went silent")
        assert EDGE_DROP in grpc.daemon.log()
        remaining = CP_DROP_S - (time.monotonic() - silent_at)
        await cp.wait_for_log(lambda text: _cp_drop(grpc_id) in text, remaining, "drop of edge-grpc")
        print(f"control plane: dropped edge-grpc {time.monotonic() - silent_at:.1f} s after the silence")
        relay.restore()
        took = await _within(grpc.readyz, 200, EDGE_BACK_S)
        print(f"edge-grpc: ready {took:.1f} s after its path came back")
        assert grpc.handshakes() == 2

        # The WebSocket edge saw none of it: still its first tunnel, ready at every poll.
        assert ws_poller.misses == [], f"edge-ws was not ready at (s, status): {ws_poller.misses}"
        assert ws.handshakes() == 1
        assert len(_cp_handshake(ws_id).findall(cp.log())) == 1
