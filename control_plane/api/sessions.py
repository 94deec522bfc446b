"""``/v1/sessions``: create, read, list, update, archive and delete sessions.

A session holds a snapshot of its agent (resolved at creation, optionally with overrides) and runs
in a ``self_hosted`` environment. Its reported status is read from its log (see
``control_plane.sessions.log``); the body's ``status`` field is only a mirror for scans (``idle`` at
creation, ``terminated`` on archive, otherwise kept by the harness). The API records input and
wakes the runner; it never runs a turn:

* create with ``initial_events`` → events appended, ``runner.wake``;
* update of ``agent`` (tools / mcp_servers), ``title`` or ``metadata`` → a ``session.updated`` event;
* archive → ``runner.session_ended``, then ``session.status_terminated`` (unless already there);
* delete → ``runner.session_ended`` first, then the session and its log are deleted, and live
  streams are told (they end with a ``session.deleted`` frame).

``resources`` of a create are git repositories (``github_repository``, any https git URL): each is
stored as its own resource with its token sealed (see ``control_plane.sessions.repositories`` and
``control_plane.api.session_resources``); the session's view lists them without tokens. Archive
purges the sealed tokens; delete removes the resources.

An environment-scoped API key lists only its environments' sessions, and any other session is a
404 as if it did not exist (:class:`control_plane.api.caller.Caller`).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, Request

from control_plane.api.agents import stored_tool_params
from control_plane.api.caller import CallerDep
from control_plane.api.environments import get_environment
from control_plane.api.errors import ApiError
from control_plane.api.models import (
    AgentRef,
    AgentWithOverrides,
    SessionCreate,
    SessionUpdate,
    apply_metadata_patch,
    check_metadata,
)
from control_plane.api.query import check_limit, decode_cursor, encode_cursor, query_list, time_bounds
from control_plane.api.resources_json import session_agent_snapshot, session_json
from control_plane.api.session_resources import create_repositories
from control_plane.bus import EventBus
from control_plane.errors import InvalidRequest, VersionConflict
from control_plane.outbound import OutboundGuard
from control_plane.runner import SessionRunner
from control_plane.sessions.agent_config import (
    resolve_mcp_servers,
    resolve_model,
    resolve_skills,
    resolve_tools,
)
from control_plane.sessions.events import SessionStatus, new_event_id
from control_plane.sessions.input_events import parse_input_events
from control_plane.sessions.log import append_and_publish, read_status, read_usage
from control_plane.sessions.repositories import RESOURCE_KIND, parse_resources, repository_json
from control_plane.sessions.repository_tokens import RepositoryTokens, list_repositories
from control_plane.store.base import NewEvent, Order, Page, Resource, Store

__all__ = ["RunnerCalls", "new_session_id", "sessions_router"]

log = logging.getLogger(__name__)

MAX_PAGE = 100
_STATUSES = frozenset(s.value for s in SessionStatus)
_BUSY = frozenset({SessionStatus.RUNNING, SessionStatus.RESCHEDULING})
_UPDATE_ATTEMPTS = 5


def new_session_id() -> str:
    return "sesn_" + secrets.token_hex(12)


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


async def _agent_snapshot(
    store: Store, ref: str | AgentRef | AgentWithOverrides, outbound: OutboundGuard
) -> dict[str, Any]:
    """The session's agent: the referenced version (latest when omitted) with any overrides."""
    agent_id, version = (ref, None) if isinstance(ref, str) else (ref.id, ref.version)
    latest = await store.get_resource("agent", agent_id)
    if latest.archived_at is not None:
        raise InvalidRequest(f"agent {agent_id!r} is archived", param="agent")
    agent = latest if version is None else await store.get_resource("agent", agent_id, version)
    snapshot = session_agent_snapshot(agent)
    if not isinstance(ref, AgentWithOverrides):
        return snapshot
    sent = ref.model_fields_set
    if ref.model is not None:
        snapshot["model"] = resolve_model(ref.model)
    if "system" in sent:
        snapshot["system"] = ref.system or None
    servers = (
        resolve_mcp_servers(ref.mcp_servers, outbound)
        if ref.mcp_servers is not None
        else snapshot["mcp_servers"]
    )
    tools = ref.tools if ref.tools is not None else stored_tool_params(snapshot["tools"])
    snapshot["mcp_servers"] = servers
    snapshot["tools"] = resolve_tools(tools, servers)
    if ref.skills is not None:
        snapshot["skills"] = resolve_skills(ref.skills)
    return snapshot


