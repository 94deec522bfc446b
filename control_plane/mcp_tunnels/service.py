"""MCP tunnels and their CA certificates: the rules, whoever asks (the HTTP API; the MCP router
reads a tunnel's route with :meth:`TunnelService.route_for_host`).

A tunnel is a resource of kind ``tunnel``: ``display_name``, ``domain`` and its connector token.
The domain is ``<label>.<base_domain>``, the label made from the tunnel's id, so it is never used
twice (tunnels are never deleted). The token is a random secret kept two ways in the body: its
sha256 (what an edge's token is checked against) and sealed with the vault's keyring under
associated data naming the tunnel and the token id (what ``reveal_token`` opens; a sealed token
copied to another tunnel does not open). ``rotate_token`` makes a new token and moves the old
one's hash to ``retired_tokens`` with the time it was retired: edges that connected with it
before then keep serving the tunnel, new connections with it do not. ``archive`` (irreversible,
idempotent) drops the sealed token, retires every hash, archives the certificates and then the
tunnel; an archived tunnel routes nothing and reveals nothing.

Certificates are resources of kind ``tunnel_certificate`` (``tunnel_id``, ``fingerprint``,
``expires_at``, ``pem``). The tunnel's body lists the ids of its active ones
(``certificates``), changed by compare-and-set on the tunnel's version, so at most
:data:`MAX_ACTIVE_CERTIFICATES` are active however many requests race. A certificate is written
before the tunnel lists it and unlisted before it is archived: a crash between the two steps
leaves a certificate that is shown but not trusted, never one trusted but not shown.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable
from datetime import datetime
from typing import Any

from control_plane.errors import Conflict, InvalidRequest, NotFound, VersionConflict
from control_plane.mcp.models import TunnelRoute
from control_plane.mcp_tunnels.ca_pem import parse_ca_certificate
from control_plane.mcp_tunnels.commands import ListQuery, RevealedToken
from control_plane.store.base import Page, Resource, Resources
from control_plane.timestamps import timestamp
from control_plane.vault.crypto import SealedSecret, seal, unseal
from control_plane.vault.keys import Keyring

__all__ = [
    "CERTIFICATE_KIND",
    "DEFAULT_BASE_DOMAIN",
    "MAX_ACTIVE_CERTIFICATES",
    "MAX_PAGE",
    "TUNNEL_KIND",
    "TunnelService",
    "token_hash",
]

TUNNEL_KIND = "tunnel"
CERTIFICATE_KIND = "tunnel_certificate"
#: ``.invalid`` is reserved (RFC 6761): no name under it ever resolves on the public internet.
DEFAULT_BASE_DOMAIN = "tunnels.outpost.invalid"
MAX_ACTIVE_CERTIFICATES = 2
MAX_PAGE = 1000
MAX_DISPLAY_NAME = 255
MAX_REASON = 1024
_ATTEMPTS = 8
_AAD_VERSION = 1


def token_hash(token: str) -> str:
    """What a connector token is known by: sha256, hex (the token is 256 random bits)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _token_aad(tunnel_id: str, token_id: str) -> bytes:
    fields = ["outpost-tunnel-token", _AAD_VERSION, tunnel_id, token_id]
    return json.dumps(fields, separators=(",", ":"), ensure_ascii=True).encode()


def _check_display_name(name: str | None) -> str | None:
    if name is None:
        return None
    if not 1 <= len(name) <= MAX_DISPLAY_NAME:
        raise InvalidRequest(f"display_name must be 1-{MAX_DISPLAY_NAME} characters", param="display_name")
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in name):
        raise InvalidRequest("display_name: control characters are not allowed", param="display_name")
    return name


def _check_reason(reason: str | None) -> str | None:
    if reason is not None and len(reason) > MAX_REASON:
        raise InvalidRequest(f"reason must be at most {MAX_REASON} characters", param="reason")
    return reason


