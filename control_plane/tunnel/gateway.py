"""``EdgeGateway``: the brain's only way to reach the hands.

``provision`` / ``execute`` / ``destroy`` pick a connected edge of the session's environment, keep
a session on the same edge while that edge lives, and survive a dropped link: a request whose edge
disconnects before answering waits (up to ``reconnect_grace_s``) for the edge to come back, then is
sent again with the same request id and idempotency key. The edge answers a repeated key from its
journal, so the tool runs once; a result the edge finished while disconnected is redelivered and
resolves the request directly.

Placement: the edge holding a session's sandbox (and its workspace) is remembered in memory and,
with ``placements`` set (the store), durably, so that after a control-plane restart or on another
control-plane process the session goes back to the same edge. An edge that drops or shuts down
(drain: a restart, an upgrade) is waited for up to ``reconnect_grace_s``; when it is gone for good
the next call provisions on another edge of the environment and the gateway records a
:class:`SandboxMove`, which the harness reports in the session log (``take_move``).

A session without a sandbox goes to the least-loaded edge of its environment, by live load: the
sandboxes each edge last reported in a heartbeat plus the sessions this process placed there since
(:mod:`control_plane.tunnel.placement`); never to a full edge while another has room. An edge that
refuses a fresh placement for capacity (another process filled it) sends the call to the next
edge; when every edge is full the call fails with ``RemoteError(CAPACITY_EXHAUSTED)``, saying so.

No edge: a call for an environment with no connected edge waits up to ``edge_wait_s`` for one to
connect (the call goes on as soon as one does), then fails. ``edges_connected`` tells the harness,
before a call, that it is about to wait, so the session hears of it at once.

The sandbox spec travels at provision only: the gateway sends a session's spec (image, limits,
egress, repositories with their tokens) once per edge connection, with the first call of the
session that reaches it (an explicit ``provision``, or the first ``execute``, which provisions
lazily), and again only when the spec changed (a rotated token, an environment's new networking);
later ``Execute`` frames go without it. The mark of what a connection was sent is dropped when
the connection drops, when the session is destroyed and when it moves edges. An edge that holds no
spec for the session (it restarted, say) answers ``SANDBOX_SPEC_REQUIRED`` before it runs or
journals anything, and the call is sent again, once, with the spec and the same idempotency key.

Failures surface as typed errors: :class:`~control_plane.errors.EdgeUnavailable` when no edge can
take the call, :class:`~outpost_wire.errors.RemoteError` when the edge refused it (policy,
capacity, deadline, a repository that could not be cloned: ``REPOSITORY_*`` codes ...). A tool that
ran and failed is a ``ToolResult`` with ``is_error``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from control_plane.errors import EdgeUnavailable, GatewayDraining, InvalidRequest, NotFound
from control_plane.store.base import EdgeRecord
from control_plane.tunnel.blob_push import BlobSource, push_blobs
from control_plane.tunnel.connection import EdgeConnection
from control_plane.tunnel.placement import PlacementBook
from control_plane.tunnel.registry import EdgeRegistry
from outpost_wire.errors import ErrorCode, FrameTooLarge, ProtocolViolation, RemoteError
from outpost_wire.frames import (
    Destroy,
    Destroyed,
    Execute,
    Failure,
    McpCall,
    MemoryMount,
    MemorySnapshot,
    Outcome,
    Provision,
    Provisioned,
    PutBlob,
    Request,
)
from outpost_wire.results import ToolResult

__all__ = [
    "EdgeGateway",
    "GatewayConfig",
    "MemoryContents",
    "SandboxMove",
    "SandboxPlacements",
    "TunnelGrants",
]

TunnelGrants = Mapping[str, datetime | None]
"""An MCP tunnel's connector tokens, as edges may present them: sha256 (hex) -> when the token
was retired (``None``: the current one); see :meth:`EdgeConnection.serves_tunnel`."""

MemoryContents = Callable[[str, tuple[MemoryMount, ...]], Awaitable[tuple[MemorySnapshot, ...]]]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    reconnect_grace_s: float = 30.0  # how long a call waits for its edge to come back
    edge_wait_s: float = 30.0  # how long a call waits for an edge of the environment when none is up
    default_tool_timeout_s: float = 120.0  # bash's default; the request deadline adds slack_s
    slack_s: float = 30.0
    control_timeout_s: float = 60.0  # provision / destroy


class SandboxPlacements(Protocol):
    """Where the gateway keeps which edge holds each session's sandbox (the store fits)."""

    async def get_sandbox_edge(self, session_id: str) -> str | None: ...

    async def set_sandbox_edge(self, session_id: str, edge_id: str | None) -> None: ...

    async def get_edges(self, edge_ids: Sequence[str]) -> list[EdgeRecord]: ...


