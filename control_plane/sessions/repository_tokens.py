"""Repository tokens at rest, and the session's repositories as the edge is sent them.

A ``github_repository``'s ``authorization_token`` is sealed with the vault's envelope encryption
(:func:`control_plane.vault.crypto.seal`, the vault's keyring) under associated data made of the
session id, the resource id and the repository URL (:func:`repository_aad`): a sealed token copied
to another resource, session or URL does not decrypt. It is opened in one place only,
:meth:`RepositoryTokens.spec_repositories`, which builds the wire
:class:`~outpost_wire.frames.Repository` list the edge gets with each sandbox request (the edge
uses the token for the clone and for the pull/push it relays, outside the sandbox). Archiving a
session purges its sealed tokens (:meth:`RepositoryTokens.purge`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable

from control_plane.store.base import Order, Resource, Resources
from control_plane.vault.crypto import SealedSecret, seal, unseal
from control_plane.vault.errors import DecryptionFailed, UnknownKey
from control_plane.vault.keys import Keyring
from outpost_wire.frames import Repository

from .repositories import RESOURCE_KIND

__all__ = ["RepositoryTokens", "list_repositories", "list_session_resources", "repository_aad", "to_wire"]

log = logging.getLogger(__name__)

_AAD_VERSION = 1


def repository_aad(session_id: str, resource_id: str, url: str) -> bytes:
    """Associated data binding a sealed token to its session, resource and URL."""
    fields = ["outpost-session-repository", _AAD_VERSION, session_id, resource_id, url]
    return json.dumps(fields, separators=(",", ":"), ensure_ascii=True).encode()


async def list_repositories(store: Resources, session_id: str) -> list[Resource]:
    """The session's repository resources, oldest first (at most a page: the API caps them)."""
    return [
        r
        for r in await list_session_resources(store, session_id)
        if r.body.get("type") not in ("memory_store", "file")
    ]


async def list_session_resources(store: Resources, session_id: str) -> list[Resource]:
    """All the session's resources (repositories, memory stores, files), oldest first."""
    page = await store.list_resources(
        RESOURCE_KIND, filters={"session_id": session_id}, limit=200, order=Order.ASC
    )
    return page.items


class RepositoryTokens:
    """Seals and opens repository tokens with the vault's keyring."""

    def __init__(self, keyring: Keyring) -> None:
        self._keyring = keyring

    async def seal(self, session_id: str, resource_id: str, url: str, token: str) -> dict[str, str]:
        """The stored form of ``token`` for this resource."""
        aad = repository_aad(session_id, resource_id, url)
        return (await seal(token.encode(), aad, self._keyring.current)).to_json()

    async def open(self, res: Resource) -> str:
        """The token of a repository resource ("" if it has none). DecryptionFailed if it does
        not authenticate for this resource."""
        sealed = res.body.get("sealed")
        if not sealed:
            return ""
        aad = repository_aad(str(res.body.get("session_id")), res.id, str(res.body.get("url")))
        return (await unseal(SealedSecret.from_json(sealed), aad, self._keyring)).decode()

    async def spec_repositories(self, resources: Iterable[Resource]) -> tuple[Repository, ...]:
        """The wire form of the session's repositories, tokens opened. A token that does not open
        (its key retired, the row tampered with) is left out and logged: the edge then uses its
        own credential for the host, if it has one."""
        out: list[Repository] = []
        for res in resources:
            try:
                token = await self.open(res)
            except (DecryptionFailed, UnknownKey) as exc:
                log.error("session resource %s: its token cannot be opened (%s); sent without", res.id, exc)
                token = ""
            out.append(to_wire(res, token))
        return tuple(out)

    @staticmethod
    async def purge(store: Resources, resources: Iterable[Resource]) -> None:
        """Drop the sealed tokens of ``resources`` (crypto-shredding, when a session is archived)."""
        for res in resources:
            if res.body.get("sealed"):
                await store.update_resource(
                    RESOURCE_KIND, res.id, {**res.body, "sealed": None}, res.updated_at
                )


def to_wire(res: Resource, token: str = "") -> Repository:
    """One repository resource as a wire :class:`Repository` (with ``token`` if given)."""
    checkout = res.body.get("checkout") or {}
    kind = str(checkout.get("type", ""))
    ref = str(checkout.get("name") or checkout.get("sha") or "")
    return Repository(
        id=res.id,
        url=str(res.body["url"]),
        mount_path=str(res.body["mount_path"]),
        checkout_kind=kind,
        checkout_ref=ref,
        token=token,
    )