class TunnelService:
    """``keyring``: the vault's, which seals the connector tokens. ``base_domain``: the name every
    tunnel's domain is made under (``control_plane.config``'s ``tunnel_base_domain``)."""

    def __init__(
        self,
        store: Resources,
        keyring: Keyring,
        clock: Callable[[], datetime],
        *,
        base_domain: str = DEFAULT_BASE_DOMAIN,
    ) -> None:
        self._store = store
        self._keyring = keyring
        self._clock = clock
        self.base_domain = base_domain.lower().strip(".")

    # -- tunnels ---------------------------------------------------------------------------------
    async def create(self, display_name: str | None) -> Resource:
        name = _check_display_name(display_name)
        label = secrets.token_hex(10)
        tunnel_id = "tnl_" + label
        token = await self._new_token(tunnel_id)
        body: dict[str, Any] = {
            "display_name": name,
            "domain": f"{label}.{self.base_domain}",
            "token": token,
            "retired_tokens": [],
            "certificates": [],
            "rotations": [],
        }
        return await self._store.create_resource(TUNNEL_KIND, tunnel_id, body, self._clock())

    async def get(self, tunnel_id: str) -> Resource:
        return await self._store.get_resource(TUNNEL_KIND, tunnel_id)

    async def list(self, query: ListQuery) -> Page:
        return await self._store.list_resources(
            TUNNEL_KIND, include_archived=query.include_archived, limit=query.limit, cursor=query.cursor
        )

    async def archive(self, tunnel_id: str) -> Resource:
        """Retire the token, archive the certificates, then the tunnel. Idempotent."""
        current = await self.get(tunnel_id)
        if current.archived_at is not None:
            return current
        now = self._clock()

        def retired(body: dict[str, Any]) -> dict[str, Any]:
            return _retired_all(body, now)

        current = await self._change(tunnel_id, retired)
        for cert_id in list(current.body.get("all_certificates", [])):
            await self._archive_certificate_resource(cert_id)
        archived = await self._store.archive_resource(TUNNEL_KIND, tunnel_id, now)
        return archived

    async def reveal_token(self, tunnel_id: str) -> RevealedToken:
        current = await self._active(tunnel_id, "reveal its token")
        token = current.body["token"]
        sealed = SealedSecret.from_json(token["sealed"])
        value = await unseal(sealed, _token_aad(tunnel_id, token["id"]), self._keyring)
        return RevealedToken(token["id"], value.decode("utf-8"))

    async def rotate_token(self, tunnel_id: str, reason: str | None) -> RevealedToken:
        """A new token; the old one's hash stays granted to the connections made before now."""
        why = _check_reason(reason)
        await self._active(tunnel_id, "rotate its token")
        fresh = await self._new_token(tunnel_id)
        now = self._clock()

        def rotated(body: dict[str, Any]) -> dict[str, Any]:
            old = body["token"]
            retired = {"id": old["id"], "hash": old["hash"], "retired_at": timestamp(now)}
            rotation = {"token_id": fresh["id"], "retired_token_id": old["id"], "at": timestamp(now)}
            return {
                **body,
                "token": fresh,
                "retired_tokens": [*body.get("retired_tokens", []), retired],
                "rotations": [*body.get("rotations", []), {**rotation, "reason": why}],
            }

        await self._change(tunnel_id, rotated, refuse_archived=True)
        return await self.reveal_token(tunnel_id)

    async def _new_token(self, tunnel_id: str) -> dict[str, Any]:
        token_id = "ttok_" + secrets.token_hex(12)
        value = "otun_" + secrets.token_urlsafe(32)
        sealed = await seal(value.encode(), _token_aad(tunnel_id, token_id), self._keyring.current)
        return {"id": token_id, "hash": token_hash(value), "sealed": sealed.to_json()}

    async def _active(self, tunnel_id: str, what: str) -> Resource:
        current = await self.get(tunnel_id)
        if current.archived_at is not None or "sealed" not in current.body.get("token", {}):
            raise InvalidRequest(f"tunnel {tunnel_id!r} is archived: cannot {what}")
        return current

    async def _change(
        self,
        tunnel_id: str,
        change: Callable[[dict[str, Any]], dict[str, Any]],
        *,
        refuse_archived: bool = False,
    ) -> Resource:
        """Apply ``change`` to the tunnel's body by compare-and-set, again on a race."""
        for _ in range(_ATTEMPTS):
            current = await self.get(tunnel_id)
            if refuse_archived and current.archived_at is not None:
                raise InvalidRequest(f"tunnel {tunnel_id!r} is archived")
            new = change(dict(current.body))
            try:
                return await self._store.update_resource(
                    TUNNEL_KIND, tunnel_id, new, self._clock(), expected_version=current.version
                )
            except VersionConflict:
                continue
        raise Conflict(f"tunnel {tunnel_id!r} kept changing; retry")

    # -- certificates ----------------------------------------------------------------------------
    async def add_certificate(self, tunnel_id: str, pem: str) -> Resource:
        parsed = parse_ca_certificate(pem)
        tunnel = await self._active(tunnel_id, "add a certificate")
        if len(tunnel.body.get("certificates", [])) >= MAX_ACTIVE_CERTIFICATES:
            raise _too_many(tunnel_id)
        cert_id = "tcrt_" + secrets.token_hex(12)
        body = {
            "tunnel_id": tunnel_id,
            "fingerprint": parsed.fingerprint,
            "expires_at": timestamp(parsed.expires_at),
            "pem": parsed.pem,
        }
        created = await self._store.create_resource(CERTIFICATE_KIND, cert_id, body, self._clock())

        def listed(body: dict[str, Any]) -> dict[str, Any]:
            active = list(body.get("certificates", []))
            if len(active) >= MAX_ACTIVE_CERTIFICATES:
                raise _too_many(tunnel_id)
            every = [*body.get("all_certificates", []), cert_id]
            return {**body, "certificates": [*active, cert_id], "all_certificates": every}

        try:
            await self._change(tunnel_id, listed, refuse_archived=True)
        except (InvalidRequest, Conflict):
            await self._store.delete_resource(CERTIFICATE_KIND, cert_id)  # never listed, never trusted
            raise
        return created

    async def get_certificate(self, tunnel_id: str, certificate_id: str) -> Resource:
        found = await self._store.get_resource(CERTIFICATE_KIND, certificate_id)
        if found.body.get("tunnel_id") != tunnel_id:
            raise NotFound(CERTIFICATE_KIND, certificate_id)
        return found

    async def list_certificates(self, tunnel_id: str, query: ListQuery) -> Page:
        await self.get(tunnel_id)  # NotFound for an unknown tunnel
        return await self._store.list_resources(
            CERTIFICATE_KIND,
            filters={"tunnel_id": tunnel_id},
            include_archived=query.include_archived,
            limit=query.limit,
            cursor=query.cursor,
        )

    async def archive_certificate(self, tunnel_id: str, certificate_id: str) -> Resource:
        """Out of the trusted set first, then archived (idempotent). The last one may go: the
        tunnel then refuses MCP traffic again."""
        found = await self.get_certificate(tunnel_id, certificate_id)
        if found.archived_at is not None:
            return found

        def unlisted(body: dict[str, Any]) -> dict[str, Any]:
            return {**body, "certificates": [c for c in body.get("certificates", []) if c != certificate_id]}

        await self._change(tunnel_id, unlisted)
        return await self._archive_certificate_resource(certificate_id)

    async def _archive_certificate_resource(self, certificate_id: str) -> Resource:
        found = await self._store.get_resource(CERTIFICATE_KIND, certificate_id)
        if found.archived_at is not None:
            return found
        return await self._store.archive_resource(CERTIFICATE_KIND, certificate_id, self._clock())

    # -- routing ---------------------------------------------------------------------------------
    def tunnel_domain(self, host: str) -> str | None:
        """The tunnel domain ``host`` lies under (``<label>.<base_domain>``), if it lies under the
        base domain at all (``None``: not a tunnel host)."""
        suffix = "." + self.base_domain
        name = host.lower().rstrip(".")
        if not name.endswith(suffix):
            return None
        label = name[: -len(suffix)].rpartition(".")[2]
        return f"{label}{suffix}" if label else None

    async def route_for_domain(self, domain: str) -> TunnelRoute | None:
        """The route of the tunnel whose domain is ``domain`` (``None``: no such tunnel)."""
        label, _, base = domain.lower().partition(".")
        if base != self.base_domain or not label:
            return None
        try:
            tunnel = await self.get("tnl_" + label)
        except NotFound:
            return None
        if tunnel.body.get("domain") != domain.lower():
            return None
        return _route(tunnel)


