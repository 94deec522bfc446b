"""What a sandbox is made of: limits from the caller, hardened defaults, names and labels.

Pure data; :class:`~edge_agent.sandbox.docker_runtime.DockerRuntime` turns a :class:`SandboxSpec` into
Docker API calls. A sandbox's egress (:class:`~edge_agent.egress.EgressSpec`) is part of its
limits and is recorded in the ``outpost.egress`` label (absent for mode ``none``), with the proxy
it was pointed at in ``outpost.egress_proxy``.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

from outpost_wire.frames import BlobMount, MemoryMount, Repository

from ..egress import EgressMode, EgressSpec

__all__ = [
    "LABEL_CLAIMED",
    "LABEL_EDGE_ID",
    "LABEL_EGRESS",
    "LABEL_EGRESS_PROXY",
    "LABEL_MANAGED",
    "LABEL_POOL",
    "LABEL_SESSION_ID",
    "LABEL_WORKSPACE",
    "SandboxLimits",
    "SandboxSpec",
    "claim_labels",
    "claim_volume_name",
    "container_name",
    "egress_labels",
    "network_name",
    "pool_labels",
    "pool_name",
    "sandbox_labels",
    "sanitize_name",
    "volume_name",
]

LABEL_MANAGED = "outpost.managed"
LABEL_EDGE_ID = "outpost.edge_id"
LABEL_SESSION_ID = "outpost.session_id"
LABEL_EGRESS = "outpost.egress"
LABEL_EGRESS_PROXY = "outpost.egress_proxy"
#: On warm-pool members and their volumes: the token of the manager that made them (a manager
#: removes members of any other token at start: they are never adopted for a session).
LABEL_POOL = "outpost.pool"
#: On a session's claim volume: the pool volume that is its workspace; on containers whose
#: workspace is not the session's default volume: that volume.
LABEL_WORKSPACE = "outpost.workspace"
#: On a session's claim volume: the pool member (container id) the session claimed.
LABEL_CLAIMED = "outpost.claimed"

_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]")
_MAX_NAME_PART = 48


@dataclass(frozen=True)
class SandboxLimits:
    """Resources the caller asks for; the edge's policy decides whether they are allowed.

    ``repositories``: the session's git repositories, cloned into the workspace when a sandbox is
    made (see :mod:`edge_agent.git`); they do not make an existing sandbox be replaced.
    ``memory_mounts``: the session's memory stores, bind-mounted at ``/mnt/memory/<slug>``
    (:mod:`.memory_mounts`); fixed for a session's life. ``blob_mounts``: its files and skills,
    read-only under ``/mnt/session`` and ``/mnt/skills`` (:mod:`.content_mounts`).
    """

    image: str
    cpus: float
    memory_bytes: int
    pids: int
    egress: EgressSpec = field(default_factory=EgressSpec)
    repositories: tuple[Repository, ...] = ()
    memory_mounts: tuple[MemoryMount, ...] = ()
    blob_mounts: tuple[BlobMount, ...] = ()


@dataclass(frozen=True)
class SandboxSpec:
    """Everything needed to create one sandbox container. Defaults are the hardened ones."""

    name: str
    image: str
    labels: Mapping[str, str]
    volume: str
    cpus: float
    memory_bytes: int
    pids: int
    user: str = "1000:1000"
    workdir: str = "/workspace"
    home: str = "/home/agent"
    network: str = ""  # the only network the container joins; "" = none (only lo)
    read_only_rootfs: bool = True
    tmp_bytes: int = 256 * 1024 * 1024
    home_bytes: int = 64 * 1024 * 1024
    command: tuple[str, ...] = ("sleep", "infinity")
    env: Mapping[str, str] = field(default_factory=dict)
    #: ``(host path, path in the sandbox, read only)``: bind mounts (the memory stores')
    binds: tuple[tuple[str, str, bool], ...] = ()

    @classmethod
    def for_session(
        cls,
        *,
        prefix: str,
        edge_id: str,
        session_id: str,
        limits: SandboxLimits,
        network: str = "",
        env: Mapping[str, str] | None = None,
        proxy_url: str = "",
        volume: str = "",
        binds: tuple[tuple[str, str, bool], ...] = (),
    ) -> SandboxSpec:
        """``network``/``env``/``proxy_url``: where egress control put the sandbox (see
        :meth:`edge_agent.egress.EgressController.attachment`). ``volume``: the workspace, when it
        is not the session's default volume (a claimed warm-pool member's)."""
        default_volume = volume_name(prefix, session_id)
        labels = {**sandbox_labels(edge_id, session_id), **egress_labels(limits.egress, proxy_url)}
        if volume and volume != default_volume:
            labels[LABEL_WORKSPACE] = volume
        return cls(
            name=container_name(prefix, session_id),
            image=limits.image,
            labels=labels,
            volume=volume or default_volume,
            cpus=limits.cpus,
            memory_bytes=limits.memory_bytes,
            pids=limits.pids,
            network=network,
            env=dict(env or {}),
            binds=binds,
        )

    @classmethod
    def for_pool(
        cls,
        *,
        prefix: str,
        edge_id: str,
        pool_token: str,
        limits: SandboxLimits,
        network: str = "",
        env: Mapping[str, str] | None = None,
        proxy_url: str = "",
    ) -> SandboxSpec:
        """A warm-pool member: like a session's sandbox, without any session label; its own
        volume (of the same name as the container) becomes the claiming session's workspace."""
        name = pool_name(prefix)
        return cls(
            name=name,
            image=limits.image,
            labels={**pool_labels(edge_id, pool_token, name), **egress_labels(limits.egress, proxy_url)},
            volume=name,
            cpus=limits.cpus,
            memory_bytes=limits.memory_bytes,
            pids=limits.pids,
            network=network,
            env=dict(env or {}),
        )

    @property
    def network_disabled(self) -> bool:
        return not self.network

    @property
    def uid(self) -> str:
        return self.user.partition(":")[0]

    @property
    def gid(self) -> str:
        user, _, group = self.user.partition(":")
        return group or user


