"""Typed requests to the webhook endpoint service, and what it answers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from control_plane.patch import KEEP, Keep
from control_plane.store.base import Resource

__all__ = ["CreateEndpoint", "EndpointView", "UpdateEndpoint", "Viewer"]


@dataclass(frozen=True, slots=True)
class Viewer:
    """Whose request: ``environment_ids`` ``None`` sees every endpoint; a set sees only the
    endpoints scoped to one of those environments."""

    environment_ids: frozenset[str] | None = None

    def sees(self, environment_id: str | None) -> bool:
        return self.environment_ids is None or (
            environment_id is not None and environment_id in self.environment_ids
        )


@dataclass(frozen=True, slots=True)
class CreateEndpoint:
    url: str
    event_types: Sequence[str] = ()  # empty: every type
    environment_id: str | None = None  # None: events of every environment, and of none
    description: str = ""


@dataclass(frozen=True, slots=True)
class UpdateEndpoint:
    """A patch: :data:`KEEP` leaves a field as it is."""

    url: str | Keep = KEEP
    event_types: Sequence[str] | Keep = KEEP
    description: str | Keep = KEEP
    enabled: bool | Keep = KEEP


@dataclass(frozen=True, slots=True)
class EndpointView:
    """An endpoint; ``secret`` only right after create and rotate (it is never shown again)."""

    resource: Resource
    secret: str | None = None
