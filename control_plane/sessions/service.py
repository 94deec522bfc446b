"""Sessions, their input events and their repositories: the rules, whoever asks (the HTTP API today).

A session holds a snapshot of its agent (resolved at creation, optionally with overrides) and runs
in a ``self_hosted`` environment. Its status is read from its log
(:mod:`control_plane.sessions.log`); the body's ``status`` field is only a mirror for scans
(``idle`` at creation, ``terminated`` on archive, otherwise kept by the harness). The service
records input and wakes the runner; it never runs a turn:

* create with ``initial_events`` → events appended, ``runner.wake``;
* update of ``agent`` (tools / mcp_servers), ``title``, ``metadata`` or ``budget`` → a
  ``session.updated`` event;
* archive → sealed repository tokens purged, ``runner.session_ended``, then
  ``session.status_terminated`` (unless already there);
* delete → ``runner.session_ended`` first, then the repositories, the session and its log are
  deleted, and live streams are told (the bus says the log moved; they find the session gone);
* send events → the whole batch validated (nothing written on one bad event), answers checked
  against what the session waits for, appended in one call, announced on the bus, runner woken.

A ``budget`` is given at creation (the session's model must have a list price:
``model_not_budgetable``), and an update may replace it (not at or below the list cost consumed so
far: ``budget_not_raised``) or remove it (``null``); one cannot be added to a session created
without one, nor re-added once removed (``budget_create_only``). The harness enforces it
(:mod:`control_plane.harness.step`). A session's ``usage`` and ``stats.active_seconds`` are derived
from its log (:mod:`control_plane.sessions.usage`).

Repositories (``github_repository`` resources, :mod:`control_plane.sessions.repositories`) are
stored as their own resources with their tokens sealed (:class:`RepositoryTokens`); a token can be
rotated, a repository removed. Every method takes a :class:`~control_plane.sessions.commands.Viewer`:
a session of an environment it does not see is ``NotFound``, exactly as an unknown one. A new
session's environment is checked by :func:`~control_plane.environments.service.get_environment`.

The service depends on the store's roles (:class:`Resources`, :class:`EventLog`), the event bus,
the runner, a clock, the repository-token sealer and the outbound rules, never on a store backend
nor on the HTTP layer.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from control_plane.agents.service import AgentService
from control_plane.bus import EventBus
from control_plane.environments.service import get_environment
from control_plane.environments.tool_runner import WORKER, tool_runner_of
from control_plane.errors import (
    BudgetRefused,
    Conflict,
    InvalidRequest,
    NotConfigured,
    NotFound,
    VersionConflict,
)
from control_plane.metadata import apply_metadata_patch, check_metadata
from control_plane.outbound import OutboundGuard
from control_plane.session_runner import SessionRunner
from control_plane.sessions.agent_snapshot import Keep, changed_snapshot, overridden_snapshot
from control_plane.sessions.commands import (
    AgentChoice,
    CreateSession,
    EventPage,
    EventQuery,
    SessionPage,
    SessionQuery,
    SessionView,
    UpdateSession,
    Viewer,
)
from control_plane.sessions.events import SessionStatus, new_event_id
from control_plane.sessions.file_resources import FILE_TYPE, resolve_file_resource
from control_plane.sessions.input_events import parse_input_events
from control_plane.sessions.log import (
    append_and_publish,
    check_answers,
    read_active_ms,
    read_status,
    read_usage,
)
from control_plane.sessions.memory_resources import (
    MEMORY_TYPE,
    memory_body,
    parse_memory_resource,
    resolve_memory_resources,
)
from control_plane.sessions.outcome_evaluations import (
    RubricFiles,
    prepare_outcomes,
    read_outcome_evaluations,
)
from control_plane.sessions.repositories import (
    RESOURCE_KIND,
    RepositoryInput,
    check_token,
    new_resource_id,
    parse_resources,
    repository_body,
)
from control_plane.sessions.repository_tokens import (
    RepositoryTokens,
    list_repositories,
    list_session_resources,
)
from control_plane.sessions.roster import session_multiagent
from control_plane.sessions.thread_views import check_thread_ids
from control_plane.sessions.usage import (
    Budget,
    ModelPrice,
    check_budgetable,
    default_model_prices,
    list_cost_cents,
    parse_budget,
    price_for,
    token_totals,
    usage_json,
)
from control_plane.store.base import Event, EventLog, NewEvent, Order, Page, Resource, Resources

__all__ = ["RunnerCalls", "SessionHooks", "SessionService", "SessionStore", "WorkQueueing", "new_session_id"]

log = logging.getLogger(__name__)

_BUSY = frozenset({SessionStatus.RUNNING, SessionStatus.RESCHEDULING})
_UPDATE_ATTEMPTS = 5
_SCAN_BATCH = 500
_MAX_INITIAL_EVENTS = 50
_INITIAL_TYPES = frozenset({"user.message", "user.define_outcome"})
_DEPLOYMENT_INITIAL_TYPES = _INITIAL_TYPES | {"system.message"}
_NO_VAULT = "the vault (which seals tokens) is not configured on this control plane"


def new_session_id() -> str:
    return "sesn_" + secrets.token_hex(12)


class SessionStore(Resources, EventLog, Protocol):
    """The store roles the session service uses."""


class SessionHooks(Protocol):
    """Told after a session was ``created``, ``archived`` or ``deleted`` (the change is durable;
    it never raises): the ``session.*`` webhooks without a log event of their own."""

    async def session_changed(self, change: str, session_id: str, environment_id: str | None) -> None: ...


class WorkQueueing(Protocol):
    """The work queue of worker-run environments (:class:`control_plane.work.WorkQueue`)."""

    async def session_input(self, session_id: str) -> Any: ...

    async def session_ended(self, session_id: str) -> None: ...


class RunnerCalls:
    """Calls into the runner that never fail a request whose effect is already durable: the log
    is the source of truth and the harness recovers from it, so a failed call is logged."""

    def __init__(self, runner: SessionRunner) -> None:
        self._runner = runner

    async def wake(self, session_id: str) -> None:
        try:
            await self._runner.wake(session_id)
        except Exception:
            log.exception("runner.wake(%s) failed", session_id)

    async def session_ended(self, session_id: str) -> None:
        try:
            await self._runner.session_ended(session_id)
        except Exception:
            log.exception("runner.session_ended(%s) failed", session_id)


class SessionService:
    """``tokens``: seals repository tokens (``None``: no vault, repositories without a token
    only). ``outbound``: the check of direct MCP server URLs (default: no private networks).
    ``agents``: where a new session's agent is read (default: an :class:`AgentService` on
    ``store``). ``prices``: the list prices sessions' usage and budgets are priced with
    (default: :data:`~control_plane.sessions.usage.DEFAULT_MODEL_PRICES`)."""

    def __init__(
        self,
        store: SessionStore,
        bus: EventBus,
        runner: SessionRunner,
        clock: Callable[[], datetime],
        *,
        tokens: RepositoryTokens | None = None,
        outbound: OutboundGuard | None = None,
        agents: AgentService | None = None,
        prices: Mapping[str, ModelPrice] | None = None,
        files: RubricFiles | None = None,
        hooks: SessionHooks | None = None,
        work: WorkQueueing | None = None,
    ) -> None:
        self._hooks = hooks  # session.created / archived / deleted webhooks (None: none)
        self._store = store
        self._work = work  # worker-run environments: input queues a work item (None: not served)
        self._files = files  # outcomes: where file rubrics are read (None: file rubrics refused)
        self._prices = dict(prices) if prices is not None else default_model_prices()
        self._bus = bus
        self._runner = RunnerCalls(runner)
        self._clock = clock
        self._tokens = tokens
        self._outbound = outbound or OutboundGuard()
        self._agents = agents or AgentService(store, clock, outbound=self._outbound)

    # -- sessions --------------------------------------------------------------------------
    async def session(self, session_id: str, viewer: Viewer) -> Resource:
        """The session, or ``NotFound`` if it does not exist or ``viewer`` does not see its
        environment (the same answer, so existence does not leak)."""
        res = await self._store.get_resource("session", session_id)
        if not viewer.sees(res.body.get("environment_id")):
            raise NotFound("session", session_id)
        return res

    async def get(self, session_id: str, viewer: Viewer) -> SessionView:
        return await self._view(await self.session(session_id, viewer))

    async def create(self, command: CreateSession, viewer: Viewer) -> SessionView:
        """Checks in this order: budget, repositories, environment, agent, vaults, events."""
        budget = parse_budget(command.budget, "budget") if command.budget is not None else None
        repositories = parse_resources(command.resources)
        if self._tokens is None and any(repo.token for repo in repositories):
            raise NotConfigured(
                "resources: authorization_token needs the vault (which seals tokens); it is not "
                "configured on this control plane"
            )
        memory = await resolve_memory_resources(
            self._store,
            [
                (f"resources[{i}]", parse_memory_resource(item, f"resources[{i}]"))
                for i, item in enumerate(command.resources)
                if isinstance(item, Mapping) and item.get("type") == MEMORY_TYPE
            ],
        )
        files: list[dict[str, Any]] = []
        for i, item in enumerate(command.resources):
            if isinstance(item, Mapping) and item.get("type") == FILE_TYPE:
                files.append(await resolve_file_resource(self._store, item, f"resources[{i}]", files))
        environment = await get_environment(self._store, command.environment_id, viewer, usable=True)
        snapshot = await self._agent_snapshot(command.agent)
        # skills: each version pinned now ("latest" as it is at the start); the model's offer kept
        snapshot["skills"], skill_offers = await self._agents.pin_skills(snapshot["skills"])
        if budget is not None:
            check_budgetable(_model_id(snapshot), self._prices, "budget")
        vault_ids = list(dict.fromkeys(command.vault_ids))
        for vault_id in vault_ids:
            await self._store.get_resource("vault", vault_id)
        initial: list[NewEvent] = []
        if command.initial_events:
            initial = parse_input_events(
                list(command.initial_events),
                allowed=_INITIAL_TYPES if command.deployment_id is None else _DEPLOYMENT_INITIAL_TYPES,
                param="initial_events",
                max_events=_MAX_INITIAL_EVENTS,
            )
            initial = await prepare_outcomes(initial, self._store, None, self._files, "initial_events")
        now = self._clock()
        body = {**_new_session_body(command, snapshot, vault_ids, budget), "memory_stores": memory}
        body["skill_offers"] = skill_offers  # for the harness's system prompt (not in the API's view)
        body["tool_runner"] = tool_runner_of(environment.body.get("config"))  # edge or worker
        res = await self._store.create_resource("session", command.session_id or new_session_id(), body, now)
        created = await self._create_repositories(res.id, repositories, now)
        for index, resolved in enumerate([*memory, *files], start=len(created)):
            at = now + timedelta(microseconds=index)
            await self._store.create_resource(
                RESOURCE_KIND, new_resource_id(), memory_body(res.id, resolved), at
            )
        if initial:
            await append_and_publish(self._store, self._bus, res.id, initial, now)
            await self._runner.wake(res.id)
        await self._tell("created", res)
        await self._queue_work(res)
        return await self._view(res)

    async def list_sessions(self, query: SessionQuery, viewer: Viewer) -> SessionPage:
        """A page of sessions; with a status or memory store filter, store pages are read until
        the page is full (each only as long as still needed, so the store's cursor after the last
        row read is exactly where the next page starts)."""
        collected: list[SessionView] = []
        pages: list[Page] = []
        cursor = query.cursor
        filtering = bool(query.statuses) or query.memory_store_id is not None
        while True:
            result = await self._store.list_resources(
                "session",
                filters=_session_filters(query, viewer),
                created_after=query.created_after,
                created_before=query.created_before,
                include_archived=query.include_archived,
                limit=query.limit - len(collected),
                cursor=cursor,
                order=query.order,
            )
            pages.append(result)
            rows = [r for r in result.items if _mounts(r, query.memory_store_id)]
            views = [await self._view(r) for r in rows]
            matched = [v for v in views if not query.statuses or v.current_status in query.statuses]
            collected = collected + matched if query.forward else matched + collected
            cursor = result.next_cursor if query.forward else result.prev_cursor
            if not filtering or len(collected) >= query.limit or cursor is None:
                break
        first, last = pages[0], pages[-1]
        if query.forward:
            return SessionPage(collected, last.next_cursor, first.prev_cursor)
        return SessionPage(collected, first.next_cursor, last.prev_cursor)

    async def update(self, session_id: str, command: UpdateSession, viewer: Viewer) -> SessionView:
        """Apply the patch on top of whatever the harness wrote meanwhile (``Conflict`` if the
        session keeps changing); a change appends a ``session.updated`` event with the changed
        fields, no change writes nothing."""
        if not isinstance(command.vault_ids, Keep):
            raise InvalidRequest(
                "vault_ids: changing a session's vaults is not supported; requests setting this field "
                "are rejected",
                param="vault_ids",
            )
        await self.session(session_id, viewer)
        for _ in range(_UPDATE_ATTEMPTS):
            current = await self._store.get_resource("session", session_id)
            new, changed = await self._changes(current, command)
            if new == current.body:
                return await self._view(current)
            now = self._clock()
            try:
                res = await self._store.update_resource(
                    "session", session_id, new, now, expected_version=current.version
                )
            except VersionConflict:
                continue  # the harness updated status or usage meanwhile: apply ours on top
            updated = NewEvent(new_event_id(), "session.updated", changed)
            await append_and_publish(self._store, self._bus, session_id, [updated], now)
            return await self._view(res)
        raise Conflict(f"session {session_id!r} kept changing during the update; retry")

    async def archive(self, session_id: str, viewer: Viewer) -> SessionView:
        await self.session(session_id, viewer)
        now = self._clock()
        await self._store.archive_resource("session", session_id, now)
        await RepositoryTokens.purge(self._store, await list_repositories(self._store, session_id))
        res = await self._set_body_status(session_id, SessionStatus.TERMINATED, now)
        await self._runner.session_ended(session_id)
        await self._work_ended(res)
        if (await read_status(self._store, session_id)).status is not SessionStatus.TERMINATED:
            terminated = NewEvent(new_event_id(), "session.status_terminated", {})
            await append_and_publish(self._store, self._bus, session_id, [terminated], now)
        await self._tell("archived", res)
        return await self._view(res)

    async def delete(self, session_id: str, viewer: Viewer) -> None:
        session = await self.session(session_id, viewer)
        await self._runner.session_ended(session_id)  # first, so the harness stops before the log goes
        await self._work_ended(await self._store.get_resource("session", session_id))
        for resource in await list_session_resources(self._store, session_id):
            await self._store.delete_resource(RESOURCE_KIND, resource.id)
        await self._store.delete_resource("session", session_id)
        self._bus.publish_persisted(session_id, 0)  # wake live streams: they find the session gone
        await self._tell("deleted", session)

    # -- events ----------------------------------------------------------------------------
    async def send_events(self, session_id: str, raw_events: Any, viewer: Viewer) -> list[Event]:
        """Validate the batch (``InvalidRequest``, nothing written), append it, wake the runner;
        returns the events as stored (server ids and ``processed_at``)."""
        session = await self.session(session_id, viewer)
        if session.archived_at is not None:
            raise InvalidRequest(
                f"session {session_id!r} is archived; it takes no more events", param="session_id"
            )
        if (await read_status(self._store, session_id)).status is SessionStatus.TERMINATED:
            raise InvalidRequest(
                f"session {session_id!r} is terminated; it takes no more events", param="session_id"
            )
        if session.body.get("dream_id"):  # a dream's record (docs/dreams.md), not an agent's session
            raise InvalidRequest(
                f"session {session_id!r} runs a dream; it takes no events", param="session_id"
            )
        events = parse_input_events(raw_events)
        await check_thread_ids(self._store, session_id, events, "events")
        events = await prepare_outcomes(events, self._store, session_id, self._files, "events")
        worker_tools = session.body.get("tool_runner") == WORKER
        await check_answers(self._store, session_id, events, "events", worker_tools=worker_tools)
        stored = await append_and_publish(self._store, self._bus, session_id, events, self._clock())
        await self._runner.wake(session_id)
        await self._queue_work(session)
        return stored

    async def events(self, session_id: str, query: EventQuery, viewer: Viewer) -> EventPage:
        """A page of the log. Time bounds are applied while scanning, so a page is always full
        when it can be."""
        await self.session(session_id, viewer)
        wanted = query.limit + 1
        batch_size = wanted if query.unbounded else max(wanted, _SCAN_BATCH)
        found: list[Event] = []
        position = query.after
        while len(found) < wanted:
            if query.order is Order.ASC:
                batch = await self._store.get_events(
                    session_id,
                    after_seq=position or 0,
                    types=query.types,
                    limit=batch_size,
                    order=query.order,
                )
            else:
                batch = await self._store.get_events(
                    session_id, before_seq=position, types=query.types, limit=batch_size, order=query.order
                )
            found.extend(e for e in batch if query.in_bounds(e.processed_at))
            if len(batch) < batch_size:
                break
            position = batch[-1].seq
        return EventPage(found[: query.limit], len(found) > query.limit)

    # -- repositories ----------------------------------------------------------------------
    async def repositories(self, session_id: str, viewer: Viewer, *, limit: int, cursor: str | None) -> Page:
        await self.session(session_id, viewer)
        return await self._store.list_resources(
            RESOURCE_KIND, filters={"session_id": session_id}, limit=limit, cursor=cursor, order=Order.ASC
        )

    async def repository(self, session_id: str, resource_id: str, viewer: Viewer) -> Resource:
        await self.session(session_id, viewer)
        return await self._repository_of(session_id, resource_id, any_type=True)

    async def add_resource(self, session_id: str, params: Mapping[str, Any], viewer: Viewer) -> Resource:
        """Add a ``file`` resource (:mod:`control_plane.sessions.file_resources`); the edge gets
        it with the session's next sandbox request. Repositories and memory stores are given
        when the session is created."""
        await self._usable_session(session_id, viewer)
        if params.get("type") != FILE_TYPE:
            raise InvalidRequest(
                "type: only 'file' resources can be added to a session; repositories and memory "
                "stores are given when the session is created",
                param="type",
            )
        existing = [r.body for r in await list_session_resources(self._store, session_id)]
        body = await resolve_file_resource(self._store, params, "body", existing)
        return await self._store.create_resource(
            RESOURCE_KIND, new_resource_id(), memory_body(session_id, body), self._clock()
        )

    async def rotate_token(
        self, session_id: str, resource_id: str, params: Mapping[str, Any], viewer: Viewer
    ) -> Resource:
        """``params``: ``{"authorization_token"}`` (anything else is refused); sealed again."""
        await self._usable_session(session_id, viewer)
        res = await self._repository_of(session_id, resource_id)
        if res.body.get("type") == FILE_TYPE:
            raise InvalidRequest(
                "only github_repository resources take a new authorization_token", param="resource_id"
            )
        unknown = sorted(set(params) - {"authorization_token"})
        if unknown:
            raise InvalidRequest(f"unknown field(s) {', '.join(unknown)}", param=unknown[0])
        token = check_token(params.get("authorization_token"), "authorization_token")
        if self._tokens is None:
            raise NotConfigured(f"authorization_token: {_NO_VAULT}")
        sealed = await self._tokens.seal(session_id, resource_id, str(res.body["url"]), token)
        return await self._store.update_resource(
            RESOURCE_KIND,
            resource_id,
            {**res.body, "sealed": sealed},
            self._clock(),
            expected_version=res.version,
        )

    async def remove_repository(self, session_id: str, resource_id: str, viewer: Viewer) -> None:
        await self.session(session_id, viewer)
        await self._repository_of(session_id, resource_id)
        await self._store.delete_resource(RESOURCE_KIND, resource_id)

    # -- helpers ---------------------------------------------------------------------------
    async def _tell(self, change: str, res: Resource) -> None:
        if self._hooks is not None:
            environment_id = res.body.get("environment_id")
            await self._hooks.session_changed(
                change, res.id, environment_id if isinstance(environment_id, str) else None
            )

    async def _queue_work(self, session: Resource) -> None:
        """A worker-run session got input (or was made): a work item unless one is live. A
        failure is logged: the session's next input queues it."""
        if self._work is None or session.body.get("tool_runner") != WORKER:
            return
        try:
            await self._work.session_input(session.id)
        except Exception:
            log.exception("session %s: could not queue a work item", session.id)

    async def _work_ended(self, session: Resource) -> None:
        if self._work is None or session.body.get("tool_runner") != WORKER:
            return
        try:
            await self._work.session_ended(session.id)
        except Exception:
            log.exception("session %s: could not stop its work items", session.id)

    async def _view(self, res: Resource) -> SessionView:
        status = await read_status(self._store, res.id)
        repositories = await list_session_resources(self._store, res.id)
        tokens = token_totals(await read_usage(self._store, res.id))
        now = self._clock()
        active = await read_active_ms(self._store, res.id, now)
        usage = usage_json(tokens, price_for(self._prices, _model_id(res.body["agent"])), active)
        outcomes = await read_outcome_evaluations(self._store, res.id)
        return SessionView(res, status, usage, repositories, now, outcomes)

    async def _usable_session(self, session_id: str, viewer: Viewer) -> Resource:
        session = await self.session(session_id, viewer)
        if session.archived_at is not None:
            raise InvalidRequest(f"session {session_id!r} is archived", param="session_id")
        return session

    async def _repository_of(self, session_id: str, resource_id: str, *, any_type: bool = False) -> Resource:
        res = await self._store.get_resource(RESOURCE_KIND, resource_id)
        if res.body.get("session_id") != session_id:
            raise NotFound(RESOURCE_KIND, resource_id)
        if not any_type and res.body.get("type") == MEMORY_TYPE:
            raise InvalidRequest(
                "a memory_store resource is mounted for the session's whole life in Outpost: it "
                "cannot be changed or removed",
                param="resource_id",
            )
        return res

    async def _agent_snapshot(self, choice: AgentChoice) -> dict[str, Any]:
        """The referenced version (latest when omitted) with any overrides."""
        agent = await self._agents.for_new_session(choice.id, choice.version)
        snapshot = overridden_snapshot(agent, choice.overrides, self._outbound)
        snapshot["multiagent"] = await session_multiagent(snapshot.get("multiagent"), self._store)  # roster
        return snapshot

    async def _changes(
        self, current: Resource, command: UpdateSession
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The session's new body, and the changed fields for the ``session.updated`` event."""
        new = dict(current.body)
        changed: dict[str, Any] = {}
        if not isinstance(command.title, Keep) and command.title != current.body.get("title"):
            new["title"] = changed["title"] = command.title
        if command.metadata is not None:
            merged = apply_metadata_patch(current.body.get("metadata", {}), dict(command.metadata))
            if merged != current.body.get("metadata", {}):
                new["metadata"] = merged
                if merged:  # the event carries metadata only when it is not empty
                    changed["metadata"] = merged
        if command.agent is not None:
            await self._check_agent_changeable(current)
            old = current.body["agent"]
            snapshot = changed_snapshot(old, command.agent, self._outbound)
            if snapshot != old:
                new["agent"] = changed["agent"] = snapshot
        if not isinstance(command.budget, Keep):
            await self._budget_change(current, command.budget, new, changed)
        return new, changed

    async def _budget_change(
        self, current: Resource, raw: Mapping[str, Any] | None, new: dict[str, Any], changed: dict[str, Any]
    ) -> None:
        """Replace (never at or below the list cost consumed) or remove (``raw`` ``None``) the
        session's budget, into ``new`` and ``changed``."""
        status = await read_status(self._store, current.id)
        if current.archived_at is not None or status.status is SessionStatus.TERMINATED:
            raise InvalidRequest(f"session {current.id!r} is terminated", param="budget")
        old = current.body.get("budget")
        if raw is None:
            if old is not None:
                new["budget"] = changed["budget"] = None
                new["budget_removed"] = True
            return
        budget = parse_budget(raw, "budget")
        if old is None:
            removed = bool(current.body.get("budget_removed"))
            raise BudgetRefused(
                "budget_create_only",
                "budget: "
                + (
                    "a removed budget cannot be added again"
                    if removed
                    else "a budget can only be "
                    "given when the session is created; this one was created without one"
                ),
            )
        model = _model_id(current.body["agent"])
        check_budgetable(model, self._prices, "budget")
        price = price_for(self._prices, model)
        assert price is not None  # checked just above
        consumed = list_cost_cents(token_totals(await read_usage(self._store, current.id)), price)
        if budget.max_cents <= consumed:
            raise BudgetRefused(
                "budget_not_raised",
                f"budget.max_list_cost: {budget.max_cents} cents is not above the list cost the session has "
                f"consumed ({consumed:.2f} cents)",
                param="budget.max_list_cost",
            )
        if budget.to_json() != old:
            new["budget"] = changed["budget"] = budget.to_json()

    async def _check_agent_changeable(self, current: Resource) -> None:
        status = await read_status(self._store, current.id)
        if current.archived_at is not None or status.status is SessionStatus.TERMINATED:
            raise InvalidRequest(f"session {current.id!r} is terminated", param="agent")
        if status.status in _BUSY:
            raise InvalidRequest(
                f"session {current.id!r} is {status.status.value}; its agent can be updated when idle",
                param="agent",
            )

    async def _set_body_status(self, session_id: str, status: SessionStatus, now: datetime) -> Resource:
        """Mirror ``status`` into the body (the harness scans sessions by ``status``)."""
        for _ in range(_UPDATE_ATTEMPTS):
            current = await self._store.get_resource("session", session_id)
            if current.body.get("status") == status.value:
                return current
            body = {**current.body, "status": status.value}
            try:
                return await self._store.update_resource(
                    "session", session_id, body, now, expected_version=current.version
                )
            except VersionConflict:
                continue
        return await self._store.get_resource("session", session_id)

    async def _create_repositories(
        self, session_id: str, repositories: Sequence[RepositoryInput], now: datetime
    ) -> list[Resource]:
        """Store the repositories of a new session, tokens sealed."""
        created: list[Resource] = []
        for index, repo in enumerate(repositories):
            resource_id = new_resource_id()
            sealed = None
            if repo.token and self._tokens is not None:
                sealed = await self._tokens.seal(session_id, resource_id, repo.url, repo.token)
            body = repository_body(session_id, repo, sealed)
            # One microsecond apart: listings (ordered by creation time, then id) keep the request's order.
            at = now + timedelta(microseconds=index)
            created.append(await self._store.create_resource(RESOURCE_KIND, resource_id, body, at))
        return created


def _model_id(agent: Mapping[str, Any]) -> str:
    """The model id of an agent snapshot (``model`` is ``{"id", ...}``)."""
    model = agent.get("model")
    return str(model.get("id") if isinstance(model, Mapping) else model)


def _new_session_body(
    command: CreateSession, snapshot: dict[str, Any], vault_ids: list[str], budget: Budget | None
) -> dict[str, Any]:
    return {
        "agent": snapshot,
        "agent_id": snapshot["id"],
        "agent_version": snapshot["version"],
        "environment_id": command.environment_id,
        "vault_ids": vault_ids,
        "resources": [],
        "metadata": check_metadata(dict(command.metadata)),
        "title": command.title,
        "budget": budget.to_json() if budget is not None else None,
        "deployment_id": command.deployment_id,
        "outcome_evaluations": [],
        "status": SessionStatus.IDLE.value,  # mirrored for the harness; the log is the truth
    }


def _mounts(session: Resource, memory_store_id: str | None) -> bool:
    """Whether the session mounts the memory store (``None``: no filter)."""
    if memory_store_id is None:
        return True
    mounts = session.body.get("memory_stores") or []
    return any(isinstance(m, Mapping) and m.get("memory_store_id") == memory_store_id for m in mounts)


def _session_filters(query: SessionQuery, viewer: Viewer) -> dict[str, Any]:
    filters: dict[str, Any] = {}
    if query.agent_id is not None:
        filters["agent_id"] = query.agent_id
        if query.agent_version is not None:
            filters["agent_version"] = query.agent_version
    if query.deployment_id is not None:
        filters["deployment_id"] = query.deployment_id
    if viewer.environment_ids is not None:  # only the sessions of the key's environments
        filters["environment_id"] = tuple(viewer.environment_ids)
    return filters
