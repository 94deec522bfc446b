"""What the sandbox manager needs from a container engine: the :class:`ContainerRuntime` protocol
and the values it returns.

:class:`~edge_agent.sandbox.docker_runtime.DockerRuntime` implements it for Docker: the edge's entry point
(:mod:`edge_agent.daemon`) makes one and hands it to the
:class:`~edge_agent.sandbox.manager.SandboxManager`, which passes it on to its warm pool, its
egress controller, its git service and the channels to ``sandboxd``. The manager's unit tests use
an in-memory fake (``tests/support/fake_runtime.py``). Nothing here imports an engine library.

Every method is a coroutine; a failing engine raises
:class:`~edge_agent.errors.SandboxUnavailable`, never its library's own errors.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..egress.controller import NetworkBackend
from ..git import WorkspaceBackend
from .spec import SandboxSpec

__all__ = ["ContainerRecord", "ContainerRuntime", "ExecStream"]


@dataclass(frozen=True)
class ContainerRecord:
    """One row of a label-filtered container listing."""

    id: str
    state: str  # created | running | paused | restarting | removing | exited | dead
    labels: Mapping[str, str]
    image: str
    networks: Mapping[str, str] = field(default_factory=dict)  # network name -> IPv4 address


class ExecStream:
    """The duplex byte stream of an attached exec (stdin in; Docker's multiplexed stdout and
    stderr out): a stream socket.

    ``keepalive``: an object that must live as long as the socket (the Docker SDK keeps a file
    object over it, which defers ``socket.close()``); :meth:`close` shuts the connection down first
    (the exec sees EOF on its stdin at once) and then closes both.
    """

    def __init__(self, sock: socket.socket, keepalive: Any = None) -> None:
        self.sock = sock
        self._keepalive = keepalive

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        close = getattr(self._keepalive, "close", None)
        if callable(close):
            with contextlib.suppress(OSError):
                close()


class ContainerRuntime(NetworkBackend, WorkspaceBackend, Protocol):
    """The container operations of the sandbox manager and its warm pool, plus those of egress
    (:class:`~edge_agent.egress.NetworkBackend`: networks, a container's address) and of the
    git service (:class:`~edge_agent.git.WorkspaceBackend`: a short exec, copying files in).

    Containers and volumes are found again by their labels (:mod:`.spec`); a container's state is
    the engine's word: ``created``, ``running``, ``paused``, ``exited`` ...
    """

    # volumes ---------------------------------------------------------------------------------

    async def ensure_volume(self, name: str, labels: Mapping[str, str]) -> None:
        """Create the named volume if it does not exist (an existing one is left as it is)."""
        ...

    async def remove_volume(self, name: str) -> bool:
        """Remove the volume; False if it did not exist. Raises if a container still uses it."""
        ...

    async def list_volume_labels(self, labels: Mapping[str, str]) -> dict[str, dict[str, str]]:
        """Volumes carrying ``labels``: name -> all its labels."""
        ...

    # containers ------------------------------------------------------------------------------

    async def create_container(self, spec: SandboxSpec) -> str:
        """Create and start a hardened container for ``spec`` (its volume mounted); its id."""
        ...

    async def container_state(self, container_id: str) -> str | None:
        """The container's state, or None if it is gone."""
        ...

    async def list_containers(self, labels: Mapping[str, str]) -> list[ContainerRecord]:
        """Containers carrying ``labels``, in any state."""
        ...

    async def pause(self, container_id: str) -> None: ...

    async def unpause(self, container_id: str) -> None: ...

    async def rename(self, container_id: str, name: str) -> None: ...

    async def remove_container(self, container_id: str) -> bool:
        """Force-remove (kills it if running or paused); False if it did not exist."""
        ...

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
        """Start ``cmd`` in the running container with stdin attached; the raw duplex stream
        (what :class:`~edge_agent.sandbox.channel.DaemonChannel` speaks to ``sandboxd`` over)."""
        ...
