"""Who is calling, and what their API key lets them do: one object the routes ask.

Every authenticated request carries the caller's key record (left in the request's state by
:class:`control_plane.api.auth.ApiKeyGate`); routes take a :class:`Caller` (the :data:`CallerDep`
dependency) and ask it rather than checking scopes by hand:

=============  =================================================================================
scope          may
=============  =================================================================================
``admin``      everything, including ``/v1/api_keys`` and ``/metrics``; never environment-scoped
``read_write`` read and write, within its environments if it has any
``read_only``  ``GET`` only (every other method is a 403 ``permission_error``, from the gate,
               before the body is read), within its environments if it has any
=============  =================================================================================

A key with ``environment_ids`` sees only those environments and what belongs to them: sessions
(and their events, streams and repositories), edges, enrollment tokens, sandboxes. Anything of
another environment is a 404 exactly like an unknown id, so a scoped key cannot learn that it
exists. What belongs to no environment: agents, vaults and files may be read by any key (their views
hold no secrets) and a session of a scoped key may use them; creating, changing or deleting
them, and creating, changing or deleting environments, needs an unscoped ``read_write`` or
``admin`` key (403 otherwise).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from control_plane.access_keys import KeyScope  # re-exported: the routes' name for it
from control_plane.api.errors import ApiError
from control_plane.errors import NotFound
from control_plane.store.base import ApiKeyRecord, Resource, Resources

__all__ = [
    "READ_METHODS",
    "Caller",
    "CallerDep",
    "KeyScope",
    "current_caller",
    "require_admin_key",
    "unscoped_writes",
]

#: The methods a ``read_only`` key may use.
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

STATE_KEY = "api_key"  # where the gate leaves the caller's key record in the request's state


def _forbidden(message: str) -> ApiError:
    return ApiError(403, message, "permission_error")


@dataclass(frozen=True, slots=True)
class Caller:
    """The caller's key and what it allows."""

    key: ApiKeyRecord

    @property
    def scope(self) -> KeyScope:
        try:
            return KeyScope(self.key.scope)
        except ValueError:  # a scope this build does not know grants nothing beyond reading
            return KeyScope.READ_ONLY

    @property
    def environment_ids(self) -> frozenset[str] | None:
        """The environments the key is limited to; ``None``: every one (admin keys always)."""
        if self.scope is KeyScope.ADMIN or self.key.environment_ids is None:
            return None
        return frozenset(self.key.environment_ids)

    def is_admin(self) -> bool:
        return self.scope is KeyScope.ADMIN

    def can_write(self) -> bool:
        return self.scope is not KeyScope.READ_ONLY

    def sees_environment(self, environment_id: str | None) -> bool:
        allowed = self.environment_ids
        return allowed is None or (environment_id is not None and environment_id in allowed)

    # -- checks that raise -----------------------------------------------------------------
    def require_admin(self, what: str) -> None:
        if not self.is_admin():
            raise _forbidden(f"{what} needs an admin API key (this key is {self.scope.value})")

    def require_write(self, what: str) -> None:
        if not self.can_write():
            raise _forbidden(f"{what} needs a read_write or admin API key (this key is read_only)")

    def require_unscoped_write(self, what: str) -> None:
        """For what belongs to no environment (agents, vaults) or makes environments."""
        self.require_write(what)
        if self.environment_ids is not None:
            raise _forbidden(f"{what} needs an API key not limited to environments (this key is)")

    def check_environment(self, environment_id: str | None, not_found: Exception) -> None:
        """Raise ``not_found`` (the caller's usual 404 for the id) unless the key sees the
        environment."""
        if not self.sees_environment(environment_id):
            raise not_found

    async def session(self, store: Resources, session_id: str) -> Resource:
        """The session, or ``NotFound`` if it does not exist or belongs to an environment the
        key does not see (the same answer, so existence does not leak)."""
        res = await store.get_resource("session", session_id)
        self.check_environment(res.body.get("environment_id"), NotFound("session", session_id))
        return res


async def current_caller(request: Request) -> Caller:
    """The :class:`Caller` of an authenticated request (a 401 if no key was checked)."""
    record = request.scope.get("state", {}).get(STATE_KEY)
    if not isinstance(record, ApiKeyRecord):
        raise ApiError(401, "missing API key: send `Authorization: Bearer <key>` or `x-api-key`")
    return Caller(record)


CallerDep = Annotated[Caller, Depends(current_caller)]


def require_admin_key(what: str) -> Callable[[Request], Awaitable[None]]:
    """A route dependency: a 403 unless the caller's key is an admin key."""

    async def dependency(request: Request) -> None:
        (await current_caller(request)).require_admin(what)

    return dependency


def unscoped_writes(what: str) -> Callable[[Request], Awaitable[None]]:
    """A router dependency for what belongs to no environment (agents, vaults): any key may read;
    any other method needs an unscoped ``read_write`` or ``admin`` key."""

    async def dependency(request: Request) -> None:
        caller = await current_caller(request)
        if request.method not in READ_METHODS:
            caller.require_unscoped_write(what)

    return dependency
