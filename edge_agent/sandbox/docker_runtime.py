"""The Docker implementation of :class:`~edge_agent.sandbox.container_runtime.ContainerRuntime`:
the one seam between the edge and the (synchronous) Docker SDK.

:class:`DockerRuntime` runs every SDK call on its own :class:`~concurrent.futures.ThreadPoolExecutor`
so the event loop never blocks, and maps Docker's exceptions to
:class:`~edge_agent.errors.SandboxUnavailable` here, once. No other module imports ``docker``.
Only the low-level ``APIClient`` is used: one HTTP request per method, no hidden inspects.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, BinaryIO, TypeVar

import docker
import docker.errors
import requests.exceptions

from ..egress import NetworkRecord
from ..errors import SandboxUnavailable
from .container_runtime import ContainerRecord, ExecStream
from .spec import SandboxSpec

__all__ = ["DockerRuntime", "container_config"]

log = logging.getLogger(__name__)

T = TypeVar("T")


def _hijacked_socket(raw: Any) -> socket.socket:
    """docker-py returns a ``socket.SocketIO`` for unix sockets and a socket for TCP."""
    if isinstance(raw, socket.socket):
        return raw
    inner = getattr(raw, "_sock", None)
    if isinstance(inner, socket.socket):
        return inner
    raise SandboxUnavailable(f"unsupported docker transport for exec streams: {type(raw).__name__}")


def _describe(exc: BaseException) -> str:
    if isinstance(exc, docker.errors.APIError):
        return str(exc.explanation or exc)
    return str(exc) or type(exc).__name__


class DockerRuntime:
    """Async facade over ``docker.APIClient``, a
    :class:`~edge_agent.sandbox.container_runtime.ContainerRuntime`. Create it in the edge's entry
    point; close it last."""

    def __init__(
        self,
        client: Any | None = None,
        *,
        base_url: str | None = None,
        max_workers: int = 8,
        timeout_s: float = 60.0,
    ) -> None:
        """``client``: a ``docker.DockerClient`` or ``docker.APIClient``. Without one, connect lazily
        (on the executor, at the first call) to ``base_url``, or as the Docker CLI would
        (``DOCKER_HOST`` etc.) when that is None too."""
        self._client = client
        self._base_url = base_url
        self._client_lock = threading.Lock()
        self._timeout_s = timeout_s
        self._executor = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="docker")
        self._closed = False

    @classmethod
    def from_env(cls, *, max_workers: int = 8, timeout_s: float = 60.0) -> DockerRuntime:
        return cls(None, max_workers=max_workers, timeout_s=timeout_s)

    # plumbing --------------------------------------------------------------------------------

    def _api(self) -> Any:
        with self._client_lock:
            if self._client is None:
                if self._base_url:
                    self._client = docker.DockerClient(base_url=self._base_url, timeout=int(self._timeout_s))
                else:
                    self._client = docker.from_env(timeout=int(self._timeout_s))
            return getattr(self._client, "api", self._client)

    async def _run(self, what: str, func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self._closed:
            raise SandboxUnavailable("docker runtime is closed")
        loop = asyncio.get_running_loop()
        call = functools.partial(self._guarded, what, func, *args, **kwargs)
        return await loop.run_in_executor(self._executor, call)

    def _guarded(self, what: str, func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        try:
            return func(*args, **kwargs)
        except SandboxUnavailable:
            raise
        except docker.errors.ImageNotFound as exc:
            raise SandboxUnavailable(f"{what}: image not found ({_describe(exc)})") from None
        except docker.errors.APIError as exc:
            raise SandboxUnavailable(f"{what}: {_describe(exc)}") from None
        except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
            raise SandboxUnavailable(f"{what}: docker engine unreachable ({_describe(exc)})") from None

    async def close(self) -> None:
        """Idempotent. Waits for running SDK calls, then closes the client."""
        if self._closed:
            return
        self._closed = True
        await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown, True)
        if self._client is not None:
            self._client.close()

    # engine / images -------------------------------------------------------------------------

    async def ping(self) -> None:
        await self._run("ping", lambda: self._api().ping())

    async def image_exists(self, image: str) -> bool:
        def inspect() -> bool:
            try:
                self._api().inspect_image(image)
            except docker.errors.NotFound:
                return False
            return True

        return await self._run("inspect image", inspect)

    # volumes ---------------------------------------------------------------------------------

    async def ensure_volume(self, name: str, labels: Mapping[str, str]) -> None:
        """Create the named volume if it does not exist (creating an existing one is a no-op)."""
        await self._run("create volume", lambda: self._api().create_volume(name, labels=dict(labels)))

    async def remove_volume(self, name: str) -> bool:
        def remove() -> bool:
            try:
                self._api().remove_volume(name, force=True)
            except docker.errors.NotFound:
                return False
            return True

        return await self._run("remove volume", remove)

    async def list_volume_labels(self, labels: Mapping[str, str]) -> dict[str, dict[str, str]]:
        """Volumes carrying ``labels``: name -> all its labels."""

        def listing() -> dict[str, dict[str, str]]:
            result = self._api().volumes(filters={"label": _label_filters(labels)}) or {}
            return {str(v["Name"]): dict(v.get("Labels") or {}) for v in result.get("Volumes") or []}

        return await self._run("list volumes", listing)

    # containers ------------------------------------------------------------------------------

    async def create_container(self, spec: SandboxSpec) -> str:
        """Create and start a hardened container for ``spec``; returns its id."""
        config = container_config(spec)

        def create_and_start() -> str:
            api = self._api()
            created = api.create_container_from_config(config, name=spec.name)
            container_id = str(created["Id"])
            try:
                api.start(container_id)
            except Exception:
                with contextlib.suppress(Exception):  # best effort; the start error is what matters
                    api.remove_container(container_id, force=True)
                raise
            return container_id

        return await self._run(f"create sandbox from {spec.image}", create_and_start)

    async def container_state(self, container_id: str) -> str | None:
        """The container's state (``running``, ``paused``, ``exited`` ...), or None if it is gone."""

        def inspect() -> str | None:
            try:
                info = self._api().inspect_container(container_id)
            except docker.errors.NotFound:
                return None
            return str(info["State"]["Status"])

        return await self._run("inspect sandbox", inspect)

    async def list_containers(self, labels: Mapping[str, str]) -> list[ContainerRecord]:
        def listing() -> list[ContainerRecord]:
            rows = self._api().containers(all=True, filters={"label": _label_filters(labels)})
            return [
                ContainerRecord(
                    id=str(row["Id"]),
                    state=str(row.get("State", "")),
                    labels=dict(row.get("Labels") or {}),
                    image=str(row.get("Image", "")),
                    networks=_addresses(row),
                )
                for row in rows
            ]

        return await self._run("list sandboxes", listing)

    async def container_address(self, container_id: str, network: str) -> str:
        """The container's IPv4 address on ``network``."""

        def inspect() -> str:
            address = _addresses(self._api().inspect_container(container_id)).get(network, "")
            if not address:
                raise SandboxUnavailable(f"sandbox {container_id[:12]} has no address on {network}")
            return address

        return await self._run("inspect sandbox address", inspect)

    async def pause(self, container_id: str) -> None:
        await self._run("pause sandbox", lambda: self._api().pause(container_id))

    async def unpause(self, container_id: str) -> None:
        await self._run("unpause sandbox", lambda: self._api().unpause(container_id))

    async def rename(self, container_id: str, name: str) -> None:
        await self._run("rename sandbox", lambda: self._api().rename(container_id, name))

    async def kill(self, container_id: str) -> None:
        await self._run("kill sandbox", lambda: self._api().kill(container_id))

    async def remove_container(self, container_id: str) -> bool:
        """Force-remove (kills it if running or paused); False if it did not exist."""

        def remove() -> bool:
            try:
                self._api().remove_container(container_id, force=True)
            except docker.errors.NotFound:
                return False
            return True

        return await self._run("remove sandbox", remove)

    # networks --------------------------------------------------------------------------------

    async def ensure_network(
        self, name: str, *, internal: bool, labels: Mapping[str, str], options: Mapping[str, str]
    ) -> NetworkRecord:
        """The bridge network ``name``, created if missing. An existing one is returned as it is:
        the caller checks that it is what it expects."""

        def ensure() -> NetworkRecord:
            api = self._api()
            try:
                return _network_record(api.inspect_network(name))
            except docker.errors.NotFound:
                pass
            try:
                api.create_network(
                    name,
                    driver="bridge",
                    internal=internal,
                    labels=dict(labels),
                    options=dict(options),
                    check_duplicate=True,
                )
            except docker.errors.APIError as exc:
                if exc.status_code != 409:  # 409: created meanwhile by someone else
                    raise
            return _network_record(api.inspect_network(name))

        return await self._run(f"create network {name}", ensure)

    async def list_networks(self, labels: Mapping[str, str]) -> list[NetworkRecord]:
        def listing() -> list[NetworkRecord]:
            rows = self._api().networks(filters={"label": _label_filters(labels)}) or []
            return [_network_record(row) for row in rows]

        return await self._run("list networks", listing)

    async def remove_network(self, name: str) -> bool:
        """False if it did not exist; SandboxUnavailable if containers are still on it."""

        def remove() -> bool:
            try:
                self._api().remove_network(name)
            except docker.errors.NotFound:
                return False
            return True

        return await self._run(f"remove network {name}", remove)

    # exec ------------------------------------------------------------------------------------

    async def open_exec_stream(
        self,
        container_id: str,
        cmd: Sequence[str],
        *,
        user: str,
        workdir: str,
        env: Mapping[str, str] | None = None,
    ) -> ExecStream:
        """Start ``cmd`` in the container with stdin attached; return the raw duplex stream."""

        def start() -> ExecStream:
            api = self._api()
            exec_id = api.exec_create(
                container_id,
                list(cmd),
                stdout=True,
                stderr=True,
                stdin=True,
                tty=False,
                user=user,
                workdir=workdir,
                environment=dict(env) if env else None,
            )["Id"]
            raw = api.exec_start(exec_id, tty=False, socket=True)
            return ExecStream(_hijacked_socket(raw), raw)

        return await self._run("open sandbox channel", start)

    async def exec_run(self, container_id: str, cmd: Sequence[str], *, user: str) -> tuple[int, bytes]:
        """Run ``cmd`` in the container to completion, without stdin; (exit code, stdout).
        For short housekeeping commands, not for tool calls."""

        def run() -> tuple[int, bytes]:
            api = self._api()
            exec_id = api.exec_create(container_id, list(cmd), stdout=True, stderr=False, user=user)["Id"]
            output = api.exec_start(exec_id, tty=False, stream=False)
            code = api.exec_inspect(exec_id).get("ExitCode")
            return (int(code) if code is not None else -1), bytes(output or b"")

        return await self._run("exec in sandbox", run)

    # files -----------------------------------------------------------------------------------

    async def put_archive(self, container_id: str, path: str, archive: BinaryIO) -> None:
        """Unpack the tar ``archive`` (streamed from the file) at ``path`` in the container; entries
        keep the owners their headers name."""

        def put() -> None:
            if not self._api().put_archive(container_id, path, archive):
                raise SandboxUnavailable(f"copying files into sandbox {container_id[:12]} failed")

        await self._run("copy into sandbox", put)


