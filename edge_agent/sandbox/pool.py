"""The warm pool: paused sandboxes made ahead of sessions, so that a new session's first call costs
a claim and a resume instead of a container start.

Lifecycle of a member::

    (none) --fill--> creating --sandboxd ready, then paused--> ready --take--> the claiming session's
                        |                                        |          (SandboxManager owns it)
                        +-- template changed, no room, close ----+--> removed (container and volume)

A member is made exactly like a session's sandbox (image, limits, hardening, egress network and
proxy environment, an open channel to its ``sandboxd``), with its own workspace volume and without
any session label. Docker cannot relabel a container, so the :class:`SandboxManager` records a
claim in a labelled *claim volume* (see :func:`~edge_agent.sandbox.spec.claim_labels`) and the
member's volume stays the session's workspace for good. Members carry the pool token of the
manager that made them (``outpost.pool``): a restarted edge removes every unclaimed member of
another token, never adopting one for a session. A member is taken at most once; nothing is ever
returned to the pool.

The pool makes members from a *template*: the limits of the edge's default sandbox, then those of
the last session that did not match (an edge serves one environment, whose sessions share a
spec). A session with other limits, or with repositories to clone, starts cold. The pool refills
in the background, one member at a time, ``refill_delay_s`` after a claim (a container start
costs a few hundred ms of CPU, which the claiming session's turn should not share), and only
while the manager says there is room (``room()``): idle members never hold a slot a session
needs (the manager evicts one instead).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from ..egress import EgressController
from ..errors import SandboxUnavailable
from .channel import DaemonChannel
from .container_runtime import ContainerRuntime
from .spec import SandboxLimits, SandboxSpec, pool_labels

__all__ = ["PoolMember", "WarmPool"]

log = logging.getLogger(__name__)

_RETRY_INITIAL_S = 1.0
_RETRY_MAX_S = 60.0


@dataclass
class PoolMember:
    """One paused container of the pool, with its workspace volume and open channel."""

    container_id: str
    volume: str
    image: str
    limits: SandboxLimits
    network: str
    channel: DaemonChannel | None

    @property
    def short_id(self) -> str:
        return self.container_id[:12]


class WarmPool:
    """Keeps up to ``size`` paused members ready. Owned by the :class:`SandboxManager`."""

    def __init__(
        self,
        runtime: ContainerRuntime,
        egress: EgressController,
        *,
        size: int,
        edge_id: str,
        prefix: str,
        open_channel: Callable[[str], Awaitable[DaemonChannel]],
        room: Callable[[], bool],
        token: str | None = None,
        refill_delay_s: float = 1.0,
    ) -> None:
        """``open_channel(container_id)``: start sandboxd in a member (the manager's way).
        ``room()``: whether one more container fits under the edge's ``max_sandboxes``.
        ``refill_delay_s``: after the first fill, wait this long before making members, so that a
        container start does not compete for CPU with the turn of the session that just claimed
        one (a few hundred ms of CPU on a small host)."""
        if size < 0:
            raise ValueError("size must not be negative")
        if refill_delay_s < 0:
            raise ValueError("refill_delay_s must not be negative")
        self.size = size
        self._refill_delay_s = refill_delay_s
        self.token = token or secrets.token_hex(8)
        self._runtime = runtime
        self._egress = egress
        self._edge_id = edge_id
        self._prefix = prefix
        self._open_channel = open_channel
        self._room = room
        self._template: SandboxLimits | None = None
        self._generation = 0
        self._ready: deque[PoolMember] = deque()
        self._creating = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._adding: asyncio.Task[None] | None = None  # the member being made now
        self._removals: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def ready(self) -> int:
        """Members paused and ready to be claimed."""
        return len(self._ready)

    @property
    def creating(self) -> int:
        """Members being made now."""
        return self._creating

    @property
    def template(self) -> SandboxLimits | None:
        return self._template

    def start(self, template: SandboxLimits) -> None:
        """Start filling the pool with sandboxes like ``template``."""
        if self._task is not None or self._closed or self.size == 0:
            return
        self._template = _key(template)
        self._task = asyncio.create_task(self._fill_loop(), name=f"sandbox-pool-{self._edge_id}")
        self.wake()

    def wake(self) -> None:
        """Check whether the pool should grow (after a claim, a destroy, a retarget)."""
        self._wake.set()

    def matches(self, limits: SandboxLimits) -> bool:
        """Whether a session with ``limits`` may take a member."""
        return not limits.repositories and self._template is not None and limits == self._template

    def take(self, limits: SandboxLimits) -> PoolMember | None:
        """Hand one ready member over for good, if one matches ``limits``. The caller counts it
        against ``room()`` from now on, and calls :meth:`wake` when it has claimed it."""
        if not self._ready or not self.matches(limits):
            return None
        return self._ready.popleft()

    def retarget(self, limits: SandboxLimits) -> None:
        """Make members like ``limits`` from now on (a session of another spec arrived); the
        ready ones of the old template are removed. Limits with repositories are ignored."""
        if self._task is None or limits.repositories or _key(limits) == self._template:
            return
        self._template = _key(limits)
        self._generation += 1
        stale = list(self._ready)
        self._ready.clear()
        for member in stale:
            self._remove_later(member)
        log.info(
            "warm pool now makes %s sandboxes with egress %s (%d old member(s) removed)",
            limits.image,
            limits.egress.mode.value,
            len(stale),
        )
        self.wake()

    async def evict(self) -> bool:
        """Remove one ready member to free its slot for a session; False if none is ready."""
        if not self._ready:
            return False
        member = self._ready.pop()
        log.debug("warm pool: member %s evicted to make room", member.short_id)
        await self.remove(member)
        return True

    async def settle(self) -> None:
        """Wait until members being removed are gone (their slots are free again)."""
        if self._removals:
            await asyncio.gather(*self._removals, return_exceptions=True)

    async def close(self) -> None:
        """Stop filling and remove every member still in the pool. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._adding is not None:  # let it finish: it removes what it made (closed)
            with contextlib.suppress(Exception):
                await self._adding
        members = list(self._ready)
        self._ready.clear()
        await asyncio.gather(*(self.remove(m) for m in members), *self._removals, return_exceptions=True)

    async def remove(self, member: PoolMember) -> None:
        """Close the member's channel and remove its container and volume (best effort)."""
        if member.channel is not None:
            await member.channel.close()
            member.channel = None
        try:
            await self._runtime.remove_container(member.container_id)
            await self._runtime.remove_volume(member.volume)
        except SandboxUnavailable as exc:
            log.warning("warm pool: could not remove member %s: %s", member.short_id, exc)

    def _remove_later(self, member: PoolMember) -> None:
        task = asyncio.create_task(self.remove(member), name=f"sandbox-pool-remove-{member.short_id}")
        self._removals.add(task)
        task.add_done_callback(self._removals.discard)

    # filling ---------------------------------------------------------------------------------

    async def _fill_loop(self) -> None:
        retry_s = _RETRY_INITIAL_S
        first = True
        while True:
            await self._wake.wait()
            if not first and self._refill_delay_s:
                await asyncio.sleep(self._refill_delay_s)
            first = False
            self._wake.clear()
            while len(self._ready) + self._creating < self.size and self._room():
                # Shielded: a close waits for the container being made instead of leaking it.
                self._adding = asyncio.create_task(self._add_one(), name=f"sandbox-pool-add-{self._edge_id}")
                try:
                    await asyncio.shield(self._adding)
                except SandboxUnavailable as exc:
                    log.warning("warm pool: could not make a sandbox (retry in %.0f s): %s", retry_s, exc)
                    await asyncio.sleep(retry_s)
                    retry_s = min(retry_s * 2, _RETRY_MAX_S)
                else:
                    retry_s = _RETRY_INITIAL_S

    async def _add_one(self) -> None:
        template = self._template
        assert template is not None
        generation = self._generation
        self._creating += 1
        try:
            member = await self._make(template)
        finally:
            self._creating -= 1
        if self._closed or generation != self._generation or not self._room():
            await self.remove(member)  # the template changed, or sessions took the slot meanwhile
            return
        self._ready.append(member)
        log.debug("warm pool: member %s ready (%d of %d)", member.short_id, len(self._ready), self.size)

    async def _make(self, limits: SandboxLimits) -> PoolMember:
        attachment = await self._egress.attachment(limits.egress)
        spec = SandboxSpec.for_pool(
            prefix=self._prefix,
            edge_id=self._edge_id,
            pool_token=self.token,
            limits=limits,
            network=attachment.network if attachment else "",
            env=attachment.env if attachment else None,
            proxy_url=attachment.proxy_url if attachment else "",
        )
        await self._runtime.ensure_volume(spec.volume, pool_labels(self._edge_id, self.token, spec.volume))
        container_id = ""
        channel: DaemonChannel | None = None
        try:
            container_id = await self._runtime.create_container(spec)
            channel = await self._open_channel(container_id)  # sandboxd is up and answering
            await self._runtime.pause(container_id)
        except BaseException:
            if channel is not None:
                await channel.close()
            with contextlib.suppress(SandboxUnavailable):
                if container_id:
                    await self._runtime.remove_container(container_id)
                await self._runtime.remove_volume(spec.volume)
            raise
        return PoolMember(
            container_id=container_id,
            volume=spec.volume,
            image=spec.image,
            limits=limits,
            network=spec.network,
            channel=channel,
        )


def _key(limits: SandboxLimits) -> SandboxLimits:
    """What a member is made from: the limits without the repositories (never pooled)."""
    return replace(limits, repositories=())