async def _session_changes(
    store: Store, current: Resource, body: SessionUpdate, outbound: OutboundGuard
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The session's new body, and the changed fields for the ``session.updated`` event."""
    sent = body.model_fields_set
    new = dict(current.body)
    changed: dict[str, Any] = {}
    if "title" in sent and body.title != current.body.get("title"):
        new["title"] = changed["title"] = body.title
    if "metadata" in sent:
        merged = apply_metadata_patch(current.body.get("metadata", {}), body.metadata)
        if merged != current.body.get("metadata", {}):
            new["metadata"] = merged
            if merged:  # the event carries metadata only when it is not empty
                changed["metadata"] = merged
    if body.agent is not None:
        status = await read_status(store, current.id)
        if current.archived_at is not None or status.status is SessionStatus.TERMINATED:
            raise InvalidRequest(f"session {current.id!r} is terminated", param="agent")
        if status.status in _BUSY:
            raise InvalidRequest(
                f"session {current.id!r} is {status.status.value}; its agent can be updated when idle",
                param="agent",
            )
        old = current.body["agent"]
        given = body.agent.model_fields_set
        servers = (
            resolve_mcp_servers(body.agent.mcp_servers or [], outbound)
            if "mcp_servers" in given
            else old["mcp_servers"]
        )
        tools = (body.agent.tools or []) if "tools" in given else stored_tool_params(old["tools"])
        snapshot = {**old, "mcp_servers": servers, "tools": resolve_tools(tools, servers)}
        if snapshot != old:
            new["agent"] = changed["agent"] = snapshot
    return new, changed


async def _set_body_status(store: Store, session_id: str, status: SessionStatus, now: datetime) -> Resource:
    """Mirror ``status`` into the body (the harness scans sessions by ``status``)."""
    for _ in range(_UPDATE_ATTEMPTS):
        current = await store.get_resource("session", session_id)
        if current.body.get("status") == status.value:
            return current
        body = {**current.body, "status": status.value}
        try:
            return await store.update_resource(
                "session", session_id, body, now, expected_version=current.version
            )
        except VersionConflict:
            continue
    return await store.get_resource("session", session_id)


def _refuse_unsupported(body: SessionCreate | SessionUpdate) -> None:
    sent = body.model_fields_set
    if "budget" in sent and body.budget is not None:
        raise InvalidRequest("budget: spend budgets are not supported by Outpost yet", param="budget")
    if isinstance(body, SessionUpdate) and "vault_ids" in sent:
        raise InvalidRequest(
            "vault_ids: changing a session's vaults is not supported; requests setting this field are "
            "rejected",
            param="vault_ids",
        )


def sessions_router(
    store: Store,
    bus: EventBus,
    runner: SessionRunner,
    clock: Callable[[], datetime],
    tokens: RepositoryTokens | None = None,
    outbound: OutboundGuard | None = None,
) -> APIRouter:
    """``tokens``: seals repository tokens (None: repositories without a token only).
    ``outbound``: the check of direct MCP server URLs (default: no private networks)."""
    router = APIRouter()
    guard = outbound or OutboundGuard()
    calls = RunnerCalls(runner)

    async def view(res: Resource) -> dict[str, Any]:
        status = await read_status(store, res.id)
        resources = [repository_json(r) for r in await list_repositories(store, res.id)]
        return session_json(res, status, await read_usage(store, res.id), clock(), resources)

    @router.post("/v1/sessions")
    async def create(body: SessionCreate, caller: CallerDep) -> dict[str, Any]:
        _refuse_unsupported(body)
        repositories = parse_resources(body.resources)
        if tokens is None and any(repo.token for repo in repositories):
            raise ApiError(
                503,
                "resources: authorization_token needs the vault (which seals tokens); it is not "
                "configured on this control plane",
            )
        await get_environment(store, body.environment_id, usable=True, caller=caller)
        snapshot = await _agent_snapshot(store, body.agent, guard)
        vault_ids = list(dict.fromkeys(body.vault_ids))
        for vault_id in vault_ids:
            await store.get_resource("vault", vault_id)
        initial: list[NewEvent] = []
        if body.initial_events:
            initial = parse_input_events(
                body.initial_events, allowed={"user.message"}, param="initial_events", max_events=50
            )
        stored = {
            "agent": snapshot,
            "agent_id": snapshot["id"],
            "agent_version": snapshot["version"],
            "environment_id": body.environment_id,
            "vault_ids": vault_ids,
            "resources": [],
            "metadata": check_metadata(body.metadata),
            "title": body.title,
            "budget": None,
            "deployment_id": None,
            "outcome_evaluations": [],
            "status": SessionStatus.IDLE.value,  # mirrored for the harness; the log is the truth
        }
        now = clock()
        res = await store.create_resource("session", new_session_id(), stored, now)
        await create_repositories(store, tokens, res.id, repositories, now)
        if initial:
            await append_and_publish(store, bus, res.id, initial, now)
            await calls.wake(res.id)
        return await view(res)

    @router.get("/v1/sessions/{session_id}")
    async def retrieve(session_id: str, caller: CallerDep) -> dict[str, Any]:
        return await view(await caller.session(store, session_id))

    @router.get("/v1/sessions")
    async def list_(
        request: Request,
        caller: CallerDep,
        limit: int = 20,
        page: str | None = None,
        order: Literal["asc", "desc"] = "desc",
        include_archived: bool = False,
        agent_id: str | None = None,
        agent_version: int | None = None,
        deployment_id: str | None = None,
        memory_store_id: str | None = None,
    ) -> dict[str, Any]:
        limit = check_limit(limit, MAX_PAGE)
        statuses = set(query_list(request.query_params, "statuses", allowed=_STATUSES))
        bounds = time_bounds(request.query_params)
        if memory_store_id is not None:  # no session mounts a memory store (yet)
            return {"data": [], "next_page": None, "prev_page": None}
        filters: dict[str, Any] = {}
        if agent_id is not None:
            filters["agent_id"] = agent_id
            if agent_version is not None:
                filters["agent_version"] = agent_version
        if deployment_id is not None:
            filters["deployment_id"] = deployment_id
        if caller.environment_ids is not None:  # only the sessions of the key's environments
            filters["environment_id"] = tuple(caller.environment_ids)
        forward, cursor = True, None
        if page:
            obj = decode_cursor(page)
            if obj.get("d") not in ("next", "prev") or not isinstance(obj.get("c"), str):
                raise InvalidRequest("page: invalid page cursor", param="page")
            forward, cursor = obj["d"] == "next", str(obj["c"])

        collected: list[dict[str, Any]] = []
        pages: list[Page] = []
        while True:
            # With a status filter, fetch only as many as still needed, so that the store's cursor
            # after the last row scanned is exactly where the next page starts.
            result = await store.list_resources(
                "session",
                filters=filters,
                created_after=bounds.after,
                created_before=bounds.before,
                include_archived=include_archived,
                limit=limit - len(collected),
                cursor=cursor,
                order=Order(order),
            )
            pages.append(result)
            views = [await view(r) for r in result.items]
            matched = [v for v in views if not statuses or v["status"] in statuses]
            collected = collected + matched if forward else matched + collected
            cursor = result.next_cursor if forward else result.prev_cursor
            if not statuses or len(collected) >= limit or cursor is None:
                break
        first, last = pages[0], pages[-1]
        next_cursor = last.next_cursor if forward else first.next_cursor
        prev_cursor = first.prev_cursor if forward else last.prev_cursor
        return {
            "data": collected,
            "next_page": encode_cursor({"d": "next", "c": next_cursor}) if next_cursor else None,
            "prev_page": encode_cursor({"d": "prev", "c": prev_cursor}) if prev_cursor else None,
        }

    @router.post("/v1/sessions/{session_id}")
    async def update(session_id: str, body: SessionUpdate, caller: CallerDep) -> dict[str, Any]:
        _refuse_unsupported(body)
        await caller.session(store, session_id)
        for _ in range(_UPDATE_ATTEMPTS):
            current = await store.get_resource("session", session_id)
            new, changed = await _session_changes(store, current, body, guard)
            if new == current.body:
                return await view(current)
            now = clock()
            try:
                res = await store.update_resource(
                    "session", session_id, new, now, expected_version=current.version
                )
            except VersionConflict:
                continue  # the harness updated status or usage meanwhile: apply ours on top
            updated = NewEvent(new_event_id(), "session.updated", changed)
            await append_and_publish(store, bus, session_id, [updated], now)
            return await view(res)
        raise ApiError(409, f"session {session_id!r} kept changing during the update; retry")

    @router.post("/v1/sessions/{session_id}/archive")
    async def archive(session_id: str, caller: CallerDep) -> dict[str, Any]:
        await caller.session(store, session_id)
        now = clock()
        await store.archive_resource("session", session_id, now)
        await RepositoryTokens.purge(store, await list_repositories(store, session_id))
        res = await _set_body_status(store, session_id, SessionStatus.TERMINATED, now)
        await calls.session_ended(session_id)
        if (await read_status(store, session_id)).status is not SessionStatus.TERMINATED:
            terminated = NewEvent(new_event_id(), "session.status_terminated", {})
            await append_and_publish(store, bus, session_id, [terminated], now)
        return await view(res)

    @router.delete("/v1/sessions/{session_id}")
    async def delete(session_id: str, caller: CallerDep) -> dict[str, Any]:
        await caller.session(store, session_id)
        await calls.session_ended(session_id)  # first, so the harness stops before the log goes
        for repository in await list_repositories(store, session_id):
            await store.delete_resource(RESOURCE_KIND, repository.id)
        await store.delete_resource("session", session_id)
        bus.publish_persisted(session_id, 0)  # wake live streams: they find the session gone
        return {"id": session_id, "type": "session_deleted"}

    return router