def _label_filters(labels: Mapping[str, str]) -> list[str]:
    return [f"{key}={value}" for key, value in labels.items()]


def _addresses(container: Mapping[str, Any]) -> dict[str, str]:
    """Network name -> IPv4 address, from a container listing row or an inspect result."""
    networks = (container.get("NetworkSettings") or {}).get("Networks") or {}
    return {str(name): str(net.get("IPAddress") or "") for name, net in networks.items()}


def _network_record(info: Mapping[str, Any]) -> NetworkRecord:
    configs = (info.get("IPAM") or {}).get("Config") or []
    gateways = [str(c.get("Gateway") or "") for c in configs if ":" not in str(c.get("Gateway") or "")]
    return NetworkRecord(
        id=str(info.get("Id", "")),
        name=str(info.get("Name", "")),
        internal=bool(info.get("Internal")),
        gateway=next((g for g in gateways if g), ""),
        labels=dict(info.get("Labels") or {}),
        options=dict(info.get("Options") or {}),
    )


def container_config(spec: SandboxSpec) -> dict[str, Any]:
    """The Engine API ``ContainerCreate`` body for ``spec`` (pure; unit-tested)."""
    tmpfs_opts = "rw,exec,nosuid,nodev"
    host_config: dict[str, Any] = {
        "Init": True,
        "Privileged": False,
        "ReadonlyRootfs": spec.read_only_rootfs,
        "CapDrop": ["ALL"],
        "SecurityOpt": ["no-new-privileges"],
        "PidsLimit": spec.pids,
        "Memory": spec.memory_bytes,
        "MemorySwap": spec.memory_bytes,
        "NanoCpus": int(spec.cpus * 1_000_000_000),
        "NetworkMode": spec.network or "none",
        "IpcMode": "private",
        "RestartPolicy": {"Name": "no"},
        "Tmpfs": {
            "/tmp": f"{tmpfs_opts},size={spec.tmp_bytes},mode=1777",  # noqa: S108 - inside the sandbox
            spec.home: f"{tmpfs_opts},size={spec.home_bytes},uid={spec.uid},gid={spec.gid}",
        },
        "Mounts": [
            {"Type": "volume", "Source": spec.volume, "Target": spec.workdir, "ReadOnly": False},
            *(
                {"Type": "bind", "Source": source, "Target": target, "ReadOnly": read_only}
                for source, target, read_only in spec.binds
            ),
        ],
    }
    config: dict[str, Any] = {
        "Image": spec.image,
        "Cmd": list(spec.command),
        "Entrypoint": [""],  # reset any image entrypoint: run exactly Cmd
        "User": spec.user,
        "WorkingDir": spec.workdir,
        "Hostname": "sandbox",
        "Labels": dict(spec.labels),
        "Env": [f"{key}={value}" for key, value in spec.env.items()],
        "NetworkDisabled": spec.network_disabled,
        "AttachStdin": False,
        "AttachStdout": False,
        "AttachStderr": False,
        "Tty": False,
        "OpenStdin": False,
        "HostConfig": host_config,
    }
    if spec.network:  # its only network: no default bridge, no host network
        config["NetworkingConfig"] = {"EndpointsConfig": {spec.network: {}}}
    return config