def _route(tunnel: Resource) -> TunnelRoute:
    body = tunnel.body
    grants: dict[str, datetime | None] = {}
    for retired in body.get("retired_tokens", []):
        grants[retired["hash"]] = datetime.fromisoformat(retired["retired_at"])
    if tunnel.archived_at is None and "hash" in body.get("token", {}):
        grants[body["token"]["hash"]] = None
    return TunnelRoute(
        tunnel_id=tunnel.id,
        domain=body["domain"],
        archived=tunnel.archived_at is not None,
        active_certificates=len(body.get("certificates", [])),
        grants=grants,
    )


def _retired_all(body: dict[str, Any], now: datetime) -> dict[str, Any]:
    """The body of an archived tunnel: no sealed token, every hash retired at ``now``."""
    retired = list(body.get("retired_tokens", []))
    token = body.get("token", {})
    if "hash" in token:
        retired.append({"id": token["id"], "hash": token["hash"], "retired_at": timestamp(now)})
    return {**body, "token": {"id": token.get("id", "")}, "retired_tokens": retired, "certificates": []}


def _too_many(tunnel_id: str) -> InvalidRequest:
    return InvalidRequest(
        f"tunnel {tunnel_id!r} has {MAX_ACTIVE_CERTIFICATES} active certificates already; "
        "archive one before adding another",
        param="ca_certificate_pem",
    )
