"""What :class:`~control_plane.environments.service.EnvironmentService` is asked, and what it answers.

Typed values, not HTTP models: the API's router translates request bodies and query strings into
these and the results back into the SDK's ``BetaEnvironment``. :class:`Viewer` (whose request it
is) is defined here because what a caller sees is a matter of environments; sessions use it too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from control_plane.edge_counts import EdgeCounts
from control_plane.patch import KEEP, Keep
from control_plane.store.base import Resource

__all__ = [
    "CreateEnvironment",
    "EnvironmentPage",
    "EnvironmentQuery",
    "EnvironmentView",
    "UpdateEnvironment",
    "Viewer",
]


@dataclass(frozen=True, slots=True)
class Viewer:
    """Whose request it is, as far as environments (and what runs in them) care: the environments
    the caller's key may see (``None``: every one). Anything of another environment is "not
    found", as if unknown."""

    environment_ids: frozenset[str] | None = None

    def sees(self, environment_id: object) -> bool:
        allowed = self.environment_ids
        return allowed is None or (isinstance(environment_id, str) and environment_id in allowed)

    @property
    def sees_all(self) -> bool:
        """Not limited to environments: may make, change, archive and delete them."""
        return self.environment_ids is None


@dataclass(frozen=True, slots=True)
class CreateEnvironment:
    name: str
    description: str | None = None
    config: Mapping[str, Any] | None = None  # raw; ``None``: self_hosted without network
    metadata: Mapping[str, str] = field(default_factory=dict)
    scope: str | None = None  # "organization" | "account"


@dataclass(frozen=True, slots=True)
class UpdateEnvironment:
    """A patch: ``None`` leaves a field be where it cannot mean "clear"; ``description`` is
    cleared by ``None`` and kept by :data:`KEEP`."""

    name: str | None = None
    description: str | Keep | None = KEEP
    config: Mapping[str, Any] | None = None
    metadata: Mapping[str, str | None] | None = None  # upsert; ``None`` and ``""`` values delete
    scope: str | None = None


@dataclass(frozen=True, slots=True)
class EnvironmentQuery:
    """A page of environments (``cursor``: the store's); a scoped viewer gets one page of its own."""

    limit: int = 20
    cursor: str | None = None
    include_archived: bool = False


@dataclass(frozen=True, slots=True)
class EnvironmentView:
    """An environment and its edges as counted now (enrolled, connected to any process)."""

    environment: Resource
    edges: EdgeCounts


@dataclass(frozen=True, slots=True)
class EnvironmentPage:
    items: list[EnvironmentView]
    next_cursor: str | None  # the store's
