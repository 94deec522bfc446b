"""An in-memory container engine implementing ``ContainerRuntime``, for the sandbox manager's unit tests.

:class:`FakeEngine` holds the state Docker would (containers, volumes, networks); each
:class:`FakeRuntime` is one client of it, as each edge process has its own Docker connection, so a
manager restart is a second runtime on the same engine (close the first one before its manager to
leave everything behind, as a ``kill -9`` would)::

    engine = FakeEngine()
    manager = SandboxManager(engine.connect(), edge_id="e1", default_limits=LIMITS)
    ...
    engine.kill(container_id)        # the container dies: exited, its channel's stream ends
    await engine.shutdown()          # at the end of the test

A container goes through the states of :data:`TRANSITIONS` (Docker's names, plus ``removed``); an
operation that is illegal in its state (pausing an exited container, exec in a paused one, ...)
raises :class:`~edge_agent.errors.SandboxUnavailable`, as ``DockerRuntime`` does with Docker's 409.
Like Docker, a name is unique among containers, a volume in use by a container cannot be removed,
and ``create_container`` creates a missing volume (unlabelled).

The exec stream is a real socket pair: the engine's end speaks the ``sandboxd`` protocol (the
bootstrap, the hello, one length-prefixed JSON frame per request and answer, Docker's multiplexing
headers on the way out), so the manager's real :class:`~edge_agent.sandbox.channel.DaemonChannel`
talks to it. A paused container answers nothing until it is unpaused. Its tools are a sketch over
the workspace volume's :attr:`FakeVolume.files`: ``write`` stores, ``read`` returns the text;
``bash`` records the command and answers with no output, except ``sleep ...``, which never answers
(until the call is cancelled or the container dies).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import itertools
import json
import socket
import struct
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import PurePosixPath
from typing import Any, BinaryIO

from edge_agent.egress import NetworkRecord
from edge_agent.errors import SandboxUnavailable
from edge_agent.sandbox.container_runtime import ContainerRecord, ExecStream
from edge_agent.sandbox.protocol import STDOUT, encode_frame
from edge_agent.sandbox.sandboxd import QUOTA_ENV
from edge_agent.sandbox.spec import SandboxSpec

__all__ = ["TRANSITIONS", "ContainerState", "FakeContainer", "FakeEngine", "FakeRuntime", "FakeVolume"]

_MUX_HEADER = struct.Struct(">BxxxL")  # Docker's stdout/stderr multiplexing (tty=False)
_LENGTH = struct.Struct(">I")


class ContainerState(StrEnum):
    CREATED = "created"
    RUNNING = "running"
    PAUSED = "paused"
    EXITED = "exited"
    REMOVED = "removed"  # not Docker's: a removed container is gone; the fake keeps it for asserts


_S = ContainerState
#: (state, operation) -> the next state; anything else is illegal.
TRANSITIONS: Mapping[tuple[ContainerState, str], ContainerState] = {
    (_S.CREATED, "start"): _S.RUNNING,
    (_S.RUNNING, "pause"): _S.PAUSED,
    (_S.PAUSED, "unpause"): _S.RUNNING,
    (_S.RUNNING, "die"): _S.EXITED,
    (_S.PAUSED, "die"): _S.EXITED,
    **{(state, "remove"): _S.REMOVED for state in (_S.CREATED, _S.RUNNING, _S.PAUSED, _S.EXITED)},
}


@dataclass
class FakeVolume:
    name: str
    labels: dict[str, str]
    files: dict[str, str] = field(default_factory=dict)  # path relative to the workspace -> text


@dataclass
class FakeContainer:
    id: str
    name: str
    spec: SandboxSpec
    networks: dict[str, str]  # network name -> address ("none" -> "" without a network)
    state: ContainerState = ContainerState.CREATED
    history: list[ContainerState] = field(default_factory=lambda: [ContainerState.CREATED])
    commands: list[str] = field(default_factory=list)  # bash commands run through the channel
    timeouts_ms: list[int] = field(default_factory=list)  # the timeout_ms each call's frame told
    execs: list[list[str]] = field(default_factory=list)  # exec_run commands
    daemons: set[_FakeDaemon] = field(default_factory=set)
    running: asyncio.Event = field(default_factory=asyncio.Event)  # set while running

    @property
    def labels(self) -> Mapping[str, str]:
        return self.spec.labels

    @property
    def volume(self) -> str:
        return self.spec.volume

    @property
    def alive(self) -> bool:
        return self.state in (ContainerState.RUNNING, ContainerState.PAUSED)

    @property
    def pending_calls(self) -> int:
        """Tool calls its daemons have received and not answered yet."""
        return sum(len(daemon.requests) for daemon in self.daemons)

    def apply(self, operation: str) -> None:
        new = TRANSITIONS.get((self.state, operation))
        if new is None:
            raise SandboxUnavailable(f"{operation} sandbox: container {self.id[:12]} is {self.state.value}")
        self.state = new
        self.history.append(new)
        if new is ContainerState.RUNNING:
            self.running.set()
        else:
            self.running.clear()
        if new in (ContainerState.EXITED, ContainerState.REMOVED):
            for daemon in list(self.daemons):
                daemon.close()


class FakeEngine:
    """The state of one fake Docker engine, shared by every :class:`FakeRuntime` connected to it."""

    def __init__(self) -> None:
        self.containers: dict[str, FakeContainer] = {}  # removed ones included (state ``removed``)
        self.volumes: dict[str, FakeVolume] = {}
        self.networks: dict[str, NetworkRecord] = {}
        self.calls: list[str] = []  # every runtime operation, in order (e.g. "pause", "create_container")
        self._failures: dict[str, list[str]] = {}
        self._ids = itertools.count(1)
        self._addresses = itertools.count(2)
        self._daemons: set[_FakeDaemon] = set()

    def connect(self) -> FakeRuntime:
        """A new client (what ``DockerRuntime`` is to Docker)."""
        return FakeRuntime(self)

    # for tests ---------------------------------------------------------------------------------

    def kill(self, container_id: str) -> None:
        """The container dies (killed, OOM, its init exited): ``exited``, its exec streams end."""
        self.containers[container_id].apply("die")

    def pause(self, container_id: str) -> None:
        """Freeze the container behind the runtime's back (as an operator's ``docker pause``)."""
        self.containers[container_id].apply("pause")

    def fail_next(self, operation: str, message: str = "injected failure") -> None:
        """Make the next call of ``operation`` (a runtime method name) raise SandboxUnavailable."""
        self._failures.setdefault(operation, []).append(message)

    def live(self, labels: Mapping[str, str] | None = None) -> list[FakeContainer]:
        """Containers not removed, carrying ``labels``."""
        return [
            c
            for c in self.containers.values()
            if c.state is not ContainerState.REMOVED and _has(c.labels, labels or {})
        ]

    async def shutdown(self) -> None:
        """End every exec stream and wait for the daemons serving them."""
        daemons = list(self._daemons)
        for daemon in daemons:
            daemon.close()
        await asyncio.gather(*(daemon.finished() for daemon in daemons))

    # used by FakeRuntime -----------------------------------------------------------------------

    def record(self, operation: str) -> None:
        self.calls.append(operation)
        failures = self._failures.get(operation)
        if failures:
            raise SandboxUnavailable(f"{operation}: {failures.pop(0)}")

    def container(self, container_id: str, operation: str) -> FakeContainer:
        found = self.containers.get(container_id)
        if found is None or found.state is ContainerState.REMOVED:
            raise SandboxUnavailable(f"{operation}: no such container: {container_id[:12]}")
        return found

    def new_id(self) -> str:
        return hashlib.sha256(b"container-%d" % next(self._ids)).hexdigest()

    def new_address(self) -> str:
        n = next(self._addresses)
        return f"10.89.{n // 250}.{n % 250 + 2}"

    def check_name_free(self, name: str, operation: str) -> None:
        if any(c.name == name for c in self.live()):
            raise SandboxUnavailable(f'{operation}: Conflict. The container name "/{name}" is already in use')

    def add_daemon(self, daemon: _FakeDaemon) -> None:
        self._daemons.add(daemon)
        daemon.container.daemons.add(daemon)

    def drop_daemon(self, daemon: _FakeDaemon) -> None:
        self._daemons.discard(daemon)
        daemon.container.daemons.discard(daemon)


class FakeRuntime:
    """One client of a :class:`FakeEngine`; a ``ContainerRuntime``. After :meth:`close` every call
    raises SandboxUnavailable, as ``DockerRuntime``'s do."""

    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine
        self.closed = False

    async def close(self) -> None:
        self.closed = True

    async def _call(self, operation: str) -> FakeEngine:
        await asyncio.sleep(0)  # an engine call is never instantaneous: let other tasks run
        if self.closed:
            raise SandboxUnavailable("docker runtime is closed")
        self.engine.record(operation)
        return self.engine

    # volumes -----------------------------------------------------------------------------------

    async def ensure_volume(self, name: str, labels: Mapping[str, str]) -> None:
        engine = await self._call("ensure_volume")
        engine.volumes.setdefault(name, FakeVolume(name, dict(labels)))

    async def remove_volume(self, name: str) -> bool:
        engine = await self._call("remove_volume")
        if name not in engine.volumes:
            return False
        users = [c.id[:12] for c in engine.live() if c.volume == name]
        if users:
            raise SandboxUnavailable(f"remove volume: volume is in use - {users}")
        del engine.volumes[name]
        return True

    async def list_volume_labels(self, labels: Mapping[str, str]) -> dict[str, dict[str, str]]:
        engine = await self._call("list_volume_labels")
        return {v.name: dict(v.labels) for v in engine.volumes.values() if _has(v.labels, labels)}

    # containers --------------------------------------------------------------------------------

    async def create_container(self, spec: SandboxSpec) -> str:
        engine = await self._call("create_container")
        what = f"create sandbox from {spec.image}"
        engine.check_name_free(spec.name, what)
        if spec.network and spec.network not in engine.networks:
            raise SandboxUnavailable(f"{what}: network {spec.network} not found")
        engine.volumes.setdefault(spec.volume, FakeVolume(spec.volume, {}))
        networks = {spec.network: engine.new_address()} if spec.network else {"none": ""}
        container = FakeContainer(engine.new_id(), spec.name, spec, networks)
        engine.containers[container.id] = container
        container.apply("start")
        return container.id

    async def container_state(self, container_id: str) -> str | None:
        engine = await self._call("container_state")
        found = engine.containers.get(container_id)
        return None if found is None or found.state is ContainerState.REMOVED else found.state.value

    async def list_containers(self, labels: Mapping[str, str]) -> list[ContainerRecord]:
        engine = await self._call("list_containers")
        return [
            ContainerRecord(c.id, c.state.value, dict(c.labels), c.spec.image, dict(c.networks))
            for c in engine.live(labels)
        ]

    async def pause(self, container_id: str) -> None:
        engine = await self._call("pause")
        engine.container(container_id, "pause sandbox").apply("pause")

    async def unpause(self, container_id: str) -> None:
        engine = await self._call("unpause")
        engine.container(container_id, "unpause sandbox").apply("unpause")

    async def rename(self, container_id: str, name: str) -> None:
        engine = await self._call("rename")
        container = engine.container(container_id, "rename sandbox")
        engine.check_name_free(name, "rename sandbox")
        container.name = name

    async def remove_container(self, container_id: str) -> bool:
        engine = await self._call("remove_container")
        found = engine.containers.get(container_id)
        if found is None or found.state is ContainerState.REMOVED:
            return False
        found.apply("remove")
        return True

    # networks ----------------------------------------------------------------------------------

    async def ensure_network(
        self, name: str, *, internal: bool, labels: Mapping[str, str], options: Mapping[str, str]
    ) -> NetworkRecord:
        """The gateway is loopback, so an allowlist network's egress proxy can listen on it."""
        engine = await self._call("ensure_network")
        if name not in engine.networks:
            engine.networks[name] = NetworkRecord(
                id=hashlib.sha256(name.encode()).hexdigest(),
                name=name,
                internal=internal,
                gateway="127.0.0.1",
                labels=dict(labels),
                options=dict(options),
            )
        return engine.networks[name]

    async def list_networks(self, labels: Mapping[str, str]) -> list[NetworkRecord]:
        engine = await self._call("list_networks")
        return [n for n in engine.networks.values() if _has(n.labels, labels)]

    async def remove_network(self, name: str) -> bool:
        engine = await self._call("remove_network")
        if name not in engine.networks:
            return False
        if any(c.alive and name in c.networks for c in engine.live()):
            raise SandboxUnavailable(f"remove network {name}: network has active endpoints")
        del engine.networks[name]
        return True

    async def container_address(self, container_id: str, network: str) -> str:
        engine = await self._call("container_address")
        address = engine.container(container_id, "inspect sandbox address").networks.get(network, "")
        if not address:
            raise SandboxUnavailable(f"sandbox {container_id[:12]} has no address on {network}")
        return address

    # exec and files ----------------------------------------------------------------------------

    async def open_exec_stream(
        self,
        container_id: str,
        cmd: Sequence[str],
        *,
        user: str,
        workdir: str,
        env: Mapping[str, str] | None = None,
    ) -> ExecStream:
        engine = await self._call("open_exec_stream")
        container = _running(engine.container(container_id, "open sandbox channel"), "open sandbox channel")
        ours, theirs = socket.socketpair()
        daemon = _FakeDaemon(engine, container, dict(env or {}))
        await daemon.start(ours)
        return ExecStream(theirs)

    async def exec_run(self, container_id: str, cmd: Sequence[str], *, user: str) -> tuple[int, bytes]:
        """Records ``cmd`` in :attr:`FakeContainer.execs`; exit code 0, no output."""
        engine = await self._call("exec_run")
        _running(engine.container(container_id, "exec in sandbox"), "exec in sandbox").execs.append(list(cmd))
        return 0, b""

    async def put_archive(self, container_id: str, path: str, archive: BinaryIO) -> None:
        """Unpacks the regular files of the tar that land in the workspace into its volume."""
        engine = await self._call("put_archive")
        container = engine.container(container_id, "copy into sandbox")
        volume = engine.volumes[container.volume]
        workdir = PurePosixPath(container.spec.workdir)
        with tarfile.open(fileobj=io.BytesIO(archive.read())) as tar:
            for member in tar.getmembers():
                target = PurePosixPath(path) / member.name
                extracted = tar.extractfile(member) if member.isfile() else None
                if extracted is not None and target.is_relative_to(workdir):
                    volume.files[str(target.relative_to(workdir))] = extracted.read().decode()