@dataclass(frozen=True, slots=True)
class SandboxMove:
    """A session's sandbox was made on another edge than the one that held it."""

    from_edge_id: str
    to_edge_id: str
    reason: str  # why the old edge was left, in plain words


class EdgeGateway:
    def __init__(
        self,
        registry: EdgeRegistry,
        config: GatewayConfig | None = None,
        *,
        sandbox_spec: Callable[[str, str], Awaitable[Provision]] | None = None,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        on_move: Callable[[SandboxMove], None] | None = None,
        memory_contents: MemoryContents | None = None,
        blob_source: BlobSource | None = None,
    ) -> None:
        """``sandbox_spec(session_id, environment_id)``: the sandbox a session asks for (image,
        limits, egress from its environment; its git repositories, with their tokens); read for
        every provision and execute, and sent to an edge when it does not hold it yet (see the
        module docstring), so that a sandbox made lazily by the edge is made as the session says,
        and the edge has the session's current repositories. Default: the edge's defaults, no
        network, no repositories. ``rng`` breaks placement ties.
        ``on_move`` is told of every sandbox move as it happens (the metrics count them).
        ``memory_contents(session_id, mounts)``: the mounted memory stores' whole contents, read
        only when an ``Execute`` carries the spec (they travel with it, never in it).
        ``blob_source(session_id, mount)``: the bytes of a file or skill the spec mounts, pushed to
        the edge before the spec (:mod:`control_plane.tunnel.blob_push`)."""
        self.memory_contents = memory_contents
        self._blob_source = blob_source
        self._on_move = on_move
        self._registry = registry
        self._book = PlacementBook(rng)
        self._sandbox_spec = sandbox_spec
        self._config = config or GatewayConfig()
        self._clock = clock
        self._sticky: dict[str, str] = {}  # session id -> edge id
        self._moves: dict[str, SandboxMove] = {}  # session id -> a move not yet reported
        # connection -> session id -> digest of the sandbox spec that connection's edge was sent
        self._specs_sent: dict[EdgeConnection, dict[str, bytes]] = {}
        self.draining = False
        #: Durable placement (set by the control plane to its store); ``None``: memory only.
        self.placements: SandboxPlacements | None = None

    def start_draining(self) -> None:
        """Refuse new calls (``GatewayDraining``, retryable) and stop waiting for edges that drop:
        they are moving to another control-plane process, which will take the calls again with the
        same idempotency keys. Calls already sent keep waiting for their results."""
        self.draining = True

    async def _spec(self, session_id: str, environment_id: str) -> Provision:
        return await self._sandbox_spec(session_id, environment_id) if self._sandbox_spec else Provision()

    def edge_for_session(self, session_id: str) -> str | None:
        return self._sticky.get(session_id)

    def edges_connected(self, environment_id: str) -> int:
        """How many edges of the environment have a tunnel up to this process (the ones its calls
        can reach). None: a call waits up to :attr:`edge_wait_s` for one."""
        return len(self._registry.for_environment(environment_id))

    @property
    def edge_wait_s(self) -> float:
        """How long a call waits for an edge of its environment to connect when none is."""
        return self._config.edge_wait_s

    def take_move(self, session_id: str) -> SandboxMove | None:
        """The session's sandbox move not yet reported (each move is returned once)."""
        return self._moves.pop(session_id, None)

    def forget_session(self, session_id: str) -> None:
        """Drop what this process remembers of the session's edge, so that the next call reads
        the durable placement (a harness calls this when it takes a session: another process may
        have moved the sandbox meanwhile). Without ``placements`` the memory is all there is, and
        it is kept."""
        if self.placements is not None:
            self._sticky.pop(session_id, None)

    async def provision(
        self, session_id: str, environment_id: str, resources: Provision | None = None
    ) -> Provisioned:
        spec = resources or await self._spec(session_id, environment_id)
        outcome = await self._call(session_id, environment_id, spec, "", self._config.control_timeout_s)
        if isinstance(outcome, Provisioned):
            return outcome
        raise _unexpected(outcome)

    async def execute(
        self,
        session_id: str,
        environment_id: str,
        tool: str,
        tool_input: Mapping[str, Any],
        *,
        idempotency_key: str,
        timeout_s: float | None = None,
    ) -> ToolResult:
        tool_timeout = timeout_s
        if tool_timeout is None and tool == "bash" and isinstance(tool_input.get("timeout_ms"), int):
            tool_timeout = tool_input["timeout_ms"] / 1000
        if tool_timeout is None:
            tool_timeout = self._config.default_tool_timeout_s
        op = Execute(
            tool=tool,
            input_json=json.dumps(dict(tool_input)),
            timeout_ms=int(tool_timeout * 1000),
            sandbox=await self._spec(session_id, environment_id),
        )
        outcome = await self._call(
            session_id, environment_id, op, idempotency_key, tool_timeout + self._config.slack_s
        )
        if isinstance(outcome, ToolResult):
            return outcome
        raise _unexpected(outcome)

    async def mcp_call(
        self,
        session_id: str,
        environment_id: str,
        server: str,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        idempotency_key: str,
        timeout_s: float | None = None,
        tunnel: TunnelGrants | None = None,
    ) -> ToolResult:
        """Call a tool of a private MCP server fronted by an edge of the environment (the session's
        edge when it has one that serves ``server``); with ``tunnel``, by an edge serving that MCP
        tunnel instead, whatever its environment. Refusals and a down server come back as
        :class:`RemoteError` (``POLICY_DENIED``, ``MCP_CONNECTION_FAILED``)."""
        timeout = timeout_s or self._config.default_tool_timeout_s
        op = McpCall(
            server=server,
            tool=tool,
            arguments_json=json.dumps(dict(arguments)),
            timeout_ms=int(timeout * 1000),
        )
        if tunnel is not None:
            conn = await self._pick_tunnel_edge(session_id, tunnel, server)
        else:
            conn, _ = await self._pick_edge(session_id, environment_id, mcp_server=server)
        outcome = await self._call_edge(
            conn.edge_id, session_id, op, idempotency_key, timeout + self._config.slack_s
        )
        if isinstance(outcome, ToolResult):
            return outcome
        raise _unexpected(outcome)

    def mcp_catalog(
        self, environment_id: str, *, tunnel: TunnelGrants | None = None
    ) -> dict[str, dict[str, Any]]:
        """The MCP servers the environment's connected edges front (with ``tunnel``: the edges
        serving that MCP tunnel), by name: ``{name: {status, tools: [{name, description,
        input_schema}], edges: [edge ids]}}``. A server is "up" if it is up on any edge."""
        merged: dict[str, dict[str, Any]] = {}
        conns = (
            self._registry.for_environment(environment_id) if tunnel is None else self.tunnel_edges(tunnel)
        )
        for conn in sorted(conns, key=lambda c: c.edge_id):
            for server in conn.mcp_catalog.get("servers", []):
                if not isinstance(server, dict) or not isinstance(server.get("name"), str):
                    continue
                entry = merged.setdefault(server["name"], {"status": "down", "tools": [], "edges": []})
                entry["edges"].append(conn.edge_id)
                if server.get("status") == "up" and entry["status"] != "up":
                    entry["status"] = "up"
                    entry["tools"] = list(server.get("tools", []))
        return merged

    async def destroy(self, session_id: str, environment_id: str) -> bool:
        """Destroy the session's sandbox and workspace. Without a known edge for the session (the
        control plane restarted, say), every connected edge of the environment is asked."""
        edge_id = self._sticky.pop(session_id, None)
        self._moves.pop(session_id, None)
        self._forget_spec(session_id)
        if self.draining:
            raise GatewayDraining("this control plane is shutting down; the call goes to another one")
        if edge_id is None:
            edge_id = await self._durable_edge(session_id)
        if edge_id is not None:
            await self._check_environment(session_id, edge_id, environment_id)
        targets = (
            [edge_id] if edge_id else [c.edge_id for c in self._registry.for_environment(environment_id)]
        )
        existed = False
        for target in targets:
            try:
                outcome = await self._call_edge(
                    target, session_id, Destroy(), "", self._config.control_timeout_s
                )
            except EdgeUnavailable as exc:
                log.warning("could not destroy sandbox of session %s on edge %s: %s", session_id, target, exc)
                continue
            if isinstance(outcome, Destroyed):
                existed = existed or outcome.existed
                conn = self._registry.get(target)
                if outcome.existed and conn is not None:
                    self._book.destroyed(session_id, conn)
                self._book.unplace(session_id, target)
            else:
                raise _unexpected(outcome)
        await self._record_placement(session_id, None)
        return existed

    # -- internals ----------------------------------------------------------------------------
    async def _call(
        self, session_id: str, environment_id: str, op: Provision | Execute, key: str, timeout_s: float
    ) -> Outcome:
        """Send ``op`` to the session's edge (an ``Execute`` without its sandbox spec when that
        edge's connection was sent the same spec already). A session placed afresh by this call
        that its new edge refuses for capacity (another control-plane process filled it since its
        last heartbeat, say) is placed again on another edge; the edge ran nothing. An edge that
        holds no spec for the session is sent the call again, with it."""
        loop = asyncio.get_running_loop()
        until = loop.time() + timeout_s
        refused: set[str] = set()
        while True:
            conn, fresh = await self._pick_edge(session_id, environment_id, refused=frozenset(refused))
            stripped = self._without_held_spec(conn, session_id, op)
            sent = await self._with_memory(session_id, stripped)
            try:
                await self._push_blobs(conn.edge_id, session_id, sent, until)
                outcome = await self._call_edge(conn.edge_id, session_id, sent, key, until - loop.time())
                if stripped is not op and _spec_required(outcome):
                    log.info(
                        "session %s: edge %s holds no sandbox spec for it (it restarted?); "
                        "sending the call again with the spec",
                        session_id,
                        conn.edge_id,
                    )
                    self._forget_spec(session_id)
                    sent = await self._with_memory(session_id, op)
                    await self._push_blobs(conn.edge_id, session_id, sent, until)
                    outcome = await self._call_edge(conn.edge_id, session_id, sent, key, until - loop.time())
            finally:
                if fresh:
                    self._book.answered(session_id, self._registry.get(conn.edge_id) or conn)
            self._note_spec(conn.edge_id, session_id, sent, outcome)
            if fresh and isinstance(outcome, Failure) and outcome.code is ErrorCode.CAPACITY_EXHAUSTED:
                log.info(
                    "session %s: edge %s is full (%s); placing the session on another edge",
                    session_id,
                    conn.edge_id,
                    outcome.message,
                )
                refused.add(conn.edge_id)
                self._book.unplace(session_id, conn.edge_id)
                continue
            return outcome

    def _without_held_spec(
        self, conn: EdgeConnection, session_id: str, op: Provision | Execute
    ) -> Provision | Execute:
        """``op`` as it goes to ``conn``: an ``Execute`` without its spec when the connection's
        edge was sent that very spec for the session (and answered)."""
        if not isinstance(op, Execute) or op.sandbox is None or conn.closed.is_set():
            return op
        if self._specs_sent.get(conn, {}).get(session_id) != _digest(op.sandbox):
            return op
        return dataclasses.replace(op, sandbox=None)

    async def _with_memory(self, session_id: str, op: Provision | Execute) -> Provision | Execute:
        """An ``Execute`` carrying a spec with memory mounts carries the stores' contents too."""
        if (
            not isinstance(op, Execute)
            or op.sandbox is None
            or not op.sandbox.memory_mounts
            or op.memory is not None
            or self.memory_contents is None
        ):
            return op
        contents = await self.memory_contents(session_id, op.sandbox.memory_mounts)
        return dataclasses.replace(op, memory=contents)

    async def _push_blobs(self, edge_id: str, session_id: str, op: Provision | Execute, until: float) -> None:
        """Before a spec that mounts files or skills: the edge gets their bytes (it answers at
        once for the ones it holds)."""
        spec = op if isinstance(op, Provision) else op.sandbox
        if spec is None or not spec.blob_mounts or self._blob_source is None:
            return
        loop = asyncio.get_running_loop()

        async def send(chunk: PutBlob) -> Outcome:
            return await self._call_edge(edge_id, session_id, chunk, "", until - loop.time())

        await push_blobs(session_id, spec.blob_mounts, self._blob_source, send)

    def resend_spec(self, session_id: str) -> None:
        """Send the session's spec (and memory contents) with its next call: the memory stores
        changed behind the edge's back."""
        self._forget_spec(session_id)

    def _note_spec(self, edge_id: str, session_id: str, sent: Provision | Execute, outcome: Outcome) -> None:
        """Remember that the edge's connection holds the spec ``sent`` carried, once the edge
        answered it with anything but a failure (a refused spec is sent again next time)."""
        spec = sent if isinstance(sent, Provision) else sent.sandbox
        conn = self._registry.get(edge_id)
        if spec is None or isinstance(outcome, Failure) or conn is None or conn.closed.is_set():
            return
        for gone in [c for c in self._specs_sent if c.closed.is_set()]:
            del self._specs_sent[gone]  # a dropped connection's edge may have forgotten them
        self._specs_sent.setdefault(conn, {})[session_id] = _digest(spec)

    def _forget_spec(self, session_id: str) -> None:
        """Send the session's spec with its next call, on whatever connection."""
        for held in self._specs_sent.values():
            held.pop(session_id, None)

    async def _pick_edge(
        self,
        session_id: str,
        environment_id: str,
        *,
        mcp_server: str | None = None,
        refused: frozenset[str] = frozenset(),
    ) -> tuple[EdgeConnection, bool]:
        """The session's edge, and whether the session was placed there just now (no sandbox of
        it there yet). ``refused``: edges that refused this call's fresh placement for capacity."""
        if self.draining:
            raise GatewayDraining("this control plane is shutting down; the call goes to another one")
        if mcp_server is not None:
            return await self._pick_mcp_edge(session_id, environment_id, mcp_server), False
        loop = asyncio.get_running_loop()
        started = loop.time()
        edge_id = self._sticky.get(session_id)
        if edge_id is None:
            edge_id = await self._durable_edge(session_id)
        if edge_id in refused:
            edge_id = None  # this call placed it there a moment ago, and the edge was full
        if edge_id is not None:
            await self._check_environment(session_id, edge_id, environment_id)
        left_because = ""
        if edge_id is not None:
            conn, drained = await self._await_edge(edge_id)
            if conn is not None:
                self._sticky[session_id] = edge_id
                return conn, False
            grace = f"{self._config.reconnect_grace_s:g} s"
            left_because = (
                f"edge {edge_id} shut down and did not come back within {grace}"
                if drained
                else f"edge {edge_id} did not come back within {grace}"
            )
            log.warning("session %s: %s; moving the session to another edge", session_id, left_because)
            self._sticky.pop(session_id, None)
            self._book.unplace(session_id, edge_id)
        candidates = [c for c in self._registry.for_environment(environment_id) if not c.draining]
        if not candidates and not refused:
            # The wait for the session's own edge (above) counts against edge_wait_s.
            budget = max(0.0, self._config.edge_wait_s - (loop.time() - started))
            waited = await self._registry.wait_for_environment(environment_id, budget)
            candidates = [c for c in waited if not c.draining]
        if not candidates:
            raise EdgeUnavailable(
                f"no edge of environment {environment_id} is connected (waited "
                f"{loop.time() - started:.1f} s for one to connect, edge_wait_s)",
                environment_id,
            )
        open_to = [c for c in candidates if c.edge_id not in refused]
        chosen = self._book.choose(open_to)
        if chosen is None:
            if refused:  # its placement of a moment ago was refused: the next call places afresh
                self._sticky.pop(session_id, None)
                await self._record_placement(session_id, None)
            raise _all_full(environment_id, candidates, refused, self._book)
        conn = chosen
        self._sticky[session_id] = conn.edge_id
        if conn.edge_id == edge_id:
            return conn, False  # its edge came back while this call waited: nothing moved
        self._book.placed(session_id, conn)  # before any await: the next pick counts it
        await self._record_placement(session_id, conn.edge_id)
        if edge_id is not None:
            self._moved(session_id, SandboxMove(edge_id, conn.edge_id, left_because))
        elif refused and session_id in self._moves:  # the move of this call goes further
            self._moves[session_id] = dataclasses.replace(self._moves[session_id], to_edge_id=conn.edge_id)
        return conn, True

    def _moved(self, session_id: str, move: SandboxMove) -> None:
        """Keep the move for the harness to report (``take_move``), and tell ``on_move``."""
        self._forget_spec(session_id)
        self._moves[session_id] = move
        if self._on_move is not None:
            self._on_move(move)

    async def _await_edge(self, edge_id: str) -> tuple[EdgeConnection | None, bool]:
        """The edge's usable connection, waiting up to ``reconnect_grace_s`` for it to come back;
        and whether it was seen shutting down. An edge that drains (SIGTERM) is most likely being
        restarted or upgraded, and it holds the session's workspace: wait for its tunnel to close
        and for the edge to return, as for a dropped link, before moving the session."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._config.reconnect_grace_s
        drained = False
        conn = self._registry.get(edge_id)
        while True:
            if conn is not None and not conn.draining:
                return conn, drained
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None, drained
            if conn is None:
                conn = await self._registry.wait_for(edge_id, remaining)
                if conn is None:
                    return None, drained
                continue
            drained = True  # shutting down: wait until its tunnel closes, then for its return
            try:
                async with asyncio.timeout(remaining):
                    await conn.closed.wait()
            except TimeoutError:
                return None, drained
            conn = self._registry.get(edge_id)
            if conn is not None and conn.closed.is_set():
                conn = None

    async def _check_environment(self, session_id: str, edge_id: str, environment_id: str) -> None:
        """A session's remembered edge belongs to the environment named in the call, or the call is
        refused: session ids of ``exec`` are the caller's, and a caller of one environment must not
        reach (or move) the sandbox another environment's session holds."""
        conn = self._registry.get(edge_id)
        if conn is not None:
            held_in = conn.environment_id
        elif self.placements is not None:
            try:
                records = await self.placements.get_edges([edge_id])
            except Exception as exc:  # the store is down: the call fails the same way elsewhere
                raise EdgeUnavailable(f"cannot check session {session_id}'s sandbox edge: {exc}") from exc
            if not records:
                return  # the edge is gone from the store: the session moves as for a lost edge
            held_in = records[0].environment_id
        else:
            return
        if held_in != environment_id:
            log.warning(
                "session %s: its sandbox is on an edge of environment %s, not %s; call refused",
                session_id,
                held_in,
                environment_id,
            )
            raise NotFound("session", session_id)

    async def _durable_edge(self, session_id: str) -> str | None:
        if self.placements is None:
            return None
        try:
            return await self.placements.get_sandbox_edge(session_id)
        except Exception as exc:  # the store is down: carry on as if nothing was recorded
            log.warning("session %s: could not read its sandbox placement: %s", session_id, exc)
            return None

    async def _record_placement(self, session_id: str, edge_id: str | None) -> None:
        if self.placements is None:
            return
        try:
            await self.placements.set_sandbox_edge(session_id, edge_id)
        except Exception as exc:  # memory still has it; a restart would pick an edge afresh
            log.warning("session %s: could not record its sandbox placement: %s", session_id, exc)

    async def _pick_mcp_edge(self, session_id: str, environment_id: str, server: str) -> EdgeConnection:
        """The session's edge if it fronts ``server``, else any edge of the environment that does
        (an MCP server is not tied to a sandbox, so this does not move the session)."""

        def serves(conn: EdgeConnection) -> bool:
            return any(
                isinstance(s, dict) and s.get("name") == server for s in conn.mcp_catalog.get("servers", [])
            )

        sticky = self._sticky.get(session_id)
        conn = self._registry.get(sticky) if sticky else None
        if conn is not None and serves(conn) and not conn.draining:
            return conn
        candidates = [
            c for c in self._registry.for_environment(environment_id) if serves(c) and not c.draining
        ]
        if not candidates:
            await self._registry.wait_for_environment(environment_id, self._config.edge_wait_s)
            candidates = [
                c for c in self._registry.for_environment(environment_id) if serves(c) and not c.draining
            ]
        if not candidates:
            raise EdgeUnavailable(
                f"no connected edge of environment {environment_id} fronts MCP server {server!r}",
                environment_id,
            )
        return min(candidates, key=lambda c: c.edge_id)

    def tunnel_edges(self, tunnel: TunnelGrants) -> list[EdgeConnection]:
        """The connected edges serving the MCP tunnel whose tokens are ``tunnel``."""
        return [c for c in self._registry.all_connections() if c.is_open and c.serves_tunnel(tunnel)]

    async def _pick_tunnel_edge(self, session_id: str, tunnel: TunnelGrants, server: str) -> EdgeConnection:
        """An edge serving the tunnel that fronts ``server`` (the session's own edge first),
        waiting up to ``edge_wait_s`` for one to connect."""
        if self.draining:
            raise GatewayDraining("this control plane is shutting down; the call goes to another one")

        def candidates() -> list[EdgeConnection]:
            return [
                c
                for c in self.tunnel_edges(tunnel)
                if not c.draining
                and any(
                    isinstance(s, dict) and s.get("name") == server for s in c.mcp_catalog.get("servers", [])
                )
            ]

        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._config.edge_wait_s
        found = candidates()
        while not found and loop.time() < deadline:
            seen = self._registry.generation
            await self._registry.wait_changed(seen, deadline - loop.time())
            found = candidates()
        if not found:
            raise EdgeUnavailable(f"no connected edge serving the MCP tunnel fronts MCP server {server!r}")
        sticky = self._sticky.get(session_id)
        return next((c for c in found if c.edge_id == sticky), min(found, key=lambda c: c.edge_id))

    async def _call_edge(
        self,
        edge_id: str,
        session_id: str,
        op: Provision | Execute | Destroy | McpCall | PutBlob,
        key: str,
        timeout_s: float,
    ) -> Outcome:
        request = Request(
            request_id="req_" + uuid.uuid4().hex,
            session_id=session_id,
            idempotency_key=key,
            deadline_ms=int((self._clock() + timeout_s) * 1000),
            op=op,
        )
        future = self._registry.track(request.request_id, edge_id)
        conn: EdgeConnection | None = None
        try:
            async with asyncio.timeout(timeout_s):
                conn = self._registry.get(edge_id) or await self._registry.wait_for(
                    edge_id, self._config.reconnect_grace_s
                )
                while not future.done():
                    if conn is None:
                        raise EdgeUnavailable(
                            f"edge {edge_id} went away and did not come back within "
                            f"{self._config.reconnect_grace_s:g} s"
                        )
                    try:
                        conn.send_request(request)
                    except FrameTooLarge as exc:
                        raise InvalidRequest(f"tool input too large for the tunnel: {exc}") from None
                    except ProtocolViolation:
                        pass  # the connection closed under us; wait for the next one
                    closed: asyncio.Future[Any] = asyncio.ensure_future(conn.closed.wait())
                    try:
                        await asyncio.wait([future, closed], return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        closed.cancel()
                    if future.done():
                        break
                    if self.draining:
                        raise GatewayDraining(
                            f"edge {edge_id} left this draining control plane during {request.request_id}"
                        )
                    log.info(
                        "edge %s dropped during %s; waiting for it to return", edge_id, request.request_id
                    )
                    conn = await self._registry.wait_for(edge_id, self._config.reconnect_grace_s)
                return future.result()
        except TimeoutError:
            if conn is not None:
                conn.send_cancel(request.request_id)
            raise RemoteError(
                ErrorCode.DEADLINE_EXCEEDED, f"no answer from edge {edge_id} within {timeout_s:.3g} s"
            ) from None
        finally:
            self._registry.forget(request.request_id)


def _all_full(
    environment_id: str,
    candidates: Sequence[EdgeConnection],
    refused: frozenset[str],
    book: PlacementBook,
) -> RemoteError:
    """The typed error of a placement with no room: ``capacity_exhausted``, as an edge's own."""
    loads = [(c.edge_id, book.load(c)) for c in candidates]
    capacity = sum(load.capacity for _, load in loads)
    used = sum(load.capacity if e in refused else min(load.certain, load.capacity) for e, load in loads)
    note = f"; {len(refused)} refused the session just now" if refused else ""
    return RemoteError(
        ErrorCode.CAPACITY_EXHAUSTED,
        f"every edge of environment {environment_id} is full: {len(candidates)} edge(s), "
        f"{used} of {capacity} sandboxes in use or being made{note}",
    )


def _digest(spec: Provision) -> bytes:
    """A fingerprint of a sandbox spec, tokens included (a rotated token changes it; ``repr``
    hides them, ``astuple`` does not); kept instead of the spec, so that no token stays in memory
    for it."""
    return hashlib.sha256(repr(dataclasses.astuple(spec)).encode()).digest()


def _spec_required(outcome: Outcome) -> bool:
    return isinstance(outcome, Failure) and outcome.code is ErrorCode.SANDBOX_SPEC_REQUIRED


def _unexpected(outcome: Outcome) -> RemoteError:
    if isinstance(outcome, Failure):
        return RemoteError(outcome.code, outcome.message)
    return RemoteError(ErrorCode.INTERNAL, f"unexpected outcome {type(outcome).__name__}")
