"""Deployments and their runs: the rules, whoever asks (the HTTP API, the scheduler).

A deployment (resource kind ``deployment``) binds an agent version, an environment, initial events,
resources, vaults, a budget and metadata, and optionally a cron schedule
(:mod:`control_plane.deployments.cron`). A run (kind ``deployment_run``, append-only) records one
execution: the session it created, or the typed error why none could be
(:mod:`control_plane.deployments.run_errors`). Sessions are created by the
:class:`~control_plane.sessions.service.SessionService`, exactly as ``POST /v1/sessions`` would,
with the deployment's id stamped on them (``deployment_id``).

Statuses: ``active`` or ``paused`` (``paused_reason`` ``manual``, or ``error`` when
``pause_after_failures`` scheduled runs in a row failed). A paused deployment fires no scheduled
runs; manual runs (``run``) still work. Archived deployments report ``active`` with
``archived_at`` set; they take no changes and no runs.

Scheduled runs (:meth:`DeploymentService.fire_due`) are exactly once per (deployment, tick)
across control-plane processes on one store: the run's id and its session's id are derived from
the pair (:func:`tick_ids`), so a second process firing the same tick meets ``Conflict`` on the
session (it then records the run for the session that exists) or on the run (it then does
nothing). A process that crashed after creating the session and before the run is recovered the
same way by the next check. A tick is due when it is after the later of ``anchor_at`` (creation,
a new schedule, unpausing) and the last tick fired, and at or before now; only the latest such
tick fires (:func:`~control_plane.deployments.cron.due_tick`).

:data:`RunListener` is the one call site for what happens when a run was recorded (webhooks
``deployment_run.started`` / ``succeeded`` / ``failed``): it is called once per run, by the
process that recorded it.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from control_plane.agents.service import AgentService
from control_plane.deployments import run_errors
from control_plane.deployments.commands import (
    CreateDeployment,
    DeploymentQuery,
    DeploymentView,
    RunQuery,
    UpdateDeployment,
)
from control_plane.deployments.cron import CronSchedule, due_tick, parse_schedule, upcoming
from control_plane.environments.service import get_environment
from control_plane.errors import Conflict, ControlPlaneError, InvalidRequest, NotFound, VersionConflict
from control_plane.metadata import apply_metadata_patch, check_metadata
from control_plane.patch import Keep
from control_plane.sessions.commands import AgentChoice, CreateSession, Viewer
from control_plane.sessions.file_resources import FILE_TYPE, resolve_file_resource
from control_plane.sessions.input_events import parse_input_events
from control_plane.sessions.memory_resources import (
    MEMORY_TYPE,
    parse_memory_resource,
    resolve_memory_resources,
)
from control_plane.sessions.repositories import parse_resources
from control_plane.sessions.service import SessionService
from control_plane.sessions.usage import ModelPrice, check_budgetable, default_model_prices, parse_budget
from control_plane.store.base import Page, Resource, Resources
from control_plane.timestamps import timestamp

__all__ = [
    "DEPLOYMENT_KIND",
    "RUN_KIND",
    "DeploymentService",
    "RunListener",
    "no_listener",
    "tick_ids",
]

log = logging.getLogger(__name__)

DEPLOYMENT_KIND = "deployment"
RUN_KIND = "deployment_run"
MAX_PAGE = 100
MAX_RUN_PAGE = 1000
MAX_INITIAL_EVENTS = 50
MAX_RESOURCES = 500
MAX_VAULTS = 50
MAX_NAME = 256
MAX_DESCRIPTION = 2048
_INITIAL_TYPES = frozenset({"user.message", "user.define_outcome", "system.message"})
_UPDATE_ATTEMPTS = 5
_SCAN_PAGE = 200


class RunListener(Protocol):
    """Told ``("deployment_run.started" | "deployment_run.succeeded" | "deployment_run.failed", run)``."""

    def __call__(self, event: str, run: Resource) -> Awaitable[None]: ...


async def no_listener(event: str, run: Resource) -> None:
    """The default :class:`RunListener`: nothing to tell (webhooks are wired by the composition)."""


def _new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(12)


def tick_ids(deployment_id: str, tick: datetime) -> tuple[str, str]:
    """The run id and the session id of a scheduled tick: the same in every process."""
    digest = hashlib.sha256(f"{deployment_id}|{timestamp(tick)}".encode()).hexdigest()
    return "drun_" + digest[:24], "sesn_" + digest[24:48]


def _at(value: str) -> datetime:
    return datetime.fromisoformat(value)


def _agent_ref(raw: object) -> tuple[str, int | None]:
    if isinstance(raw, str) and raw:
        return raw, None
    if isinstance(raw, Mapping) and raw.get("type") == "agent" and isinstance(raw.get("id"), str):
        if set(raw) - {"type", "id", "version"}:
            raise InvalidRequest("agent: unknown field(s)", param="agent")
        version = raw.get("version")
        if version is not None and (not isinstance(version, int) or isinstance(version, bool) or version < 1):
            raise InvalidRequest("agent.version must be a positive integer", param="agent.version")
        return str(raw["id"]), version
    raise InvalidRequest("agent must be an agent id or {'type': 'agent', 'id', 'version'}", param="agent")


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_NAME:
        raise InvalidRequest(f"name must be 1-{MAX_NAME} characters", param="name")
    return name


def _check_description(description: str | None) -> str | None:
    if description is not None and len(description) > MAX_DESCRIPTION:
        raise InvalidRequest(f"description must be at most {MAX_DESCRIPTION} characters", param="description")
    return description or None


def _check_initial_events(events: Sequence[Any]) -> list[Any]:
    parse_input_events(
        list(events), allowed=_INITIAL_TYPES, param="initial_events", max_events=MAX_INITIAL_EVENTS
    )
    return list(events)


def _check_vault_ids(vault_ids: Sequence[str]) -> list[str]:
    if len(vault_ids) > MAX_VAULTS:
        raise InvalidRequest(f"vault_ids: at most {MAX_VAULTS}", param="vault_ids")
    return list(dict.fromkeys(vault_ids))


def _check_budget(raw: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if raw is None else parse_budget(raw, "budget").to_json()


def _schedule_json(raw: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if raw is None else parse_schedule(raw).to_json()


def _schedule_of(body: Mapping[str, Any]) -> CronSchedule | None:
    raw = body.get("schedule")
    return None if raw is None else CronSchedule(raw["expression"], raw["timezone"])


class DeploymentService:
    """``prices``: the list prices a budget needs (default: the sessions' defaults).
    ``on_run``: told of every run this process records (default: nobody)."""

    def __init__(
        self,
        store: Resources,
        sessions: SessionService,
        agents: AgentService,
        clock: Callable[[], datetime],
        *,
        prices: Mapping[str, ModelPrice] | None = None,
        on_run: RunListener = no_listener,
    ) -> None:
        self._store = store
        self._sessions = sessions
        self._agents = agents
        self._clock = clock
        self._prices = dict(prices) if prices is not None else default_model_prices()
        self._on_run = on_run

    # -- deployments ---------------------------------------------------------------------------
    async def create(self, command: CreateDeployment, viewer: Viewer) -> DeploymentView:
        now = self._clock()
        body: dict[str, Any] = {
            "name": _check_name(command.name),
            "description": _check_description(command.description),
            "metadata": check_metadata(dict(command.metadata)),
            "schedule": _schedule_json(command.schedule),
            "initial_events": _check_initial_events(command.initial_events),
            "resources": await self._check_resources(command.resources),
            "vault_ids": await self._check_vaults(command.vault_ids),
            "environment_id": await self._check_environment(command.environment_id, viewer),
            "status": "active",
            "paused_reason": None,
            "anchor_at": timestamp(now),
            "last_tick_at": None,
            "last_run_at": None,
            "failures": 0,
        }
        body["agent"] = await self._resolve_agent(command.agent)
        body["agent_id"] = body["agent"]["id"]
        body["budget"] = _check_budget(command.budget)
        await self._check_budget_model(body["budget"], body["agent"])
        body["scheduled"] = body["schedule"] is not None
        res = await self._store.create_resource(DEPLOYMENT_KIND, _new_id("depl_"), body, now)
        return self._view(res, now)

    async def get(self, deployment_id: str, viewer: Viewer) -> DeploymentView:
        return self._view(await self._deployment(deployment_id, viewer), self._clock())

    async def list_deployments(
        self, query: DeploymentQuery, viewer: Viewer
    ) -> tuple[list[DeploymentView], str | None]:
        if query.status is not None and query.include_archived:
            raise InvalidRequest("status cannot be combined with include_archived", param="status")
        filters: dict[str, Any] = {}
        if query.agent_id is not None:
            filters["agent_id"] = query.agent_id
        if query.status is not None:
            filters["status"] = query.status
        if viewer.environment_ids is not None:
            filters["environment_id"] = tuple(viewer.environment_ids)
        page = await self._store.list_resources(
            DEPLOYMENT_KIND,
            filters=filters,
            created_after=query.created_after,
            created_before=query.created_before,
            include_archived=query.include_archived,
            limit=query.limit,
            cursor=query.cursor,
        )
        now = self._clock()
        return [self._view(r, now) for r in page.items], page.next_cursor

    async def update(self, deployment_id: str, command: UpdateDeployment, viewer: Viewer) -> DeploymentView:
        for _ in range(_UPDATE_ATTEMPTS):
            current = await self._deployment(deployment_id, viewer)
            if current.archived_at is not None:
                raise InvalidRequest(f"deployment {deployment_id!r} is archived and cannot be updated")
            new = await self._updated_body(current.body, command, viewer)
            if new == current.body:
                return self._view(current, self._clock())
            try:
                return await self._put(current, new)
            except VersionConflict:
                continue
        raise Conflict(f"deployment {deployment_id!r} kept changing during the update; retry")

    async def archive(self, deployment_id: str, viewer: Viewer) -> DeploymentView:
        await self._deployment(deployment_id, viewer)
        res = await self._change(deployment_id, lambda b: {**b, "status": "active", "paused_reason": None})
        if res.archived_at is None:
            res = await self._store.archive_resource(DEPLOYMENT_KIND, deployment_id, self._clock())
        return self._view(res, self._clock())

    async def pause(self, deployment_id: str, viewer: Viewer) -> DeploymentView:
        await self._usable(deployment_id, viewer)
        paused = {"status": "paused", "paused_reason": {"type": "manual"}}
        return self._view(await self._change(deployment_id, lambda b: {**b, **paused}), self._clock())

    async def unpause(self, deployment_id: str, viewer: Viewer) -> DeploymentView:
        """Active again; ticks missed while paused are not fired (the schedule restarts now)."""
        await self._usable(deployment_id, viewer)
        now = timestamp(self._clock())

        def unpaused(body: dict[str, Any]) -> dict[str, Any]:
            if body.get("status") != "paused":
                return body
            return {**body, "status": "active", "paused_reason": None, "anchor_at": now, "failures": 0}

        return self._view(await self._change(deployment_id, unpaused), self._clock())

    # -- runs ----------------------------------------------------------------------------------
    async def run_now(self, deployment_id: str, viewer: Viewer) -> Resource:
        """A manual run (paused deployments too): the run, with its session or its error."""
        dep = await self._usable(deployment_id, viewer)
        run = await self._start(dep, {"type": "manual"}, _new_id("drun_"), None)
        assert run is not None  # a fresh id: no other process records it
        return run

    async def get_run(self, run_id: str, viewer: Viewer) -> Resource:
        res = await self._store.get_resource(RUN_KIND, run_id)
        if not viewer.sees(res.body.get("environment_id")):
            raise NotFound(RUN_KIND, run_id)
        return res

    async def list_runs(self, query: RunQuery, viewer: Viewer) -> Page:
        filters: dict[str, Any] = {}
        if query.deployment_id is not None:
            filters["deployment_id"] = query.deployment_id
        if query.has_error is not None:
            filters["has_error"] = query.has_error
        if query.trigger_type is not None:
            filters["trigger_type"] = query.trigger_type
        if viewer.environment_ids is not None:
            filters["environment_id"] = tuple(viewer.environment_ids)
        return await self._store.list_resources(
            RUN_KIND,
            filters=filters,
            created_after=query.created_after,
            created_before=query.created_before,
            limit=query.limit,
            cursor=query.cursor,
        )

    async def fire_due(self, now: datetime, *, pause_after_failures: int) -> list[Resource]:
        """Fire every active deployment's due tick (the scheduler's step); the runs this call
        recorded. Safe in several processes at once (exactly one run per tick)."""
        fired: list[Resource] = []
        cursor: str | None = None
        while True:
            page = await self._store.list_resources(
                DEPLOYMENT_KIND,
                filters={"status": "active", "scheduled": True},
                limit=_SCAN_PAGE,
                cursor=cursor,
            )
            for dep in page.items:
                try:
                    run = await self._fire(dep, now, pause_after_failures)
                except Exception:  # one deployment's trouble does not stop the others
                    log.exception("deployment %s: firing its schedule failed", dep.id)
                    continue
                if run is not None:
                    fired.append(run)
            cursor = page.next_cursor
            if cursor is None:
                return fired

    async def _fire(self, dep: Resource, now: datetime, pause_after_failures: int) -> Resource | None:
        schedule = _schedule_of(dep.body)
        if schedule is None:
            return None
        floor = max(t for t in (dep.body.get("anchor_at"), dep.body.get("last_tick_at")) if t)
        tick = due_tick(schedule, _at(floor), now)
        if tick is None:
            return None
        run_id, session_id = tick_ids(dep.id, tick)
        trigger = {"type": "schedule", "scheduled_at": timestamp(tick)}
        run = await self._start(dep, trigger, run_id, session_id)
        failed = run is not None and run.body.get("error") is not None

        def fired(body: dict[str, Any]) -> dict[str, Any]:
            new = {**body}
            if not new.get("last_tick_at") or _at(new["last_tick_at"]) < tick:
                new["last_tick_at"] = timestamp(tick)
            if run is None:  # another process recorded this tick's run and keeps the counts
                return new
            new["last_run_at"] = timestamp(run.created_at)
            new["failures"] = int(new.get("failures", 0)) + 1 if failed else 0
            if failed and new["failures"] >= pause_after_failures and new.get("status") == "active":
                error = run_errors.paused_error(run.body["error"])
                new.update(status="paused", paused_reason={"type": "error", "error": error})
                log.warning("deployment %s paused after %d failed runs", dep.id, new["failures"])
            return new

        await self._change(dep.id, fired)
        return run

    async def _start(
        self, dep: Resource, trigger: dict[str, Any], run_id: str, session_id: str | None
    ) -> Resource | None:
        """Create the session and record the run (``None``: another process recorded it)."""
        body = dep.body
        error = await run_errors.precheck(self._store, body)
        made: str | None = None
        if error is None:
            try:
                made = await self._create_session(dep, session_id)
            except ControlPlaneError as exc:
                error = run_errors.from_exception(exc)
            except Exception as exc:
                log.exception("deployment %s: creating the run's session failed", dep.id)
                error = {"type": "unknown_error", "message": f"the session could not be created: {exc}"}
        record = {
            "deployment_id": dep.id,
            "agent": body["agent"],
            "environment_id": body["environment_id"],
            "session_id": made,
            "error": error,
            "has_error": error is not None,
            "trigger_context": trigger,
            "trigger_type": trigger["type"],
        }
        try:
            run = await self._store.create_resource(RUN_KIND, run_id, record, self._clock())
        except Conflict:
            return None
        await self._notify(run)
        return run

    async def _create_session(self, dep: Resource, session_id: str | None) -> str:
        body = dep.body
        command = CreateSession(
            agent=AgentChoice(body["agent"]["id"], body["agent"]["version"]),
            environment_id=body["environment_id"],
            metadata=body.get("metadata", {}),
            initial_events=body["initial_events"],
            vault_ids=body.get("vault_ids", []),
            resources=body.get("resources", []),
            budget=body.get("budget"),
            deployment_id=dep.id,
            session_id=session_id,
        )
        try:
            return (await self._sessions.create(command, Viewer())).session.id
        except Conflict:
            if session_id is None:
                raise
            # Another process (or this one before a crash) created this tick's session.
            existing = await self._store.get_resource("session", session_id)
            if existing.body.get("deployment_id") != dep.id:
                raise
            return session_id

    async def _notify(self, run: Resource) -> None:
        """The one call site of the run listener (webhooks): started, then succeeded or failed."""
        outcome = "deployment_run.failed" if run.body.get("error") else "deployment_run.succeeded"
        for event in ("deployment_run.started", outcome):
            try:
                await self._on_run(event, run)
            except Exception:
                log.exception("deployment run listener failed on %s for %s", event, run.id)

    # -- helpers -------------------------------------------------------------------------------
    async def _deployment(self, deployment_id: str, viewer: Viewer) -> Resource:
        res = await self._store.get_resource(DEPLOYMENT_KIND, deployment_id)
        if not viewer.sees(res.body.get("environment_id")):
            raise NotFound(DEPLOYMENT_KIND, deployment_id)
        return res

    async def _usable(self, deployment_id: str, viewer: Viewer) -> Resource:
        res = await self._deployment(deployment_id, viewer)
        if res.archived_at is not None:
            raise InvalidRequest(f"deployment {deployment_id!r} is archived")
        return res

    async def _put(self, current: Resource, new: Mapping[str, Any]) -> DeploymentView:
        res = await self._store.update_resource(
            DEPLOYMENT_KIND, current.id, new, self._clock(), expected_version=current.version
        )
        return self._view(res, self._clock())

    async def _change(
        self, deployment_id: str, change: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> Resource:
        """Apply ``change`` to the body, compare-and-set, retried when another writer won."""
        for _ in range(_UPDATE_ATTEMPTS):
            current = await self._store.get_resource(DEPLOYMENT_KIND, deployment_id)
            new = change(dict(current.body))
            if new == current.body:
                return current
            try:
                return await self._store.update_resource(
                    DEPLOYMENT_KIND, deployment_id, new, self._clock(), expected_version=current.version
                )
            except VersionConflict:
                continue
        raise Conflict(f"deployment {deployment_id!r} kept changing; retry")

    def _view(self, res: Resource, now: datetime) -> DeploymentView:
        schedule = _schedule_of(res.body)
        fires = [] if schedule is None or res.archived_at is not None else upcoming(schedule, now)
        return DeploymentView(res, fires)

    async def _resolve_agent(self, raw: object) -> dict[str, Any]:
        agent_id, version = _agent_ref(raw)
        agent = await self._agents.for_new_session(agent_id, version)
        return {"type": "agent", "id": agent.id, "version": agent.version}

    async def _check_environment(self, environment_id: str, viewer: Viewer) -> str:
        await get_environment(self._store, environment_id, viewer, usable=True)
        return environment_id

    async def _check_vaults(self, vault_ids: Sequence[str]) -> list[str]:
        checked = _check_vault_ids(vault_ids)
        for vault_id in checked:
            if (await self._store.get_resource("vault", vault_id)).archived_at is not None:
                raise InvalidRequest(f"vault_ids: vault {vault_id!r} is archived", param="vault_ids")
        return checked

    async def _check_resources(self, resources: Sequence[Any]) -> list[Any]:
        """As a session create checks them (and they exist now); no repository tokens."""
        if len(resources) > MAX_RESOURCES:
            raise InvalidRequest(f"resources: at most {MAX_RESOURCES}", param="resources")
        for index, repo in enumerate(parse_resources(resources)):
            if repo.token:
                raise InvalidRequest(
                    "resources: authorization_token is not supported on deployments by Outpost yet "
                    "(the edge's own credential for the host is used)",
                    param=f"resources[{index}].authorization_token",
                )
        memory = [
            (f"resources[{i}]", parse_memory_resource(item, f"resources[{i}]"))
            for i, item in enumerate(resources)
            if isinstance(item, Mapping) and item.get("type") == MEMORY_TYPE
        ]
        await resolve_memory_resources(self._store, memory)
        files: list[dict[str, Any]] = []
        for i, item in enumerate(resources):
            if isinstance(item, Mapping) and item.get("type") == FILE_TYPE:
                files.append(await resolve_file_resource(self._store, item, f"resources[{i}]", files))
        return [dict(item) for item in resources]

    async def _check_budget_model(self, budget: Mapping[str, Any] | None, agent: Mapping[str, Any]) -> None:
        if budget is None:
            return
        version = await self._agents.get(agent["id"], agent["version"])
        model = version.body.get("model")
        check_budgetable(
            str(model.get("id") if isinstance(model, Mapping) else model), self._prices, "budget"
        )

    async def _updated_body(
        self, current: Mapping[str, Any], command: UpdateDeployment, viewer: Viewer
    ) -> dict[str, Any]:
        new = dict(current)
        if not isinstance(command.name, Keep):
            new["name"] = _check_name(command.name)
        if not isinstance(command.description, Keep):
            new["description"] = _check_description(command.description)
        if not isinstance(command.metadata, Keep) and command.metadata is not None:
            new["metadata"] = apply_metadata_patch(current.get("metadata", {}), dict(command.metadata))
        if not isinstance(command.schedule, Keep):
            new["schedule"] = _schedule_json(command.schedule)
            new["scheduled"] = new["schedule"] is not None
            if new["schedule"] != current.get("schedule"):
                new["anchor_at"] = timestamp(self._clock())  # a new schedule starts now
        if not isinstance(command.initial_events, Keep):
            new["initial_events"] = _check_initial_events(command.initial_events)
        if not isinstance(command.resources, Keep):
            new["resources"] = await self._check_resources(command.resources or [])
        if not isinstance(command.vault_ids, Keep):
            new["vault_ids"] = await self._check_vaults(command.vault_ids or [])
        if not isinstance(command.environment_id, Keep):
            new["environment_id"] = await self._check_environment(command.environment_id, viewer)
        if not isinstance(command.agent, Keep):
            new["agent"] = await self._resolve_agent(command.agent)
            new["agent_id"] = new["agent"]["id"]
        if not isinstance(command.budget, Keep):
            new["budget"] = _check_budget(command.budget)
        await self._check_budget_model(new.get("budget"), new["agent"])
        return new