class _FakeDaemon:
    """The engine's end of one exec stream: a sketch of ``sandboxd`` (see the module docstring)."""

    def __init__(self, engine: FakeEngine, container: FakeContainer, env: dict[str, str]) -> None:
        self.engine = engine
        self.container = container
        self.env = env
        self.requests: dict[int, asyncio.Task[None]] = {}
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self, sock: socket.socket) -> None:
        reader, self._writer = await asyncio.open_connection(sock=sock)
        self.engine.add_daemon(self)
        self._task = asyncio.create_task(self._serve(reader), name=f"fake-sandboxd-{self.container.id[:12]}")

    def close(self) -> None:
        """The process is gone: its end of the stream closes, unanswered calls stay unanswered."""
        for request in self.requests.values():
            request.cancel()
        if self._writer is not None:
            self._writer.close()
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
        self.engine.drop_daemon(self)

    async def finished(self) -> None:
        tasks = [t for t in (self._task, *self.requests.values()) if t is not None]
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader) -> None:
        try:
            source_length = int(await reader.readline())
            await reader.readexactly(source_length)  # sandboxd's source, as the bootstrap reads it
            await self.container.running.wait()
            quota = int(self.env.get(QUOTA_ENV) or 0)
            self._send({"event": "hello", "protocol": 1, "fake": True, "quota_bytes": quota})
            while True:
                (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
                message: dict[str, Any] = json.loads(await reader.readexactly(length))
                if "cancel" in message:
                    cancelled = self.requests.pop(message["cancel"], None)
                    if cancelled is not None:
                        cancelled.cancel()
                    continue
                req_id = int(message["id"])
                self.container.timeouts_ms.append(int(message.get("timeout_ms") or 0))
                self.requests[req_id] = asyncio.create_task(self._answer(req_id, message))
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass  # the edge closed the stream (or sent garbage): sandboxd exits
        finally:
            self.close()

    async def _answer(self, req_id: int, message: dict[str, Any]) -> None:
        await self.container.running.wait()  # a frozen process answers nothing
        text, is_error = await self._run(str(message.get("tool")), message.get("input") or {})
        self.requests.pop(req_id, None)
        self._send({"id": req_id, "content": [{"type": "text", "text": text}], "is_error": is_error})

    async def _run(self, tool: str, tool_input: dict[str, Any]) -> tuple[str, bool]:
        files = self.engine.volumes[self.container.volume].files
        if tool == "bash":
            command = str(tool_input.get("command", ""))
            self.container.commands.append(command)
            if command.startswith("sleep"):
                await asyncio.Event().wait()  # never answers: the call times out or the container dies
            return "", False
        path = self._path(str(tool_input.get("file_path", "")))
        if path is None:
            return f"{tool}: {tool_input.get('file_path')}: outside the workspace", True
        if tool == "write":
            files[path] = str(tool_input.get("content", ""))
            return f"wrote {len(files[path])} characters to {path}", False
        if tool == "read":
            if path not in files:
                return f"read: {path}: no such file", True
            return files[path], False
        return f"{tool}: not supported by the fake sandboxd", True

    def _path(self, file_path: str) -> str | None:
        workdir = PurePosixPath(self.container.spec.workdir)
        path = workdir / file_path
        return (
            str(path.relative_to(workdir))
            if path.is_relative_to(workdir) and ".." not in path.parts
            else None
        )

    def _send(self, message: dict[str, Any]) -> None:
        if self._writer is None or self._writer.is_closing():
            return
        frame = encode_frame(message)
        with contextlib.suppress(ConnectionError, RuntimeError):
            self._writer.write(_MUX_HEADER.pack(STDOUT, len(frame)) + frame)


def _running(container: FakeContainer, operation: str) -> FakeContainer:
    if container.state is not ContainerState.RUNNING:
        raise SandboxUnavailable(f"{operation}: container {container.id[:12]} is {container.state.value}")
    return container


def _has(labels: Mapping[str, str], wanted: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in wanted.items())
