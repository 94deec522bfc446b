"""Environments: where sessions run, and the rules, whoever asks (the HTTP API today).

Outpost serves ``self_hosted`` environments only: their sandboxes live on the edges enrolled into
them. A ``cloud`` config is refused saying so; the sandbox ``networking`` is checked by
:mod:`control_plane.environments.networking`. An environment's view carries its edges
(:class:`~control_plane.edge_counts.EdgeCounts`: enrolled and not revoked, and of those connected
to any control-plane process on the store).

Every method takes a :class:`~control_plane.environments.commands.Viewer`: an environment it does
not see is :class:`EnvironmentNotFound`, exactly as an unknown one, and its listing is one page of
its own environments. Making, changing, archiving and deleting environments needs a viewer that
sees all of them (:class:`PermissionDenied` otherwise, after the not-found check). An archived
environment takes no change and no new session (:class:`EnvironmentArchived`);
:func:`get_environment` is the one check sessions use too.

A package of its own, beside ``sessions/`` (which imports it, never the reverse): an environment
is a resource family with its own routes, and what a caller sees (the ``Viewer``) is decided here.
The service depends on the store's :class:`Resources` role and the edge counts' reads, a clock
and what this process holds of the edges, never on a store backend nor on the HTTP layer.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Collection, Mapping
from datetime import datetime
from typing import Any, Protocol

from control_plane.edge_counts import EdgeCounts, EdgeCountStore, count_edges
from control_plane.environments.commands import (
    CreateEnvironment,
    EnvironmentPage,
    EnvironmentQuery,
    EnvironmentView,
    UpdateEnvironment,
    Viewer,
)
from control_plane.environments.networking import validate_networking
from control_plane.environments.tool_runner import WORKER, validate_tool_runner
from control_plane.errors import (
    EnvironmentArchived,
    EnvironmentNotFound,
    InvalidRequest,
    NotFound,
    PermissionDenied,
)
from control_plane.metadata import apply_metadata_patch, check_metadata
from control_plane.patch import Keep
from control_plane.store.base import Resource, Resources

__all__ = [
    "SELF_HOSTED",
    "EnvironmentService",
    "EnvironmentStore",
    "get_environment",
    "new_environment_id",
]

SELF_HOSTED = {"type": "self_hosted"}


def new_environment_id() -> str:
    return "env_" + secrets.token_hex(12)


class EnvironmentStore(Resources, EdgeCountStore, Protocol):
    """The store roles the environment service uses."""


async def get_environment(
    store: Resources, environment_id: str, viewer: Viewer | None = None, *, usable: bool = False
) -> Resource:
    """The environment, or :class:`EnvironmentNotFound` (also when ``viewer`` does not see it);
    with ``usable``, an archived one is :class:`EnvironmentArchived`."""
    if viewer is not None and not viewer.sees(environment_id):
        raise EnvironmentNotFound(environment_id)
    try:
        res = await store.get_resource("environment", environment_id)
    except NotFound:
        raise EnvironmentNotFound(environment_id) from None
    if usable and res.archived_at is not None:
        raise EnvironmentArchived(environment_id)
    return res


class EnvironmentService:
    """``connected_here``: the ids of the edges with a tunnel up to this process (counted as
    connected at once, before presence records them); ``None``: only the store's records count."""

    def __init__(
        self,
        store: EnvironmentStore,
        clock: Callable[[], datetime],
        *,
        connected_here: Callable[[], Collection[str]] | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._connected_here = connected_here

    async def get(self, environment_id: str, viewer: Viewer) -> EnvironmentView:
        return await self._view(await get_environment(self._store, environment_id, viewer))

    async def create(self, command: CreateEnvironment, viewer: Viewer) -> EnvironmentView:
        _require_all(viewer, "creating environments")
        body = {
            "name": command.name,
            "description": command.description,
            "config": _config(command.config),
            "metadata": check_metadata(dict(command.metadata)),
            "scope": command.scope,
        }
        res = await self._store.create_resource("environment", new_environment_id(), body, self._clock())
        return EnvironmentView(res, EdgeCounts())  # a new environment has no edge yet

    async def update(
        self, environment_id: str, command: UpdateEnvironment, viewer: Viewer
    ) -> EnvironmentView:
        """An unchanged body writes nothing; a concurrent change is a ``VersionConflict``."""
        current = await get_environment(self._store, environment_id, viewer)
        _require_all(viewer, "changing environments")
        if current.archived_at is not None:
            raise EnvironmentArchived(environment_id, "and cannot be updated")
        new = _updated_body(current.body, command)
        if new == current.body:
            return await self._view(current)
        res = await self._store.update_resource(
            "environment", environment_id, new, self._clock(), expected_version=current.version
        )
        return await self._view(res)

    async def list_environments(self, query: EnvironmentQuery, viewer: Viewer) -> EnvironmentPage:
        if viewer.environment_ids is not None:
            items = await self._scoped(viewer.environment_ids, query.include_archived, query.limit)
            return EnvironmentPage(await self._views(items), None)
        result = await self._store.list_resources(
            "environment", include_archived=query.include_archived, limit=query.limit, cursor=query.cursor
        )
        return EnvironmentPage(await self._views(result.items), result.next_cursor)

    async def archive(self, environment_id: str, viewer: Viewer) -> EnvironmentView:
        await get_environment(self._store, environment_id, viewer)
        _require_all(viewer, "archiving environments")
        archived = await self._store.archive_resource("environment", environment_id, self._clock())
        return await self._view(archived)

    async def delete(self, environment_id: str, viewer: Viewer) -> None:
        await get_environment(self._store, environment_id, viewer)
        _require_all(viewer, "deleting environments")
        await self._store.delete_resource("environment", environment_id)

    # -- helpers ---------------------------------------------------------------------------
    async def _counts(self, environment_id: str | None = None) -> dict[str, EdgeCounts]:
        local = self._connected_here() if self._connected_here is not None else ()
        return await count_edges(self._store, self._clock(), local=local, environment_id=environment_id)

    async def _view(self, res: Resource) -> EnvironmentView:
        return EnvironmentView(res, (await self._counts(res.id))[res.id])

    async def _views(self, items: list[Resource]) -> list[EnvironmentView]:
        counts = await self._counts() if items else {}
        return [EnvironmentView(r, counts.get(r.id, EdgeCounts())) for r in items]

    async def _scoped(self, ids: frozenset[str], include_archived: bool, limit: int) -> list[Resource]:
        """A scoped viewer's environments, newest first: one page of at most ``limit`` (a key
        names at most 100 environments)."""
        found: list[Resource] = []
        for environment_id in ids:
            try:
                res = await self._store.get_resource("environment", environment_id)
            except NotFound:
                continue  # deleted since the key was made
            if include_archived or res.archived_at is None:
                found.append(res)
        found.sort(key=lambda r: (r.created_at, r.id), reverse=True)
        return found[:limit]


def _require_all(viewer: Viewer, what: str) -> None:
    if not viewer.sees_all:
        raise PermissionDenied(f"{what} needs an API key not limited to environments (this key is)")


def _updated_body(current: dict[str, Any], command: UpdateEnvironment) -> dict[str, Any]:
    new = dict(current)
    if command.name is not None:
        new["name"] = command.name
    if not isinstance(command.description, Keep):
        new["description"] = command.description
    if command.config is not None:
        new["config"] = _config(command.config)
    if command.metadata is not None:
        new["metadata"] = apply_metadata_patch(
            current.get("metadata", {}), dict(command.metadata), empty_deletes=True
        )
    if command.scope is not None:
        new["scope"] = command.scope
    return new


def _config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """Only ``self_hosted`` is served (omitted or null means that), with optional sandbox
    ``networking`` (see :mod:`control_plane.environments.networking`) and ``tool_runner`` (who runs
    the toolset's calls: ``edge``, the default, or ``worker``, see :mod:`control_plane.work`)."""
    if config is None:
        return {**SELF_HOSTED, "networking": {"type": "none"}}
    kind = config.get("type")
    if kind == "cloud":
        raise InvalidRequest(
            "config.type 'cloud' is not available: Outpost runs sessions on self-hosted edges only; "
            'use config {"type": "self_hosted"}',
            param="config.type",
        )
    if kind != "self_hosted":
        raise InvalidRequest(f"config.type must be 'self_hosted', not {kind!r}", param="config.type")
    extra = sorted(set(config) - {"type", "networking", "tool_runner"})
    if extra:
        raise InvalidRequest(
            f"config: {', '.join(extra)} not allowed for a self_hosted environment", param="config"
        )
    networking = validate_networking(config.get("networking"))
    checked: dict[str, Any] = {**SELF_HOSTED, "networking": networking}
    if validate_tool_runner(config.get("tool_runner")) == WORKER:  # stored only when not the default
        checked["tool_runner"] = WORKER
    return checked