def sanitize_name(text: str) -> str:
    """A Docker-safe name part for ``text``; distinct inputs give distinct outputs."""
    safe = _UNSAFE.sub("-", text).strip("-.") or "x"
    if safe != text or len(safe) > _MAX_NAME_PART:
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:10]
        safe = f"{safe[: _MAX_NAME_PART - 11]}-{digest}"
    if not safe[0].isalnum():
        safe = f"s{safe}"
    return safe


def volume_name(prefix: str, session_id: str) -> str:
    return f"{prefix}-ws-{sanitize_name(session_id)}"


def container_name(prefix: str, session_id: str) -> str:
    # A random suffix: a replacement may be created while a dead predecessor is still listed.
    return f"{prefix}-sb-{sanitize_name(session_id)}-{secrets.token_hex(3)}"


def pool_name(prefix: str) -> str:
    """A warm-pool member's container and volume name (``-wp-`` never clashes with ``-ws-``)."""
    return f"{prefix}-wp-{secrets.token_hex(6)}"


def claim_volume_name(prefix: str, session_id: str) -> str:
    """The empty volume that records, in its labels, which pool member a session claimed."""
    return f"{prefix}-claim-{sanitize_name(session_id)}"


def pool_labels(edge_id: str, pool_token: str, volume: str) -> dict[str, str]:
    return {LABEL_MANAGED: "1", LABEL_EDGE_ID: edge_id, LABEL_POOL: pool_token, LABEL_WORKSPACE: volume}


def claim_labels(edge_id: str, session_id: str, container_id: str, volume: str) -> dict[str, str]:
    return {**sandbox_labels(edge_id, session_id), LABEL_CLAIMED: container_id, LABEL_WORKSPACE: volume}


def sandbox_labels(edge_id: str, session_id: str) -> dict[str, str]:
    return {LABEL_MANAGED: "1", LABEL_EDGE_ID: edge_id, LABEL_SESSION_ID: session_id}


def network_name(prefix: str, edge_id: str, mode: EgressMode) -> str:
    """The per-edge network for ``mode`` (``allowlist`` or ``unrestricted``)."""
    kind = "egress" if mode is EgressMode.ALLOWLIST else "open"
    return f"{prefix}-{kind}-{sanitize_name(edge_id)}"


def egress_labels(egress: EgressSpec, proxy_url: str = "") -> dict[str, str]:
    """Labels recording a sandbox's egress; none for mode ``none`` (as before egress existed)."""
    if egress.mode is EgressMode.NONE:
        return {}
    labels = {LABEL_EGRESS: egress.to_label()}
    if proxy_url:
        labels[LABEL_EGRESS_PROXY] = proxy_url
    return labels
