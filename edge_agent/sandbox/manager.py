"""SandboxManager: one Docker container per session, made lazily, frozen when idle, replaced when dead.

Lifecycle of a session's sandbox::

    (none) --provision/execute--> running --idle_pause_s without calls--> paused
       ^                           |   ^                                     |
       |                           |   +---------- execute (unpause) -------+
       |                     dies (kill, OOM, daemon exit)
       |                           v
       +------ next call: remove the dead container, create a new one on the same volume

The workspace lives on a per-session named volume, so a replacement container sees the same files.
Containers and volumes carry labels (``outpost.managed``, ``outpost.edge_id``,
``outpost.session_id``): a restarted edge finds its containers again with :meth:`reconcile`.
The engine is a :class:`~.container_runtime.ContainerRuntime` given to the constructor (Docker in
production, an in-memory fake in unit tests).

A tool call (a :class:`~.tool_call.ToolCall`, checked at the edge's door) goes through a held
channel to the in-sandbox daemon (:mod:`.channel`): no Docker API call on the hot path, except
``unpause`` after an idle period. The call's one deadline covers making the sandbox ready and the
tool's run.

Egress (:mod:`edge_agent.egress`) is part of a sandbox's limits and fixed at creation: the
manager asks its :class:`~edge_agent.egress.EgressController` where to attach the container,
registers an allowlist sandbox's address with the proxy and revokes it when the sandbox goes. A
request with a different egress spec replaces the container (same workspace volume). Reconcile
re-registers adopted sandboxes (the proxy rebinds its previous port) and removes the edge's
networks no sandbox uses.

Repositories (:mod:`edge_agent.git`): when the manager makes a sandbox whose limits name
repositories, its :class:`~edge_agent.git.GitService` clones each one into the workspace before the
sandbox runs anything (a mount path that already has files is left alone); a clone failure
discards the new container and raises the typed :class:`~edge_agent.errors.RepositoryError`. Every
call refreshes the session's entries in the git relay, which the egress proxy serves.

Warm pool (:mod:`.pool`, ``warm_pool_size``): a session without a workspace yet whose limits match
the pool's template claims a paused member instead of starting a container: the claim is recorded
in the session's claim volume, the member is unpaused (and renamed after the session) and its
open channel is used at once; the member's volume is the session's workspace from then on (a
replacement container mounts it, ``destroy`` removes it). Pool members are not sessions'
sandboxes: :meth:`SandboxManager.in_use` (reported to the control plane) counts only sessions',
:meth:`SandboxManager.pooled` the members. Containers of both kinds share ``max_sandboxes``: the
pool only grows into free slots, and a cold start that finds the edge full evicts a member.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from outpost_wire.results import ToolResult

from ..egress import EgressController, EgressMode, EgressSpec, ProxyLimits, Resolver
from ..errors import CapacityExhausted, PolicyDenied, RepositoryError, SandboxUnavailable
from ..git import GitService
from .channel import CallTimeout, DaemonChannel
from .container_runtime import ContainerRecord, ContainerRuntime
from .content_mounts import ContentMounts
from .idle import IdlePauser
from .memory_mounts import MemoryMounts
from .pool import PoolMember, WarmPool
from .sandboxd import QUOTA_ENV
from .session_sandbox import ALIVE_STATES, SessionLocks, SessionSandbox
from .spec import (
    LABEL_CLAIMED,
    LABEL_EDGE_ID,
    LABEL_EGRESS,
    LABEL_EGRESS_PROXY,
    LABEL_MANAGED,
    LABEL_POOL,
    LABEL_SESSION_ID,
    LABEL_WORKSPACE,
    SandboxLimits,
    SandboxSpec,
    claim_labels,
    claim_volume_name,
    container_name,
    network_name,
    sandbox_labels,
    volume_name,
)
from .tool_call import ToolCall

__all__ = ["ReconcileReport", "SandboxInfo", "SandboxManager"]

log = logging.getLogger(__name__)

# Tools without side effects: retried once, in a replacement sandbox, if the sandbox dies under them.
_IDEMPOTENT_TOOLS = frozenset({"read", "glob", "grep"})


@dataclass(frozen=True)
class SandboxInfo:
    sandbox_id: str  # the container id
    session_id: str
    image: str
    reused: bool


@dataclass
class ReconcileReport:
    """What :meth:`SandboxManager.reconcile` did, by container id (networks by name)."""

    reattached: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    networks_removed: list[str] = field(default_factory=list)
    #: volumes of warm-pool members of a previous run that no session claimed
    volumes_removed: list[str] = field(default_factory=list)


class SandboxManager:
    """Provisions, runs tool calls in, pauses, reattaches and destroys session sandboxes.

    Use it as an async context manager, or call :meth:`start` and :meth:`close`.
    """

    def __init__(
        self,
        runtime: ContainerRuntime,
        *,
        edge_id: str,
        idle_pause_s: float = 30.0,
        max_sandboxes: int = 8,
        default_limits: SandboxLimits,
        name_prefix: str = "outpost",
        egress_limits: ProxyLimits | None = None,
        egress_resolver: Resolver | None = None,
        git: GitService | None = None,
        on_provisioned: Callable[[str, float], None] | None = None,
        workspace_quota_bytes: int = 0,
        warm_pool_size: int = 0,
        memory: MemoryMounts | None = None,
        content: ContentMounts | None = None,
    ) -> None:
        """``runtime``: the container engine (owned by the caller, who closes it after the manager);
        the manager hands it on to its warm pool, egress controller, git service and channels.
        ``egress_limits``/``egress_resolver``: for the egress proxy (the resolver is a test hook;
        the default is the host's resolver). ``git``: clones repositories and relays pull/push
        (owned by the caller, who closes it after the manager); None = repositories are refused.
        ``on_provisioned(kind, seconds)``: told each time a sandbox was made ready for a call,
        ``cold`` (a new container, up to its open channel), ``claim`` (a warm-pool member taken) or
        ``resume`` (a paused or detached one).
        ``workspace_quota_bytes``: the soft size quota sandboxd enforces on ``/workspace`` (0 = none).
        ``warm_pool_size``: paused sandboxes kept ready for new sessions (0 = no pool), at most
        ``max_sandboxes``; see :mod:`.pool`. ``memory``: the host side of memory-store mounts
        (:mod:`.memory_mounts`); None = a spec naming memory stores is refused. ``content``: the
        host side of files and skills (:mod:`.content_mounts`), mounted in a sandbox made afresh for
        a session that has files or skills; None = none."""
        if not edge_id:
            raise ValueError("edge_id must not be empty")
        if max_sandboxes < 1:
            raise ValueError("max_sandboxes must be at least 1")
        if idle_pause_s <= 0:
            raise ValueError("idle_pause_s must be positive")
        if workspace_quota_bytes < 0:
            raise ValueError("workspace_quota_bytes must not be negative")
        if warm_pool_size < 0:
            raise ValueError("warm_pool_size must not be negative")
        self._runtime = runtime
        self._edge_id = edge_id
        self._max_sandboxes = max_sandboxes
        self.default_limits = default_limits
        self._prefix = name_prefix
        self._edge_labels = {LABEL_MANAGED: "1", LABEL_EDGE_ID: edge_id}
        self._egress = EgressController(
            runtime,
            labels=self._edge_labels,
            allowlist_network=network_name(name_prefix, edge_id, EgressMode.ALLOWLIST),
            open_network=network_name(name_prefix, edge_id, EgressMode.UNRESTRICTED),
            proxy_limits=egress_limits,
            resolver=egress_resolver,
            local=git.local_service() if git is not None else None,
        )
        self._git = git
        self.memory = memory
        self.content = content
        self._on_provisioned = on_provisioned
        self._workspace_quota_bytes = workspace_quota_bytes
        self._sandboxes: dict[str, SessionSandbox] = {}
        self._workspaces: dict[str, str] = {}  # session id -> its workspace volume, once it has one
        self._locks = SessionLocks()
        self._reserved = 0  # creations in progress, counted against max_sandboxes
        self._idle = IdlePauser(runtime, self._sandboxes, self._locks, idle_pause_s)
        self._started = False
        self._closed = False
        self.user = "1000:1000"
        self.workdir = "/workspace"
        self._background: set[asyncio.Task[None]] = set()
        self._pool_token = secrets.token_hex(8)  # this manager's pool members carry it
        self._pool: WarmPool | None = None
        if warm_pool_size:
            self._pool = WarmPool(
                runtime,
                self._egress,
                size=min(warm_pool_size, max_sandboxes),
                edge_id=edge_id,
                prefix=name_prefix,
                open_channel=self._open_channel,
                room=self._pool_has_room,
                token=self._pool_token,
            )

    # lifecycle -------------------------------------------------------------------------------

    async def __aenter__(self) -> SandboxManager:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Reattach or clean up this edge's containers, then start pausing idle sandboxes."""
        self._check_open()
        if self._started:
            return
        self._started = True
        report = await self.reconcile()
        if report.reattached or report.removed:
            log.info(
                "edge %s: reattached %d sandbox(es), removed %d dead one(s)",
                self._edge_id,
                len(report.reattached),
                len(report.removed),
            )
        self._idle.start(f"sandbox-idle-{self._edge_id}")
        if self._pool is not None:
            self._pool.start(self.default_limits)

    async def close(self) -> None:
        """Stop the idle loop, remove the warm pool's members and close every channel. Sessions'
        containers are kept (see :meth:`reconcile`)."""
        if self._closed:
            return
        self._closed = True
        if self._pool is not None:
            await self._pool.close()
            await self._sweep_pool()
        await asyncio.gather(*self._background, return_exceptions=True)
        await self._idle.close()
        channels = [sb.channel for sb in self._sandboxes.values() if sb.channel is not None]
        await asyncio.gather(*(channel.close() for channel in channels), return_exceptions=True)
        self._sandboxes.clear()
        await self._egress.close()

    async def _sweep_pool(self) -> None:
        """Remove any unclaimed container or volume with this manager's pool token that the pool
        lost track of (one whose removal failed, or that Docker finished making as it closed).
        A claimed member's volume is its session's workspace: it and its container stay."""
        workspaces = set(self._workspaces.values())
        labels = {**self._edge_labels, LABEL_POOL: self._pool_token}
        try:
            for record in await self._runtime.list_containers(labels):
                if record.labels.get(LABEL_WORKSPACE) not in workspaces:
                    await self._remove_quietly(record.id)
            for name in await self._runtime.list_volume_labels(labels):
                if name not in workspaces:
                    with contextlib.suppress(SandboxUnavailable):
                        await self._runtime.remove_volume(name)
        except SandboxUnavailable as exc:
            log.warning("warm pool: could not sweep its members: %s", exc)

    def _held(self) -> int:
        """Containers counted against ``max_sandboxes``: sessions', being made or claimed, pooled."""
        pool = self._pool
        pooled = pool.ready + pool.creating if pool is not None else 0
        return len(self._sandboxes) + self._reserved + pooled

    def _pool_has_room(self) -> bool:
        return not self._closed and self._held() < self._max_sandboxes

    @property
    def edge_id(self) -> str:
        return self._edge_id

    @property
    def runtime(self) -> ContainerRuntime:
        """The container engine this manager drives (the caller's)."""
        return self._runtime

    @property
    def egress(self) -> EgressController:
        """The edge's networks and egress proxy."""
        return self._egress

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxUnavailable("the sandbox manager is closed")

    # reconcile -------------------------------------------------------------------------------

    async def reconcile(self) -> ReconcileReport:
        """Adopt this edge's running or paused containers (unpausing them); remove the dead ones.

        Channels to adopted containers are opened lazily, on their next call. Volumes are kept:
        a session whose container died gets a new one on its old workspace. An adopted sandbox
        whose egress cannot be restored exactly (unreadable label, unexpected networks, proxy port
        taken) is removed instead. Networks of this edge that no sandbox uses are removed.
        """
        self._check_open()
        report = ReconcileReport()
        volumes = await self._runtime.list_volume_labels(self._edge_labels)
        claims: dict[str, str] = {}  # claimed pool member (container id) -> session id
        for name, labels in volumes.items():
            sid = labels.get(LABEL_SESSION_ID)
            if not sid:
                continue
            if labels.get(LABEL_CLAIMED) and labels.get(LABEL_WORKSPACE):
                claims[labels[LABEL_CLAIMED]] = sid
                self._workspaces[sid] = labels[LABEL_WORKSPACE]  # a claim names the workspace
            elif sid not in self._workspaces:
                self._workspaces[sid] = name
        records = await self._runtime.list_containers(self._edge_labels)
        alive: dict[str, list[ContainerRecord]] = {}
        for record in records:
            session_id = record.labels.get(LABEL_SESSION_ID) or claims.get(record.id)
            pool_token = record.labels.get(LABEL_POOL)
            if pool_token is not None and record.id not in claims:
                # An unclaimed warm-pool member: ours (in the pool now), or stale: never adopted.
                if pool_token != self._pool_token and await self._remove_quietly(record.id):
                    report.removed.append(record.id)
                continue
            if record.state in ALIVE_STATES and session_id:
                alive.setdefault(session_id, []).append(record)
            elif await self._remove_quietly(record.id):
                report.removed.append(record.id)
        alive_ids = {record.id for rows in alive.values() for record in rows}
        for sb in list(self._sandboxes.values()):
            if sb.container_id not in alive_ids:
                await self._forget(sb)
        for session_id, rows in alive.items():
            async with self._locks.hold(session_id):
                await self._adopt(session_id, rows, report)
        workspaces = set(self._workspaces.values())
        for name, labels in volumes.items():
            token = labels.get(LABEL_POOL)
            if token is not None and token != self._pool_token and name not in workspaces:
                with contextlib.suppress(SandboxUnavailable):
                    if await self._runtime.remove_volume(name):
                        report.volumes_removed.append(name)
        if self._pool is not None:
            self._pool.wake()
        if not self._reserved:  # a sandbox being created may be on a network nobody else uses yet
            in_use = {sb.network for sb in self._sandboxes.values() if sb.network}
            report.networks_removed = await self._egress.collect(in_use)
        return report

    async def _adopt(self, session_id: str, rows: list[ContainerRecord], report: ReconcileReport) -> None:
        tracked = self._sandboxes.get(session_id)
        keep_id = tracked.container_id if tracked is not None else None
        if keep_id not in {record.id for record in rows}:
            rows.sort(key=lambda record: record.state != "running")  # prefer a running one
            keep_id = rows[0].id
        for record in rows:
            cid = record.id
            if cid != keep_id:
                if await self._remove_quietly(cid):
                    report.removed.append(cid)
                continue
            if tracked is not None and tracked.container_id == cid:
                continue  # already ours
            sb = await self._adopt_egress(session_id, record)
            try:
                if sb is None:
                    raise SandboxUnavailable("its egress cannot be restored")
                if record.state == "paused":
                    await self._runtime.unpause(cid)
            except SandboxUnavailable as exc:
                log.warning("sandbox %s of session %s cannot be resumed: %s", cid[:12], session_id, exc)
                if sb is not None:
                    self._egress.revoke(sb.address, session_id)
                if await self._remove_quietly(cid):
                    report.removed.append(cid)
                continue
            self._sandboxes[session_id] = sb
            report.reattached.append(cid)

    async def _adopt_egress(self, session_id: str, record: ContainerRecord) -> SessionSandbox | None:
        """The adopted container as a tracked sandbox with its egress restored, or None."""
        try:
            egress = EgressSpec.from_label(record.labels.get(LABEL_EGRESS))
            network, address = await self._egress.restore(
                session_id,
                egress,
                proxy_url=record.labels.get(LABEL_EGRESS_PROXY, ""),
                networks=record.networks,
            )
        except (ValueError, SandboxUnavailable) as exc:
            log.warning("sandbox %s: egress cannot be restored: %s", record.id[:12], exc)
            return None
        return SessionSandbox(
            session_id, record.id, record.image, egress=egress, network=network, address=address
        )

    # provisioning ----------------------------------------------------------------------------

    async def provision(self, session_id: str, limits: SandboxLimits) -> SandboxInfo:
        """Return the session's sandbox, creating it if needed (``reused`` tells which).

        Raises :class:`CapacityExhausted` when ``max_sandboxes`` are in use, and
        :class:`SandboxUnavailable` when Docker cannot create or reach it.
        """
        self._check_open()
        async with self._locks.hold(session_id):
            sb, reused = await self._ensure(session_id, limits)
        return SandboxInfo(sandbox_id=sb.container_id, session_id=session_id, image=sb.image, reused=reused)

    async def _ensure(self, session_id: str, limits: SandboxLimits) -> tuple[SessionSandbox, bool]:
        """With the session's lock held: a ready sandbox (running, channel open)."""
        if self._git is not None:
            self._git.remember(session_id, limits.repositories)
        sb = self._sandboxes.get(session_id)
        if sb is not None and sb.egress != limits.egress:
            log.info(
                "session %s: egress changed from %s to %s; replacing sandbox %s (workspace kept)",
                session_id,
                sb.egress.mode.value,
                limits.egress.mode.value,
                sb.short_id,
            )
            await self._discard(sb)
            sb = None
        if sb is not None:
            if sb.channel is not None and not sb.paused and not sb.broken and not sb.channel.closed:
                return sb, True  # the hot path: no awaits
            try:
                started = time.monotonic()
                await self._make_ready(sb)
                self._provisioned("resume", started)
                return sb, True
            except SandboxUnavailable as exc:
                log.info("sandbox %s of session %s is gone (%s); replacing it", sb.short_id, session_id, exc)
                await self._discard(sb)
        pool = self._pool
        # A new session may claim a pool member (not one with memory mounts: a member has none).
        if pool is not None and session_id not in self._workspaces and not _mounts(limits):
            member = pool.take(limits)
            if member is not None:
                started = time.monotonic()
                self._reserved += 1  # neither the pool's nor the session's yet: still counted
                try:
                    claimed = await _finish(self._claim(session_id, member, limits))
                except SandboxUnavailable as exc:
                    log.warning("session %s: pooled sandbox %s failed: %s", session_id, member.short_id, exc)
                else:
                    self._provisioned("claim", started)
                    return claimed, False
                finally:
                    self._reserved -= 1
                    pool.wake()  # refill
        started = time.monotonic()
        created = await _finish(self._create(session_id, limits))
        self._provisioned("cold", started)
        if pool is not None and not pool.matches(limits):
            pool.retarget(limits)  # this environment's sandboxes look like this one now
        return created, False

    def _provisioned(self, kind: str, started: float) -> None:
        if self._on_provisioned is not None:
            self._on_provisioned(kind, time.monotonic() - started)

    async def _make_ready(self, sb: SessionSandbox) -> None:
        if sb.broken or (sb.channel is not None and sb.channel.closed):
            state = await self._runtime.container_state(sb.container_id)
            if state not in ALIVE_STATES:
                raise SandboxUnavailable(f"container is {state or 'gone'}")
            if sb.channel is not None:
                await sb.channel.close()
                sb.channel = None
            sb.paused = state == "paused"
            sb.broken = False
        if sb.paused:
            await self._runtime.unpause(sb.container_id)
            sb.paused = False
        if sb.channel is None:
            sb.channel = await self._open_channel(sb.container_id)

    async def _claim(self, session_id: str, member: PoolMember, limits: SandboxLimits) -> SessionSandbox:
        """Make the pool ``member`` the session's sandbox: record the claim, resume it. On any
        failure the member is removed (never returned to the pool) and the error raised."""
        cid = member.container_id
        marker = claim_volume_name(self._prefix, session_id)
        channel, member.channel = member.channel, None
        address = ""
        try:
            outcomes = await asyncio.gather(
                self._runtime.ensure_volume(
                    marker, claim_labels(self._edge_id, session_id, cid, member.volume)
                ),
                self._runtime.unpause(cid),
                return_exceptions=True,
            )
            for outcome in outcomes:
                if isinstance(outcome, BaseException):
                    raise outcome
            if limits.egress.mode is EgressMode.ALLOWLIST:
                address = await self._egress.grant_container(cid, session_id, limits.egress)
            if channel is None or channel.closed:
                if channel is not None:
                    await channel.close()
                channel = None
                channel = await self._open_channel(cid)
        except BaseException:
            if address:
                self._egress.revoke(address, session_id)
            if channel is not None:
                await channel.close()
            await self._remove_quietly(cid)
            for volume in (marker, member.volume):
                with contextlib.suppress(SandboxUnavailable):
                    await self._runtime.remove_volume(volume)
            raise
        sb = SessionSandbox(
            session_id, cid, member.image, egress=limits.egress, network=member.network, address=address
        )
        sb.channel = channel
        self._sandboxes[session_id] = sb
        self._workspaces[session_id] = member.volume
        # Named after the session for operators (`docker ps`), off the claim's critical path.
        self._in_background(self._rename(cid, container_name(self._prefix, session_id)))
        log.debug("session %s: claimed pooled sandbox %s", session_id, sb.short_id)
        return sb

    async def _rename(self, container_id: str, name: str) -> None:
        try:
            await self._runtime.rename(container_id, name)
        except SandboxUnavailable as exc:
            log.info("sandbox %s keeps its pool name: %s", container_id[:12], exc)

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _create(self, session_id: str, limits: SandboxLimits) -> SessionSandbox:
        if self._pool is not None:
            await self._pool.settle()
        in_use = len(self._sandboxes) + self._reserved
        if in_use >= self._max_sandboxes:
            raise CapacityExhausted(
                f"this edge already runs {in_use} sandbox(es) (max_sandboxes={self._max_sandboxes})"
            )
        self._reserved += 1
        try:
            while self._pool is not None and self._held() > self._max_sandboxes:
                if not await self._pool.evict():  # idle pool members never hold a session's slot
                    break
            attachment = await self._egress.attachment(limits.egress)
            spec = SandboxSpec.for_session(
                prefix=self._prefix,
                edge_id=self._edge_id,
                session_id=session_id,
                limits=limits,
                network=attachment.network if attachment else "",
                env=attachment.env if attachment else None,
                proxy_url=attachment.proxy_url if attachment else "",
                volume=self._workspaces.get(session_id, ""),
                binds=await self._memory_binds(session_id, limits),
            )
            if spec.volume == volume_name(self._prefix, session_id):
                await self._runtime.ensure_volume(spec.volume, sandbox_labels(self._edge_id, session_id))
            self._workspaces[session_id] = spec.volume
            container_id = await self._runtime.create_container(spec)
            address = ""
            try:
                if limits.egress.mode is EgressMode.ALLOWLIST:
                    address = await self._egress.grant_container(container_id, session_id, limits.egress)
                if limits.repositories:
                    await self._populate(container_id, session_id, limits, spec.labels)
                channel = await self._open_channel(container_id)
            except BaseException:
                if address:
                    self._egress.revoke(address, session_id)
                await self._remove_quietly(container_id)
                raise
            sb = SessionSandbox(
                session_id,
                container_id,
                spec.image,
                egress=limits.egress,
                network=spec.network,
                address=address,
            )
            sb.channel = channel
            self._sandboxes[session_id] = sb
            log.debug("session %s: sandbox %s created", session_id, sb.short_id)
            return sb
        finally:
            self._reserved -= 1

    async def _memory_binds(
        self, session_id: str, limits: SandboxLimits
    ) -> tuple[tuple[str, str, bool], ...]:
        # Only for a session with files or skills: a bind mount's source must exist on the Docker
        # host, which an edge that does not share the host's filesystem cannot give (systemd in a
        # container, the edge's own container with a named volume), so sessions without them
        # must not depend on it.
        content: tuple[tuple[str, str, bool], ...] = ()
        if self.content is not None and limits.blob_mounts:
            content = await asyncio.to_thread(self.content.binds, session_id)
        if not limits.memory_mounts:
            return content
        if self.memory is None:
            raise PolicyDenied("sandbox.memory", "this edge does not mount memory stores")
        return content + await asyncio.to_thread(self.memory.binds, session_id, limits.memory_mounts)

    async def _populate(
        self, container_id: str, session_id: str, limits: SandboxLimits, labels: Mapping[str, str]
    ) -> None:
        """Clone the session's repositories into the new sandbox's workspace."""
        if self._git is None:
            raise RepositoryError(limits.repositories[0].url, "this edge does not clone repositories")
        await self._git.populate(
            self._runtime,
            container_id,
            session_id,
            limits.repositories,
            relay_base=labels.get(LABEL_EGRESS_PROXY, ""),
        )

    async def _open_channel(self, container_id: str) -> DaemonChannel:
        env = {QUOTA_ENV: str(self._workspace_quota_bytes)} if self._workspace_quota_bytes else None
        return await DaemonChannel.open(
            self._runtime, container_id, user=self.user, workdir=self.workdir, env=env
        )

    async def _discard(self, sb: SessionSandbox) -> None:
        """Forget a dead sandbox and remove its container (never its volume)."""
        await self._forget(sb)
        await self._remove_quietly(sb.container_id)

    async def _forget(self, sb: SessionSandbox) -> None:
        if self._sandboxes.get(sb.session_id) is sb:
            del self._sandboxes[sb.session_id]
        if sb.address:
            self._egress.revoke(sb.address, sb.session_id)
        if sb.channel is not None:
            await sb.channel.close()
            sb.channel = None

    async def _remove_quietly(self, container_id: str) -> bool:
        try:
            return await self._runtime.remove_container(container_id)
        except SandboxUnavailable as exc:
            log.warning("could not remove sandbox %s: %s", container_id[:12], exc)
            return False

    # tool calls ------------------------------------------------------------------------------

    async def execute(self, call: ToolCall, limits: SandboxLimits) -> ToolResult:
        """Run one checked tool call in the session's sandbox, provisioning or resuming it as
        needed, all by ``call.deadline`` (making the sandbox ready counts against it).

        A tool failure, a timeout and a sandbox that dies mid-call are all tool errors
        (``is_error``); a read-only tool (read, glob, grep) whose sandbox dies is retried once in
        the replacement instead, by the same deadline. Only failing to provision raises
        (:class:`CapacityExhausted`, :class:`SandboxUnavailable`).
        """
        self._check_open()
        session_id, tool = call.session_id, call.tool
        attempts = 2 if tool in _IDEMPOTENT_TOOLS else 1
        while True:
            attempts -= 1
            started = time.monotonic()
            budget = asyncio.timeout_at(call.deadline)
            try:
                async with budget, self._locks.hold(session_id):
                    sb, _ = await self._ensure(session_id, limits)
            except TimeoutError:
                if not budget.expired():
                    raise
                return ToolResult.error(
                    f"{tool}: the call's deadline passed while its sandbox was being made ready "
                    f"(after {time.monotonic() - started:.1f}s); the tool did not run"
                )
            channel = sb.channel
            assert channel is not None
            sb.inflight += 1  # no await since the lock was let go: the idle pauser sees it
            try:
                return await channel.call(call)
            except CallTimeout as exc:
                return ToolResult.error(f"{tool}: {exc.message}")
            except SandboxUnavailable as exc:
                if self._closed:
                    return ToolResult.error(f"{tool}: interrupted, the edge agent is shutting down")
                sb.broken = True
                if attempts > 0:
                    log.info("session %s: sandbox %s died; retrying %s", session_id, sb.short_id, tool)
                    continue  # a read-only tool is safe to run again, in the replacement
                return ToolResult.error(
                    f"sandbox {sb.short_id} died during the call ({exc.message}); "
                    "the next call starts a new sandbox on the same workspace"
                )
            finally:
                sb.inflight -= 1
                sb.last_used = time.monotonic()

    # teardown --------------------------------------------------------------------------------

    async def destroy(self, session_id: str) -> bool:
        """Remove the session's container and its workspace volume; False if neither existed."""
        self._check_open()
        async with self._locks.hold(session_id):
            if self._git is not None:
                self._git.forget(session_id)
            sb = self._sandboxes.get(session_id)
            if sb is not None:
                await self._forget(sb)
            removed = False
            labels = {**self._edge_labels, LABEL_SESSION_ID: session_id}
            ids = {record.id for record in await self._runtime.list_containers(labels)}
            if sb is not None:
                ids.add(sb.container_id)
            workspaces = {volume_name(self._prefix, session_id)}
            workspace = self._workspaces.pop(session_id, None)
            if workspace:
                workspaces.add(workspace)
            markers = []
            for name, volume_labels in (await self._runtime.list_volume_labels(labels)).items():
                if volume_labels.get(LABEL_CLAIMED):  # a claim: the pool member and its volume
                    ids.add(volume_labels[LABEL_CLAIMED])
                    workspaces.add(volume_labels.get(LABEL_WORKSPACE) or name)
                    markers.append(name)
                else:
                    workspaces.add(name)
            for container_id in ids:
                removed = await self._runtime.remove_container(container_id) or removed
            for name in sorted(workspaces):
                removed = await self._runtime.remove_volume(name) or removed
            for name in markers:  # last: until its workspace is gone, the claim names it
                await self._runtime.remove_volume(name)
        if self._pool is not None:
            self._pool.wake()
        return removed

    def in_use(self) -> int:
        """Sessions' sandboxes this manager tracks (running or paused): what the control plane
        is told. Warm-pool members are not counted (see :meth:`pooled`)."""
        return len(self._sandboxes)

    def pooled(self) -> int:
        """Warm-pool members paused and ready for new sessions."""
        return self._pool.ready if self._pool is not None else 0


def _mounts(limits: SandboxLimits) -> bool:
    """Whether the session mounts anything (a warm-pool member has no mounts)."""
    return bool(limits.memory_mounts or limits.blob_mounts)


async def _finish(work: Awaitable[SessionSandbox]) -> SessionSandbox:
    """Await ``work`` (a creation or a claim); if the caller is cancelled meanwhile, let it finish
    first so its container is tracked, not leaked, then give up."""
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(BaseException):
            await task
        raise
